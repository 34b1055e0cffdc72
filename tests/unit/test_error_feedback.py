"""Error feedback (issue 41, part B; codecs/feedback.py): a device adds what it did not send to its next delta; the
bookkeeping, the order of a device's jobs, what a checkpoint holds, the one-line refusals, and the memory check."""
import math
from types import SimpleNamespace

import pytest
import torch

from seafl_dist.codecs import ErrorFeedback, UpdateCodec
from seafl_dist.runtime.model_checks import COPIES, check_model_size
from seafl_dist.settings import CompressionConfig, ConfigError, config_from_dict

LAYOUT = SimpleNamespace(kinds=("param", "stat", "param"), shapes=((50,), (4,), (200,)))
P = 250


def codec(name="topk", **kw):
    return UpdateCodec(CompressionConfig(codec=name, **kw), LAYOUT)


def trained_from(base, seed):
    g = torch.Generator().manual_seed(seed)
    return base + 0.1 * torch.randn(base.numel(), generator=g)


@pytest.mark.parametrize("name", ["topk", "qsgd", "int8", "bf16"])
def test_what_is_sent_plus_the_residual_is_every_delta(name):
    """Over a device's jobs Σ sent + r = Σ Δ: nothing is lost but the last residual; r = (Δ + r_before) − sent."""
    c, fb = codec(name, fraction=0.1), ErrorFeedback()
    base = torch.zeros(254)
    total_delta, total_sent = torch.zeros(P), torch.zeros(P)
    for job in range(6):
        trained = trained_from(base, job)
        before = fb.residual.get(3, torch.zeros(P)).clone()
        w = c.decode(c.encode(trained, base, job, fb, device=3, job=job, finish=float(job)), base)
        delta, sent = (trained - base)[c.params], (w - base)[c.params]
        assert torch.equal(fb.residual[3], (delta + before) - sent)  # the bookkeeping, exactly
        total_delta += delta
        total_sent += sent
    assert torch.allclose(total_sent + fb.residual[3], total_delta, atol=1e-5)
    assert 3 in fb.residual and set(fb.residual) == {3}  # one residual per device, over the parameters only
    assert fb.residual[3].shape == (P,) and fb.nbytes() == 4 * P


def test_top_k_with_feedback_sends_the_residual_later():
    """An entry too small to be sent once is sent once its residual has grown past the others."""
    c, fb = codec("topk", fraction=1 / P), ErrorFeedback()  # k = 1
    base, trained = torch.zeros(254), torch.zeros(254)
    trained[0], trained[54] = 1.0, 0.6  # param 0 and param 50 (flat 54: after the 4 statistics)
    sent = [(c.decode(c.encode(trained, base, j, fb, device=0, job=j, finish=j), base) - base)[c.params]
            for j in range(3)]
    assert sent[0][0] == 1.0 and sent[0][50] == 0  # the largest first
    assert sent[1][50] == pytest.approx(1.2) and sent[1][0] == 0  # then the residual 0.6 + 0.6 beats 1.0
    without = c.decode(c.encode(trained, base, 0), base)
    assert (without - base)[c.params][50] == 0  # without feedback it is never sent


def test_a_non_finite_delta_resets_the_residual():
    c, fb = codec("int8"), ErrorFeedback()
    base = torch.zeros(254)
    c.encode(trained_from(base, 0), base, 0, fb, device=1, job=0, finish=0)
    assert fb.residual[1].abs().sum() > 0
    bad = trained_from(base, 1)
    bad[7] = float("nan")
    c.encode(bad, base, 1, fb, device=1, job=1, finish=1)  # the server will reject it; the device starts over
    assert torch.equal(fb.residual[1], torch.zeros(P))


def test_a_checkpoint_holds_each_devices_residual_before_its_first_job_not_yet_taken():
    c, fb = codec("topk", fraction=0.1), ErrorFeedback()
    base = torch.zeros(254)
    c.encode(trained_from(base, 0), base, 0, fb, device=2, job=0, finish=1.0)
    fb.taken(0)
    after_0 = fb.residual[2]
    c.encode(trained_from(base, 1), base, 1, fb, device=2, job=5, finish=2.0)  # trained ahead, not yet taken
    c.encode(trained_from(base, 2), base, 2, fb, device=2, job=9, finish=3.0)
    c.encode(trained_from(base, 3), base, 3, fb, device=4, job=7, finish=2.5)  # device 4's first job, not taken
    state = fb.state()
    assert state[2] is after_0 and 4 not in state  # device 4 had no residual before its job
    fb.taken(5)
    assert fb.state()[2] is not after_0 and torch.equal(fb.state()[2], fb._before[9][2])
    again = ErrorFeedback()
    again.load(state)
    assert torch.equal(again.residual[2], after_0) and 4 not in again.residual


def test_feedback_needs_per_device_placement_and_a_codec_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, ["compression.codec=topk", "compression.error_feedback=true"])
    msg = str(err.value)
    assert "'compression.error_feedback' has value True" in msg and "runtime.placement=device" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match="false with compression.codec=none"):
        config_from_dict({}, ["compression.error_feedback=true", "runtime.placement=device"])
    cfg = config_from_dict({}, ["compression.codec=topk", "compression.error_feedback=true", "runtime.placement=device"])
    assert cfg.compression.error_feedback


def test_residuals_that_do_not_fit_are_refused_before_anything_is_allocated():
    cfg = config_from_dict({}, ["model.name=resnet18", "compression.codec=topk", "compression.error_feedback=true",
                                "runtime.placement=device"])
    params = 11_173_962  # ResNet-18 on CIFAR-10: 44.7 MB of float32 a device
    assert 4 * params / 1e6 == pytest.approx(44.7, abs=0.05) and 100 * 4 * params / 1e9 == pytest.approx(4.47, abs=0.01)
    fits = COPIES * 4 * params + 100 * 4 * params
    check_model_size(cfg, 10, 3, 32, memory=fits, num_devices=100)
    with pytest.raises(ConfigError) as err:
        check_model_size(cfg, 10, 3, 32, memory=fits - 1, num_devices=100)
    msg = str(err.value)
    assert "compression.error_feedback" in msg and "100 devices' residuals" in msg and "4.47 GB" in msg
    assert "44.7 MB a device" in msg and "\n" not in msg
    plain = config_from_dict({}, ["model.name=resnet18"])
    check_model_size(plain, 10, 3, 32, memory=COPIES * 4 * params, num_devices=100)  # no feedback: no residuals
    assert math.isclose(fits / 1e9, 4.6, abs_tol=0.05)


# ---- edges (the mutation run's survivors, docs/testing.md) -----------------------------------------------------

def test_residuals_are_float32_on_the_host_whatever_they_are_computed_in():
    fb = ErrorFeedback()
    corrected = torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
    fb.keep(0, 1, 0.0, corrected, torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64))
    fb.taken(1)
    r = fb.state()[0]
    assert r.dtype == torch.float32 and r.device.type == "cpu" and r.tolist() == [0.5, 0.0, 0.25]
    assert fb.nbytes() == 12
    fb.load({"3": torch.tensor([0.5, 1.0], dtype=torch.float64)})  # a checkpoint's keys may come back as text
    assert set(fb.residual) == {3} and fb.residual[3].dtype == torch.float32 and fb.residual[3].tolist() == [0.5, 1.0]


def test_a_job_the_server_takes_that_kept_nothing_here_is_ignored():
    fb = ErrorFeedback()
    fb.taken(42)  # no residual kept for it (or a resume cleared it): nothing to forget, no error
    fb.keep(0, 1, 0.0, torch.ones(2), torch.zeros(2))
    fb.taken(1)
    fb.taken(1)  # taken twice
    assert torch.equal(fb.state()[0], torch.ones(2))


def test_a_checkpoint_orders_a_devices_jobs_by_finish_time_not_by_job_number():
    c, fb = codec("topk", fraction=0.1), ErrorFeedback()
    base = torch.zeros(254)
    c.encode(trained_from(base, 0), base, 0, fb, device=2, job=0, finish=0.5)
    fb.taken(0)
    after_0 = fb.residual[2]
    c.encode(trained_from(base, 1), base, 1, fb, device=2, job=9, finish=1.0)  # job 9 finished first
    c.encode(trained_from(base, 2), base, 2, fb, device=2, job=5, finish=2.0)
    assert fb.state()[2] is after_0  # the residual before job 9, the earliest not taken
    fb.taken(9)
    assert torch.equal(fb.state()[2], fb._before[5][2]) and fb.state()[2] is not after_0


def test_jobs_of_one_device_that_finish_together_are_ordered_by_job_number():
    fb = ErrorFeedback()
    fb.keep(1, 0, 0.0, torch.tensor([1.0, 2.0]), torch.zeros(2))
    fb.taken(0)
    fb.keep(1, 3, 1.0, torch.tensor([3.0, 4.0]), torch.zeros(2))
    fb.keep(1, 4, 1.0, torch.tensor([5.0, 6.0]), torch.zeros(2))
    assert fb.state()[1].tolist() == [1.0, 2.0]  # before job 3
    fb.taken(3)
    assert fb.state()[1].tolist() == [3.0, 4.0]  # before job 4


def test_an_encode_without_a_finish_time_counts_as_finished_at_zero():
    c, fb = codec("topk", fraction=0.1), ErrorFeedback()
    base = torch.zeros(254)
    c.encode(trained_from(base, 0), base, 0, fb, device=6, job=1)  # finish 0.0
    c.encode(trained_from(base, 1), base, 1, fb, device=6, job=0, finish=0.5)
    assert 6 not in fb.state()  # job 1 came first, and the device had no residual before it
