"""Device profiles and populations (SPEC "Device populations"): the CSV, its errors, availability."""
import hashlib
import math
import time

import numpy as np
import pytest

from seafl_dist.sim.clock import ProfiledSpeed
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import ProfileError, read_profiles

HEADER = "id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows\n"


def write(tmp_path, body, header=HEADER, name="p.csv"):
    path = tmp_path / name
    path.write_text(header + body)
    return path


def one(tmp_path, windows, period="", **kw):
    """A population of N devices all on one profile."""
    table = read_profiles(write(tmp_path, f"x,0.01,1000,500,{period},{windows}\n"))
    return Population(table, kw.pop("n", 4), 0, **kw)


# ---- the format -------------------------------------------------------------------------

def test_reads_rows_merges_touching_windows_and_hashes_content(tmp_path):
    path = write(tmp_path, "# a comment line\nphone,0.004,2500000,500000,86400,0:28800 72000:86400\n"
                           "laptop,0.0005,inf,2500000,,always\n"
                           ",0.001,1000,1000,,10:20 20:30 40:50\n")
    t = read_profiles(path)
    assert [r.id for r in t.rows] == ["phone", "laptop", "2"]
    assert t.rows[0].windows == ((72000.0, 115200.0),)  # wraps the period's end: one window
    assert t.rows[1].windows is None and t.rows[1].download_bytes_per_s == math.inf
    assert t.rows[2].windows == ((10.0, 30.0), (40.0, 50.0)) and t.rows[2].period is None
    assert t.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_whole_period_is_always(tmp_path):
    t = read_profiles(write(tmp_path, "x,0.01,1,1,10,0:4 4:10\n"))
    assert t.rows[0].windows is None


@pytest.mark.parametrize("body, fragments", [
    ("x,-0.01,1000,500,,always\n", ["line 2 field 'sec_per_sample'", ">= 0"]),
    ("x,nan,1000,500,,always\n", ["field 'sec_per_sample'", "not a finite number"]),
    ("x,0.01,0,500,,always\n", ["field 'download_bytes_per_s'", "> 0"]),
    ("x,0.01,abc,500,,always\n", ["'abc' is not a number"]),
    ("x,0.01,1,1,-5,always\n", ["field 'period_s'"]),
    ("x,0.01,1,1,,0:10 5:20\n", ["field 'windows'", "'5:20' overlaps"]),
    ("x,0.01,1,1,,10:20 0:5\n", ["'0:5' comes before"]),
    ("x,0.01,1,1,,5:5\n", ["0 <= on < off"]),
    ("x,0.01,1,1,100,50:150\n", ["ends after the period"]),
    ("x,0.01,1,1,,\n", ["field 'windows': empty"]),
    ("x,0.01,1,1,,1-2\n", ["'1-2' is not on:off"]),
    ("ok,0.01,1,1,,always\nx,0.01,1,1\n", ["line 3: 4 cells, the header has 6"]),
])
def test_bad_rows_name_file_line_and_field(tmp_path, body, fragments):
    path = write(tmp_path, body)
    with pytest.raises(ProfileError) as err:
        read_profiles(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    for f in fragments:
        assert f in msg, msg


def test_bad_files(tmp_path):
    for text, fragment in [("", "is empty"), ("# only a comment\n", "is empty"), (HEADER, "no profile rows"),
                           ("id,sec_per_sample,windows\n", "lacks column(s) ['download_bytes_per_s'"),
                           (HEADER.strip() + ",colour\n", "unknown column(s) ['colour']")]:
        with pytest.raises(ProfileError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            read_profiles(write(tmp_path, text, header=""))
    with pytest.raises(ProfileError, match="cannot be read"):
        read_profiles(tmp_path / "absent.csv")


# ---- which device takes which profile ------------------------------------------------------

def test_assignment_is_a_seeded_permutation_cycled_over_devices(tmp_path):
    body = "".join(f"p{i},0.01,1,1,,always\n" for i in range(5))
    table = read_profiles(write(tmp_path, body))
    pop = Population(table, 12, data_seed=7)
    got = [pop.profile_of(k) for k in range(12)]
    assert sorted(got[:5]) == [0, 1, 2, 3, 4]  # N <= P: all different
    assert got[5:10] == got[:5] and got[10:] == got[:2]
    assert list(pop.device_profiles()) == got
    assert got[:3] == [Population(table, 3, data_seed=7).profile_of(k) for k in range(3)]  # N-independent
    assert got != [Population(table, 12, data_seed=8).profile_of(k) for k in range(12)]


def test_million_devices_start_cheaply(tmp_path):
    body = "".join(f"p{i},0.01,1000,1000,100,{i}:{i + 50}\n" for i in range(50))
    table = read_profiles(write(tmp_path, body))
    t0 = time.perf_counter()
    pop = Population(table, 1_000_000, data_seed=0)
    busy = np.zeros(1_000_000, dtype=bool)
    busy[:1000] = True
    eligible = pop.eligible(20.0, busy)
    assert time.perf_counter() - t0 < 5.0  # one O(P) draw and numpy over N, no per-device stream
    assert len(eligible) == 1_000_000 // 50 * 21 - sum(1 for k in range(1000) if pop.profile_of(k) <= 20)


# ---- availability ------------------------------------------------------------------------

def test_half_open_windows_repeating(tmp_path):
    pop = one(tmp_path, "10:20 30:40", period=50)
    assert [pop.is_available(0, t) for t in (0, 9.99, 10, 19.99, 20, 30, 40, 60, 70, 110)] == \
           [False, False, True, True, False, True, False, True, False, True]
    assert pop.window_end(0, 10) == 20 and pop.window_end(0, 65) == 70
    assert pop.next_online(0, 0) == 10 and pop.next_online(0, 20) == 30 and pop.next_online(0, 45) == 60
    assert pop.next_online(0, 12) == 12
    with pytest.raises(ValueError, match="offline"):
        pop.window_end(0, 25)


def test_wrapping_window_and_scale(tmp_path):
    pop = one(tmp_path, "0:10 80:100", period=100, availability_scale=0.5)  # [40, 55) every 50 s
    assert pop.is_available(0, 0) and pop.window_end(0, 0) == 5  # the window of cycle -1 reaches into 0
    assert not pop.is_available(0, 5) and pop.next_online(0, 5) == 40
    assert pop.window_end(0, 41) == 55 and pop.window_end(0, 90) == 105


def test_once_and_always(tmp_path):
    pop = one(tmp_path, "10:20 30:40")
    assert pop.next_online(0, 35) == 35 and pop.next_online(0, 40) == math.inf
    assert not pop.is_available(0, 1000)
    pop = one(tmp_path, "always")
    assert pop.is_available(0, 1e9) and pop.window_end(0, 3) == math.inf and pop.next_online(0, 7) == 7


def test_vectorised_answers_match_the_scalar_ones(tmp_path):
    body = ("a,0.01,1,1,7.3,0.1:1.7 2.2:7.3\nb,0.01,1,1,,1:2 3.5:9\nc,0.01,1,1,,always\n"
            "d,0.01,1,1,3.1,0:0.4 1.9:3.1\n")  # non-integer periods: float rounding at the edges
    pop = Population(read_profiles(write(tmp_path, body)), 9, 3, availability_scale=1.7)
    busy = np.zeros(9, dtype=bool)
    busy[4] = True
    for t in np.concatenate([np.linspace(0, 60, 601), [pop.next_online(k, 11.0) for k in range(9)]]):
        t = float(t)
        want = [k for k in range(9) if pop.is_available(k, t) and not busy[k]]
        assert list(pop.eligible(t, busy)) == want
        wake, who = pop.next_wake(t, busy)
        nxt = [pop.next_online(k, t) if not busy[k] else math.inf for k in range(9)]
        assert wake == min(nxt) and list(who) == [k for k in range(9) if nxt[k] == wake]
        for k in range(9):
            if math.isfinite(nxt[k]):
                assert pop.is_available(k, nxt[k])  # next_online lands inside a window


def test_times_of_compute_and_transfers(tmp_path):
    pop = one(tmp_path, "always", model_bytes=2000, compute_scale=2.0)
    assert pop.compute_time(0, 50) == pytest.approx(50 * 0.01 * 2.0)
    assert pop.download_time(0) == 2.0 and pop.upload_time(0) == 4.0
    speed = ProfiledSpeed(pop, [50] * 4, epochs=3)
    assert speed.plan(1, 0, 10.0) == pytest.approx([13.0, 14.0, 15.0])
    assert speed.comm(1) == (2.0, 4.0) and speed.stall_reason() is None


def test_stall_reason_when_no_job_fits_a_window(tmp_path):
    pop = one(tmp_path, "0:5", period=100, model_bytes=1000)  # download 1 s + 3 epochs of 1 s + upload 2 s
    assert "no job can land" in ProfiledSpeed(pop, [100] * 4, epochs=3).stall_reason()
    assert ProfiledSpeed(pop, [50] * 4, epochs=3).stall_reason() is None  # 1 + 1.5 + 2 = 4.5 s fits


def test_never(tmp_path):
    pop = one(tmp_path, "never")
    assert not pop.is_available(0, 0) and pop.next_online(0, 0) == math.inf
    assert len(pop.eligible(0.0, np.zeros(4, dtype=bool))) == 0
    assert pop.next_wake(0.0, np.zeros(4, dtype=bool))[0] == math.inf


def test_stall_reason_counts_the_least_idle_time(tmp_path):
    from seafl_dist.settings import ClockConfig, IdleConfig
    from seafl_dist.sim import SpeedModel

    pop = one(tmp_path, "0:5", period=100, model_bytes=1000)  # fits 4.5 s jobs without idle
    zipf = SpeedModel(ClockConfig(idle=IdleConfig(distribution="zipf", resample="per_epoch")), [50] * 4, 0, 3)
    assert "no job can land" in ProfiledSpeed(pop, [50] * 4, epochs=3, idle=zipf).stall_reason()  # >= 1 s an epoch
    pareto = SpeedModel(ClockConfig(idle=IdleConfig(distribution="pareto", resample="per_epoch")), [50] * 4, 0, 3)
    assert ProfiledSpeed(pop, [50] * 4, epochs=3, idle=pareto).stall_reason() is None  # can be 0


def test_population_settings_feed_the_scheduler(tmp_path):
    from seafl_dist.sim import Scheduler
    from seafl_dist.sim.devices import population_settings

    base = dict(num_devices=4, data_seed=0, n_samples=[50] * 4, epochs=2, model_bytes=1000)
    assert population_settings(profile=None, dropout=None, **base) == {}  # nothing changes without the keys
    assert population_settings(profile=None, dropout=0.1, download_s=2.0, **base) == {"dropout": 0.1, "download_s": 2.0}
    path = write(tmp_path, "x,0.01,1000,500,100,0:60\n")
    extra = population_settings(profile=str(path), dropout=None, availability_scale=2.0, **base)
    assert extra.pop("profile_sha256") == read_profiles(path).sha256 and extra["stall_reason"] is None
    ev = list(Scheduler(concurrency=2, buffer_size=1, staleness_limit=None, partial=False, max_aggregations=3,
                        n_samples=base["n_samples"], num_devices=4, **extra).events())
    assert ev[0]["download_s"] == 1.0 and ev[0]["upload_s"] == 2.0 and ev[0]["epoch_ends"] == [1.5, 2.0]
