"""The transport layer: flat models (parameters, BN statistics, integer buffers), message
headers and payload checks. The exchange over real gloo ranks is in test_transport_gloo.py."""
import math

import pytest
import torch

from seafl_dist.models import build_model
from seafl_dist.train import flatten, load_flat
from seafl_dist.transport import JOB, RESULT, STOP, Header, MessageError, check_payload
from seafl_dist.transport.messages import HEADER_LEN


# ---- flatten / load_flat on the paper's batch-norm models ------------------------------

def trained_a_little(name):
    torch.manual_seed(0)
    model = build_model(name, 10, 3, width=0.125, image_size=32)
    model.train()
    with torch.no_grad():
        for _ in range(2):  # move BN running stats off their init; num_batches_tracked -> 2
            model(torch.randn(4, 3, 32, 32))
        next(model.parameters()).add_(0.5)
    return model


@pytest.mark.parametrize("name", ["resnet18", "vgg16"])
def test_flat_round_trip_keeps_parameters_bn_stats_and_integer_buffers(name):
    src = trained_a_little(name)
    flat = flatten(src)
    assert flat.dtype == torch.float32 and flat.dim() == 1 and flat.is_contiguous()
    assert flat.numel() == sum(t.numel() for t in src.state_dict().values())
    int_buffers = [n for n, t in src.state_dict().items() if not t.dtype.is_floating_point]
    assert int_buffers and all(n.endswith("num_batches_tracked") for n in int_buffers)
    assert any(n.endswith("running_var") for n in src.state_dict())

    torch.manual_seed(1)
    dst = build_model(name, 10, 3, width=0.125, image_size=32)
    load_flat(dst, flat)
    for (key, a), (key_b, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        assert key == key_b and a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a, b), key
    assert all(int(dst.state_dict()[n]) == 2 for n in int_buffers)
    assert torch.equal(flatten(dst), flat)
    with pytest.raises(ValueError):
        load_flat(dst, flat[:-1])


# ---- headers ---------------------------------------------------------------------------

@pytest.mark.parametrize("finish", [0.0, 1234.5678901, 0.1 + 0.2, -0.0, 1e-300, math.inf, 2.0 ** 60 + 0.5])
def test_header_round_trip_is_exact(finish):
    h = Header(JOB, job=123456789012, device=-7, version=-1, epochs=5, has_payload=True, finish=finish,
               payload_numel=11_173_962, steps=37)  # steps: a FedCompass job's assigned local steps
    t = h.encode()
    assert t.dtype == torch.int64 and t.shape == (HEADER_LEN,)
    back = Header.decode(t)
    assert back == h
    assert math.copysign(1.0, back.finish) == math.copysign(1.0, finish)  # -0.0 keeps its sign bit
    assert Header.decode(Header(STOP).encode()) == Header(STOP)  # defaults: negative ids, no payload


def test_header_rejects_unknown_kind_and_wrong_shape():
    good = Header(RESULT, job=1).encode()
    bad_kind = good.clone()
    bad_kind[0] = 99
    with pytest.raises(MessageError, match="unknown message kind 99"):
        Header.decode(bad_kind)
    with pytest.raises(MessageError):
        Header.decode(good[:-1])
    with pytest.raises(MessageError):
        Header.decode(good.to(torch.int32))
    with pytest.raises(MessageError):
        Header.decode(good[:-1].view(3, 3))


def test_check_payload_rejects_a_wrong_size():
    h = Header(RESULT, job=3, has_payload=True, payload_numel=10)
    check_payload(h, torch.zeros(10), 10)
    with pytest.raises(MessageError, match="job 3"):
        check_payload(h, torch.zeros(9), 10)  # payload shorter than the model
    with pytest.raises(MessageError):
        check_payload(Header(RESULT, has_payload=True, payload_numel=12), torch.zeros(12), 10)  # header and model disagree
    with pytest.raises(MessageError):
        check_payload(h, torch.zeros(2, 5), 10)  # not flat


def test_check_payload_of_a_compressed_upload_wants_its_codec_bytes_and_length():
    """A RESULT with a codec (issue 41) carries uint8 bytes of the codec's length, and says which codec."""
    upload = (5, 40)  # top-k, 40 bytes
    h = Header(RESULT, job=4, has_payload=True, payload_numel=40, codec=5)
    assert Header.decode(h.encode()) == h and h.encode().shape == (HEADER_LEN,)
    check_payload(h, torch.zeros(40, dtype=torch.uint8), 10, upload)
    with pytest.raises(MessageError, match="float32"):
        check_payload(h, torch.zeros(40), 10, upload)  # bytes must stay bytes
    with pytest.raises(MessageError, match="codec 5 sends 40"):
        check_payload(Header(RESULT, job=4, has_payload=True, payload_numel=39, codec=5),
                      torch.zeros(39, dtype=torch.uint8), 10, upload)
    with pytest.raises(MessageError, match="codec 3, the run's is 5"):
        check_payload(Header(RESULT, job=4, has_payload=True, payload_numel=40, codec=3),
                      torch.zeros(40, dtype=torch.uint8), 10, upload)
    with pytest.raises(MessageError, match="codec 0, the run's is 5"):  # a float32 model where bytes were due
        check_payload(Header(RESULT, job=4, has_payload=True, payload_numel=10), torch.zeros(10), 10, upload)
    with pytest.raises(MessageError, match="codec 5, the run's is 0"):  # bytes in a run without a codec
        check_payload(h, torch.zeros(40, dtype=torch.uint8), 10)
    check_payload(Header(JOB, job=4, has_payload=True, payload_numel=10), torch.zeros(10), 10, upload)  # downloads: full


# ---- which transport carries payloads ---------------------------------------------------

def test_payloads_go_over_gloo_unless_nccl_is_asked_for_and_possible(capsys):
    from seafl_dist.runtime.distributed import pick_backend
    cpu = torch.device("cpu")
    assert pick_backend("auto", cpu) == pick_backend("gloo", cpu) == "gloo"
    assert capsys.readouterr().err == ""
    assert pick_backend("nccl", cpu) == "gloo"  # NCCL needs one GPU per rank
    assert "runtime.backend=nccl needs one GPU per rank; using gloo" in capsys.readouterr().err
    assert pick_backend("auto", torch.device("cuda", 0)) == "gloo"  # "auto" never picks NCCL, even where it could run
