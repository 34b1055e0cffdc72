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
from seafl_dist.codecs.formats import QSGD, Half, Int8, TopK, make_format
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


# ---- edges: exact layouts, refusals, sizes (the mutation run's survivors, docs/testing.md) -----------------

def test_unpack_refuses_a_wrong_byte_count_naming_the_right_one():
    with pytest.raises(ValueError, match=r"^3 bytes hold 9 codes of 3 bits only as 4$"):  # ⌈27 / 8⌉ = 4
        unpack(torch.zeros(3, dtype=torch.uint8), 3, 9)


def test_packed_bits_are_least_significant_first_across_byte_boundaries():
    # codes 5 = 101b, 3 = 011b, 6 = 110b at bits [0, 3), [3, 6), [6, 9): byte 0 holds bits 0, 2, 3, 4, 7 and
    # byte 1 bit 8: 1 + 4 + 8 + 16 + 128 = 157, then 1
    data = pack(torch.tensor([5, 3, 6]), 3)
    assert data.dtype == torch.uint8 and data.tolist() == [157, 1]
    assert unpack(torch.tensor([157, 1], dtype=torch.uint8), 3, 3).tolist() == [5, 3, 6]


def test_32_bit_codes_keep_their_top_bit():
    top = (1 << 32) - 1
    assert pack(torch.tensor([top, 1 << 31]), 32).tolist() == [255, 255, 255, 255, 0, 0, 0, 128]
    out = unpack(torch.tensor([255, 255, 255, 255, 0, 0, 0, 128], dtype=torch.uint8), 32, 2)
    assert out.dtype == torch.int64 and out.tolist() == [top, 1 << 31]


def test_qsgd_bytes_with_a_short_last_bucket_and_a_norm_below_one():
    # P = 5, d = 3: buckets [0, 0.5, 0] (norm 0.5) and [0, −0.25] (norm 0.25). s = 2: an entry alone in its bucket
    # has x = s exactly, so every code is certain: c + s = [2, 4, 2, 2, 0], 3 bits each (⌈log2 5⌉)
    q = QSGD(5, 2, 3)
    v = torch.tensor([0.0, 0.5, 0.0, 0.0, -0.25])
    data = q.encode(v, 0)
    assert q.nbytes == 4 * 2 + 2 and data.numel() == q.nbytes
    assert data[:8].tolist() == [0, 0, 0, 0x3F, 0, 0, 0x80, 0x3E]  # 0.5 and 0.25 as little-endian float32
    # codes at bits [0,3) 2, [3,6) 4, [6,9) 2, [9,12) 2, [12,15) 0: bits 1, 5, 7 | 10
    assert data[8:].tolist() == [2 + 32 + 128, 4]
    out = q.decode(data)
    assert out.dtype == torch.float32 and out.tolist() == [0.0, 0.5, 0.0, 0.0, -0.25]


def test_qsgd_bucket_whose_norm_is_zero_sends_level_zero_for_every_entry():
    # 1e−30² = 1e−60 underflows float32 (its smallest subnormal is 1.4e−45): the bucket's float32 norm is 0
    q = QSGD(4, 1, 2)
    data = q.encode(torch.tensor([1e-30, 0.0, 0.0, 0.0]), 0)
    assert data[:8].tolist() == [0] * 8
    assert data[8:].tolist() == [1 + 4 + 16 + 64]  # four codes c + s = 0 + 1, 2 bits each
    assert torch.equal(q.decode(data), torch.zeros(4))


def test_qsgd_with_buckets_of_one_entry_is_exact_whatever_the_draws():
    # x = s·|u|/‖u‖ = s exactly: no fractional part, never rounded up, even by a draw of exactly 0.0 (seed 146
    # draws one at entry 18,555)
    n = 18_556
    assert torch.rand(n, generator=torch.Generator().manual_seed(146))[-1] == 0.0
    q = QSGD(n, 1, 1)
    v = torch.ones(n)
    v[::2] = -1.0
    assert torch.equal(q.decode(q.encode(v, 146)), v)


def test_int8_codes_stay_within_127_when_the_scale_is_subnormal():
    # m = 128·2^−149: m / 127 rounds to 2^−149, so m / scale = 128, clamped to 127 (and −128 to −127)
    m = float(torch.tensor(128, dtype=torch.int32).view(torch.float32))
    f = Int8([2])
    data = f.encode(torch.tensor([m, -m]), 0)
    assert data.tolist() == [1, 0, 0, 0, 127, 129]  # scale 2^−149 (bits 0x00000001), codes 127 and −127
    smallest = float(torch.tensor(1, dtype=torch.int32).view(torch.float32))
    assert f.decode(data).tolist() == [127 * smallest, -127 * smallest]


def test_int8_with_a_parameter_tensor_of_no_entries():
    f = Int8([2, 0, 1])
    assert f.nbytes == 4 * 3 + 3
    data = f.encode(torch.tensor([2.0, -2.0, 0.5]), 0)
    assert data.numel() == 15 and data[4:8].tolist() == [0, 0, 0, 0]  # the empty tensor's scale: 0
    assert data[12:].tolist() == [127, 129, 127]
    assert torch.allclose(f.decode(data), torch.tensor([2.0, -2.0, 0.5]))


@pytest.mark.parametrize("f, sent", [
    (Half(torch.float16, 4), [0.5, -1.125, 2.0, 0.25]), (Half(torch.bfloat16, 4), [0.5, -1.125, 2.0, 0.25]),
    (QSGD(4, 2, 1), [0.5, -1.125, 2.0, 0.25]),  # one entry a bucket: exact
    (TopK(4, 0.5), [0.0, -1.125, 2.0, 0.0]),  # k = 2: the two largest magnitudes
    (Int8([4]), [c * 2 / 127 for c in (32, -71, 127, 16)]),  # scale 2/127: 31.75, −71.4375, 127, 15.875 rounded
], ids=["fp16", "bf16", "qsgd", "topk", "int8"])
def test_formats_send_float32_and_decode_to_float32_whatever_the_deltas_dtype(f, sent):
    v = torch.tensor([0.5, -1.125, 2.0, 0.25])
    for x in (v, v.double()):
        data = f.encode(x, 0)
        assert data.dtype == torch.uint8 and data.numel() == f.nbytes
        out = f.decode(data)
        assert out.dtype == torch.float32 and torch.allclose(out, torch.tensor(sent), rtol=0, atol=1e-6)


def test_an_unknown_codec_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^unknown codec 'zip'$"):
        make_format(SimpleNamespace(codec="zip"), [3])


def test_top_k_refuses_2_to_the_31_parameters():
    with pytest.raises(ValueError, match=r"^top-k indexes at most 2\^31 − 1 parameters with int32 indices, "
                                         r"not 2147483648$"):
        TopK(2 ** 31, 0.5)
    with pytest.raises(ValueError, match="not 3000000000$"):
        TopK(3_000_000_000, 0.5)
    assert TopK(2 ** 31 - 1, 1e-12).nbytes == 8  # k = ⌈0.002⌉ = 1


@pytest.mark.parametrize("name, wire_id", [("fp16", 1), ("bf16", 2), ("int8", 3), ("qsgd", 4), ("topk", 5)])
def test_a_results_header_says_the_codec_and_the_upload_bytes(name, wire_id):
    c = codec(name)
    assert c.name == name and c.wire == (wire_id, c.upload_bytes)
    assert codec("none").wire == (0, 0)


def test_an_upload_of_the_wrong_size_dtype_or_shape_is_refused_in_words():
    trained, base = models()
    c = codec("int8")
    n = c.upload_bytes  # 4·2 + 1012 + 4·5 = 1040
    assert n == 1040
    with pytest.raises(ValueError, match=r"^an upload of 1039 torch.uint8 values; int8 sends 1040 torch.uint8 values "
                                         r"for this model$"):
        c.decode(torch.zeros(n - 1, dtype=torch.uint8), base)
    with pytest.raises(ValueError, match=r"^an upload of 1040 torch.float32 values; int8 sends 1040 torch.uint8"):
        c.decode(torch.zeros(n), base)
    with pytest.raises(ValueError, match=r"^an upload of 1040 torch.uint8 values"):
        c.decode(torch.zeros((2, n // 2), dtype=torch.uint8), base)
    with pytest.raises(ValueError, match=r"^an upload of 1016 torch.float32 values; none sends 1017 torch.float32"):
        codec("none").decode(trained[1:], base)


def test_a_model_of_parameters_only_is_its_base_plus_the_decoded_delta():
    layout = SimpleNamespace(kinds=("param", "param"), shapes=((3,), (2, 2)))
    c = UpdateCodec(CompressionConfig(codec="fp16"), layout)
    base = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    trained = base + torch.tensor([0.5, -0.25, 0.0, 1.0, -2.0, 0.125, 4.0])
    upload = c.encode(trained, base, 0)
    assert c.upload_bytes == upload.numel() == 14
    assert torch.equal(c.decode(upload, base), trained)


def test_a_float64_model_uploads_the_same_number_of_bytes():
    trained, base = models()
    c = codec("topk")
    upload = c.encode(trained.double(), base.double(), 0)
    assert upload.numel() == c.upload_bytes  # the statistics and counters as float32 too
    w = c.decode(upload, base)  # the server's base: float32
    assert torch.equal(w[~c.params], trained[~c.params])


@pytest.mark.parametrize("name", ["none", "fp16"])
def test_a_model_with_no_entries(name):
    c = UpdateCodec(CompressionConfig(codec=name), SimpleNamespace(kinds=(), shapes=()))
    assert c.numel == 0 and c.model_bytes == 0 and c.upload_bytes == 0 and c.params.dtype == torch.bool
    empty = torch.zeros(0)
    upload = c.encode(empty, empty, 0)
    assert upload.numel() == 0 and c.decode(upload, empty).numel() == 0
