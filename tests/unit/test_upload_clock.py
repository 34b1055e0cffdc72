"""A compressed upload on the virtual clock (issue 41, part A): it takes its compressed bytes over the device's upload
bandwidth, or `clock.upload_s` × (compressed / full bytes) without a profile; downloads stay full; finish events carry
the bytes (and nothing new without a codec); availability windows and dropouts see the shorter upload; the trace
checker knows the ratio."""
import math

import pytest

from seafl_dist.codecs import UpdateCodec
from seafl_dist.report.trace import check_trace
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import load_config
from seafl_dist.sim import Scheduler
from seafl_dist.sim.clock import scaled_upload
from seafl_dist.sim.devices import population_settings
from seafl_dist.train import FlatLayout
from small_runs import QUICKSTART, SMALL


def events_of(*overrides):
    cfg = load_config(QUICKSTART, SMALL + ["clock.upload_s=10", "clock.download_s=3", *overrides])
    exp = prepare(cfg)
    return cfg, exp, list(exp.schedule())


def finishes(events):
    starts = {e["job"]: e for e in events if e["event"] == "start"}
    return [(e, starts[e["job"]]) for e in events if e["event"] == "finish"]


def test_without_a_codec_uploads_take_upload_s_and_finish_events_are_as_before():
    _, _, events = events_of()
    for fin, start in finishes(events):
        assert set(fin) == {"event", "time", "device", "job", "epochs"}
        assert fin["time"] == start["epoch_ends"][-1] + 10


@pytest.mark.parametrize("codec", ["fp16", "int8", "qsgd", "topk"])
def test_uploads_shrink_by_the_byte_ratio(codec):
    cfg, exp, events = events_of(f"compression.codec={codec}")
    c = UpdateCodec(cfg.compression, FlatLayout.of(exp.new_model()))
    assert c.upload_bytes < c.model_bytes
    for fin, start in finishes(events):
        assert fin["bytes"] == c.upload_bytes and fin["model_bytes"] == c.model_bytes == 4 * 61706
        assert fin["time"] == start["epoch_ends"][-1] + 10 * (c.upload_bytes / c.model_bytes)
    _, _, plain = events_of()
    first = [e for e in plain if e["event"] == "start" and e["time"] == 0]
    assert first == [e for e in events if e["event"] == "start" and e["time"] == 0]  # the download is the same
    assert not check_trace(events, concurrency=4, buffer_size=2, staleness_limit=10, partial=False, upload_s=10,
                           epochs=1, schedule_only=True)


def test_a_notified_job_uploads_compressed_too():
    """SEAFL²: a notified job uploads at the end of its epoch in progress, in the compressed upload's time."""
    cfg, exp, events = events_of("algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1",
                                 "run.seed=2", "compression.codec=topk")
    up = 10 * UpdateCodec(cfg.compression, FlatLayout.of(exp.new_model())).ratio
    notified = {e["job"] for e in events if e["event"] == "notify"}
    early = [(f, s) for f, s in finishes(events) if f["job"] in notified and f["epochs"] < 2]
    assert early and all(f["time"] == s["epoch_ends"][f["epochs"] - 1] + up for f, s in early)
    assert not check_trace(events, concurrency=4, buffer_size=2, staleness_limit=1, partial=True, upload_s=10,
                           epochs=2, schedule_only=True)


def test_the_trace_checker_refuses_an_unscaled_upload_and_sizes_that_vary():
    _, _, events = events_of("compression.codec=int8")
    kw = dict(concurrency=4, buffer_size=2, staleness_limit=10, partial=False, upload_s=10, epochs=1, schedule_only=True)
    fin, start = finishes(events)[0]
    slow = [dict(e, time=start["epoch_ends"][-1] + 10) if e is fin else e for e in events]
    assert any("finish" in p for p in check_trace(slow, **kw))
    varied = [dict(e, bytes=e["bytes"] + 1) if e is fin else e for e in events]
    assert any("different upload sizes" in p for p in check_trace(varied, **kw))


def test_with_a_profile_an_upload_is_its_bytes_over_the_bandwidth_and_a_download_the_full_model(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"
                    "x,0.01,1000,500,100,0:60\n")
    base = dict(num_devices=4, data_seed=0, n_samples=[50] * 4, epochs=2, model_bytes=1000)
    full = population_settings(profile=str(path), dropout=None, **base)
    small = population_settings(profile=str(path), dropout=None, upload_bytes=100, **base)
    for extra in (full, small):
        extra.pop("profile_sha256")
    run = dict(concurrency=2, buffer_size=1, staleness_limit=None, partial=False, max_aggregations=3,
               n_samples=base["n_samples"], num_devices=4)
    ev_full = list(Scheduler(**run, **full).events())
    ev_small = list(Scheduler(**run, **small, upload_sizes={"bytes": 100, "model_bytes": 1000}).events())
    assert ev_full[0]["download_s"] == ev_small[0]["download_s"] == 1.0  # 1000 bytes at 1000 B/s
    assert ev_full[0]["upload_s"] == 2.0 and ev_small[0]["upload_s"] == 0.2  # 1000 or 100 bytes at 500 B/s
    fin = next(e for e in ev_small if e["event"] == "finish")
    assert fin["bytes"] == 100 and fin["time"] == pytest.approx(ev_small[0]["epoch_ends"][-1] + 0.2)


def test_a_window_that_drops_the_full_upload_lets_the_compressed_one_land(tmp_path):
    """A window closing 1 s after training ends: no 2 s upload of the full model can land in it (the run stalls
    at once, known ahead), the 0.2 s compressed one does."""
    path = tmp_path / "p.csv"
    path.write_text("id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"
                    "x,0.01,1000,500,,0:3.0\n")  # download 1 s + 2 epochs of 0.5 s = 2 s, then the upload
    base = dict(num_devices=2, data_seed=0, n_samples=[50] * 2, epochs=2, model_bytes=1000)
    run = dict(concurrency=2, buffer_size=1, staleness_limit=None, partial=False, max_aggregations=2,
               n_samples=base["n_samples"], num_devices=2)
    kinds = []
    for upload_bytes in (None, 100):
        extra = population_settings(profile=str(path), dropout=None, upload_bytes=upload_bytes, **base)
        extra.pop("profile_sha256")
        kinds.append([e["event"] for e in Scheduler(**run, **extra).events()])
    assert kinds[0] == ["stall"] and kinds[1][:3] == ["start", "start", "finish"]


def test_scaled_upload_is_exact_at_ratio_one_and_linear():
    assert scaled_upload(7.5, 1000, 1000) == 7.5
    assert scaled_upload(10.0, 250, 1000) == 2.5
    assert math.isclose(scaled_upload(3.0, 1, 3), 1.0)
