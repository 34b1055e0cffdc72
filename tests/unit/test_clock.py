"""The virtual clock (SPEC "Virtual clock"): idle distributions, resampling, named streams, epoch ends."""
import numpy as np
import pytest

from seafl_dist.settings import ClockConfig, IdleConfig
from seafl_dist.sim import Scheduler, SpeedModel, draw_idle, stream, stream_seed


def speed(n_devices=8, *, seed=0, epochs=4, n=100, **idle):
    clock = ClockConfig(sec_per_sample=0.01, idle=IdleConfig(**idle))
    return SpeedModel(clock, [n] * n_devices, seed=seed, epochs=epochs)


# ---- the distributions ----------------------------------------------------------------

def test_zipf_is_integer_at_least_one_and_capped():
    z = draw_idle(stream(0, "t"), "zipf", s=1.7, a=1.0, cap=60.0, size=20000)
    assert z.min() >= 1 and z.max() == 60.0  # s = 1.7 has a heavy tail: the cap is reached
    assert np.all(z == np.round(z))
    assert np.mean(z == 1) > 0.4  # most mass at 1 (P(1) = 1/zeta(1.7) ~ 0.47)


def test_pareto_is_nonnegative_lomax_and_capped():
    z = draw_idle(stream(0, "t"), "pareto", s=1.7, a=1.0, cap=30.0, size=20000)
    assert z.min() >= 0 and z.max() == 30.0
    assert np.any(z < 1)  # Lomax form: samples start at 0, not at 1
    assert np.median(z) == pytest.approx(1.0, abs=0.1)  # Lomax(a=1) median is 2^(1/a) - 1 = 1
    assert np.mean(z == 30.0) == pytest.approx(1 / 31, abs=0.01)  # P(X > 30) = 1/(1+30)


def test_none_is_zero():
    assert np.array_equal(draw_idle(stream(0, "t"), "none", s=1.7, a=1.0, cap=60, size=5), np.zeros(5))
    sm = speed(distribution="none")
    assert sm.idle_times(3, 0) == [0.0] * 4


def test_unknown_distribution_is_rejected():
    with pytest.raises(ValueError, match="unknown idle distribution"):
        draw_idle(stream(0, "t"), "lognormal", s=1.7, a=1.0, cap=60, size=1)


def test_cap_applies_through_the_config():
    sm = speed(64, distribution="pareto", max=0.5)
    assert max(sm.idle_times(d, 0)[0] for d in range(64)) == 0.5


# ---- resampling -----------------------------------------------------------------------

def test_per_device_draws_once_for_every_epoch_and_job():
    sm = speed(distribution="pareto", resample="per_device")
    for d in range(8):
        first = sm.idle_times(d, 0)
        assert len(set(first)) == 1 and len(first) == 4
        assert all(sm.idle_times(d, j) == first for j in range(1, 5))
    assert len({sm.idle_times(d, 0)[0] for d in range(8)}) > 1  # but devices differ


def test_per_epoch_draws_every_epoch_and_job_anew():
    sm = speed(distribution="pareto", resample="per_epoch")
    z0, z1 = sm.idle_times(2, 0), sm.idle_times(2, 1)
    assert len(set(z0)) == 4 and z0 != z1
    assert sm.idle_times(2, 0) == z0  # a pure function of (seed, device, job index)


# ---- named streams ----------------------------------------------------------------------

@pytest.mark.parametrize("resample", ["per_device", "per_epoch"])
def test_adding_devices_does_not_change_anyone_elses_draws(resample):
    small = speed(3, distribution="zipf", resample=resample)
    large = speed(50, distribution="zipf", resample=resample)
    for d in range(3):
        for j in range(3):
            assert small.idle_times(d, j) == large.idle_times(d, j)
            assert small.plan(d, j, 7.0) == large.plan(d, j, 7.0)


def test_keys_of_different_lengths_never_collide():
    """numpy's SeedSequence pads short entropy with zeros: the key count must be part of the entropy."""
    assert not np.array_equal(stream(1, "idle", 3).random(4), stream(1, "idle", 3, 0).random(4))
    assert not np.array_equal(stream(1, "idle").random(4), stream(1, "idle", 0).random(4))
    assert not np.array_equal(stream(1, "train", 2, 0).random(4), stream(1, "train", 2, 0, 0).random(4))
    assert stream_seed(0, "init") != stream_seed(0, "init", 0)
    assert stream_seed(5, "select", 0) != stream_seed(5, "select", 0, 0)


def test_streams_are_named_and_seeded():
    a = stream(1, "idle", 0).random(4)
    assert np.array_equal(a, stream(1, "idle", 0).random(4))
    assert not np.array_equal(a, stream(1, "select", 0).random(4))
    assert not np.array_equal(a, stream(1, "idle", 1).random(4))
    assert not np.array_equal(a, stream(2, "idle", 0).random(4))
    assert not np.array_equal(stream(1, "train", 0, 1).random(4), stream(1, "train", 1, 0).random(4))
    s = stream_seed(1, "train", 3, 4)
    assert s == stream_seed(1, "train", 3, 4) and 0 <= s < 2 ** 63
    assert s != stream_seed(1, "train", 4, 3)
    with pytest.raises(ValueError):
        stream(-1, "idle")
    with pytest.raises(ValueError):
        stream_seed(0, "train", -2)


def test_another_seed_gives_other_idle_times():
    assert [speed(seed=0, distribution="pareto").idle_times(d, 0) for d in range(8)] != \
        [speed(seed=1, distribution="pareto").idle_times(d, 0) for d in range(8)]


# ---- epoch ends and communication ---------------------------------------------------------

def test_epoch_ends_are_start_plus_download_plus_compute_and_idle():
    clock = ClockConfig(sec_per_sample=0.01, download_s=2.0, idle=IdleConfig(distribution="zipf"))
    sm = SpeedModel(clock, [100, 250], seed=5, epochs=3)
    assert sm.compute_time(0) == pytest.approx(1.0) and sm.compute_time(1) == pytest.approx(2.5)
    for d in (0, 1):
        z = sm.idle_times(d, 0)[0]
        c = sm.compute_time(d)
        assert sm.plan(d, 0, 10.0) == pytest.approx([10.0 + 2.0 + e * (c + z) for e in (1, 2, 3)])


def test_epoch_ends_add_each_epochs_own_idle():
    clock = ClockConfig(sec_per_sample=0.5, idle=IdleConfig(distribution="pareto", resample="per_epoch"))
    sm = SpeedModel(clock, [4], seed=2, epochs=3)
    z = sm.idle_times(0, 1)
    assert sm.plan(0, 1, 0.0) == pytest.approx(np.cumsum([2.0 + zi for zi in z]).tolist())


def test_upload_is_added_to_the_finish_time():
    clock = ClockConfig(sec_per_sample=0.01, download_s=1.0, upload_s=3.0, idle=IdleConfig(distribution="pareto"))
    sm = SpeedModel(clock, [100] * 6, seed=0, epochs=2)
    ev = list(Scheduler(num_devices=6, concurrency=3, buffer_size=1, staleness_limit=None, partial=False,
                        plan=sm.plan, upload_s=3.0, max_aggregations=6).events())
    starts = {e["job"]: e for e in ev if e["event"] == "start"}
    finishes = [e for e in ev if e["event"] == "finish"]
    assert finishes
    for f in finishes:
        s = starts[f["job"]]
        assert s["epoch_ends"][0] > s["time"] + 1.0  # download before epoch 1
        assert f["time"] == s["epoch_ends"][-1] + 3.0
