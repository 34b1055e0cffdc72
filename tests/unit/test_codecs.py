"""Compressed uploads (issue 41, codecs/): each codec's round trip and byte count, QSGD's unbiasedness and variance
bound over many draws, top-k's exact support, statistics and counters exact, `none` the model itself.

The statistical tests use Hoeffding's inequality, which holds for any sample size: a mean of N independent draws
in a range of width r strays from its expectation by t or more with probability at most 2·exp(−2Nt²/r²). Each
test sets t so that the chance of failing a correct codec (its false-alarm rate) is at most 1e-9 over all its
coordinates together (a union bound)."""
import math
from types import SimpleNamespace

import pytest
import torch

from seafl_dist.codecs import UpdateCodec
from seafl_dist.codecs.bits import pack, packed_bytes, unpack
from seafl_dist.codecs.formats import QSGD, TopK
from seafl_dist.models import build_model
from seafl_dist.settings import CompressionConfig
from seafl_dist.train import FlatLayout

FALSE_ALARM = 1e-9
# a layout with every kind: a weight, batch norm's running mean (a statistic), a bias, a counter
LAYOUT = SimpleNamespace(kinds=("param", "stat", "param", "counter"), shapes=((3, 4), (4,), (1000,), ()))
NUMEL, P = 1017, 1012


def codec(name, **kw):
    return UpdateCodec(CompressionConfig(codec=name, **kw), LAYOUT)


def models(seed=0, scale=0.01):
    """(trained, base) on LAYOUT: small parameter deltas, statistics and a counter that changed."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(NUMEL, generator=g)
    trained = base + scale * torch.randn(NUMEL, generator=g)
    trained[12:16] = torch.rand(4, generator=g) + 0.5  # a running variance, positive
    trained[-1] = base[-1] = 7.0
    trained[-1] += 40  # steps trained
    return trained, base


def hoeffding_t(n: int, width: float, coordinates: int) -> float:
    """The t with 2·exp(−2nt²/width²) = FALSE_ALARM / coordinates."""
    return width * math.sqrt(math.log(2 * coordinates / FALSE_ALARM) / (2 * n))


# ---- what is sent, and how many bytes ----------------------------------------------------

def test_none_uploads_the_trained_model_itself():
    trained, base = models()
    c = codec("none")
    assert not c.active and c.upload_bytes == c.model_bytes == 4 * NUMEL and c.ratio == 1
    assert c.encode(trained, base, 0) is trained and c.decode(trained, base) is trained


@pytest.mark.parametrize("name, params_bytes", [
    ("fp16", 2 * P), ("bf16", 2 * P),
    ("int8", 4 * 2 + P),  # two parameter tensors: two float32 scales, then one byte an entry
    ("qsgd", 4 * 2 + math.ceil(P * 4 / 8)),  # ⌈1012/512⌉ = 2 norms; s = 4: ⌈log2 9⌉ = 4 bits a code
    ("topk", 8 * math.ceil(0.01 * P)),  # k = ⌈10.12⌉ = 11 int32 indices and 11 float32 values
])
def test_bytes_follow_the_stated_formula_and_match_the_payload(name, params_bytes):
    trained, base = models()
    c = codec(name)
    assert c.upload_bytes == params_bytes + 4 * (NUMEL - P)  # statistics and counters: float32, exact
    upload = c.encode(trained, base, 3)
    assert upload.dtype == torch.uint8 and upload.shape == (c.upload_bytes,)
    assert c.ratio == c.upload_bytes / (4 * NUMEL)


@pytest.mark.parametrize("levels, width", [(1, 2), (2, 3), (3, 3), (4, 4), (7, 4), (8, 5), (127, 8), (128, 9)])
def test_qsgd_code_width_is_ceil_log2_of_2s_plus_1(levels, width):
    q = QSGD(10_000, levels, 512)
    assert q.width == width and q.nbytes == 4 * 20 + packed_bytes(10_000, width)


@pytest.mark.parametrize("name", ["fp16", "bf16", "int8", "qsgd", "topk"])
def test_statistics_and_counters_arrive_exact(name):
    trained, base = models()
    c = codec(name)
    w = c.decode(c.encode(trained, base, 1), base)
    exact = ~c.params
    assert torch.equal(w[exact], trained[exact])  # a quantized running variance could go negative; counters by max
    assert w[-1] == 47.0


@pytest.mark.parametrize("name, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_half_precision_rounds_each_delta_to_nearest(name, dtype):
    trained, base = models()
    c = codec(name)
    w = c.decode(c.encode(trained, base, 0), base)
    delta = (trained - base)[c.params]
    assert torch.equal(w[c.params], base[c.params] + delta.to(dtype).float())


def test_int8_one_scale_per_tensor_and_error_at_most_half_a_step():
    trained, base = models()
    trained[16:1016] = base[16:1016] + 100 * (trained[16:1016] - base[16:1016])  # tensors of other scales
    c = codec("int8")
    w = c.decode(c.encode(trained, base, 0), base)
    delta = trained - base
    for part in (slice(0, 12), slice(16, 1016)):
        step = delta[part].abs().max() / 127
        err = (w[part] - base[part]) - delta[part]
        assert err.abs().max() <= step / 2 * (1 + 1e-5)
        assert (w[part] - base[part]).abs().max() == pytest.approx(float(delta[part].abs().max()), rel=1e-6)


def test_top_k_sends_the_largest_magnitudes_exactly():
    trained, base = models()
    trained[20] = base[20] - 5.0  # the largest magnitudes are negative and positive
    trained[30] = base[30] + 4.0
    c = codec("topk", fraction=0.01)
    w = c.decode(c.encode(trained, base, 0), base)
    delta, sent = (trained - base)[c.params], (w - base)[c.params]
    k = math.ceil(0.01 * P)
    support = set(torch.nonzero(sent).flatten().tolist())
    assert support == set(torch.topk(delta.abs(), k).indices.tolist())
    assert delta.abs()[sorted(support)].min() >= delta.abs()[[i for i in range(P) if i not in support]].max()
    assert torch.equal(sent[sorted(support)], delta[sorted(support)])  # the values as float32, exactly
    assert torch.equal(w[c.params][sorted(support)], (base + (trained - base))[c.params][sorted(support)])


def test_top_k_indices_travel_as_int32_bits():
    numel = (1 << 24) + 8  # above 2^24 float32 cannot hold every integer
    t = TopK(numel, 0.5 / numel)  # k = 1
    v = torch.zeros(numel)
    v[(1 << 24) + 1] = 3.0
    data = t.encode(v, 0)
    assert data[:4].view(torch.int32).item() == (1 << 24) + 1
    assert t.decode(data)[(1 << 24) + 1] == 3.0


def test_packed_codes_round_trip_at_every_width():
    g = torch.Generator().manual_seed(0)
    for width in range(1, 17):
        for n in (1, 7, 8, 9, 1001):
            codes = torch.randint(0, 1 << width, (n,), generator=g)
            data = pack(codes, width)
            assert data.numel() == packed_bytes(n, width) == math.ceil(n * width / 8)
            assert torch.equal(unpack(data, width, n), codes)


def test_qsgd_decodes_to_norm_times_level_over_s():
    q = QSGD(1000, 4, 100)
    v = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    out = q.decode(q.encode(v, 7))
    norms = v.reshape(10, 100).norm(dim=1).repeat_interleave(100)
    levels = out / norms * 4
    assert torch.allclose(levels, levels.round(), atol=1e-4) and levels.abs().max() <= 4 + 1e-4
    assert torch.all((levels.round() == 0) | (torch.sign(levels) == torch.sign(v)))
    assert torch.equal(q.decode(q.encode(v, 7)), out) and not torch.equal(q.decode(q.encode(v, 8)), out)


# ---- QSGD, over many draws ---------------------------------------------------------------

DRAWS, D, S = 4000, 64, 4


def qsgd_draws():
    v = torch.randn(D, generator=torch.Generator().manual_seed(5))
    q = QSGD(D, S, D)  # one bucket
    return v, torch.stack([q.decode(q.encode(v, seed)) for seed in range(DRAWS)])


def test_qsgd_is_unbiased():
    v, draws = qsgd_draws()
    step = float(v.norm()) / S  # each coordinate is one of two adjacent levels, a step apart
    t = hoeffding_t(DRAWS, step, D)
    assert (draws.mean(0) - v).abs().max() <= t


def test_qsgd_variance_is_within_the_papers_bound():
    v, draws = qsgd_draws()
    sq = ((draws - v) ** 2).sum(1)
    bound = min(D / S ** 2, math.sqrt(D) / S) * float(v.norm()) ** 2
    width = D * (float(v.norm()) / S) ** 2  # each coordinate errs by less than a step
    assert sq.mean() <= bound + hoeffding_t(DRAWS, width, 1)
    # and it matches its exact value, Σ step² p(1 − p), p the chance of rounding up
    x = v.abs() / v.norm() * S
    p = x - x.floor()
    exact = float(((float(v.norm()) / S) ** 2 * p * (1 - p)).sum())
    assert abs(float(sq.mean()) - exact) <= hoeffding_t(DRAWS, width, 1)
