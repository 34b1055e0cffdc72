"""FedScale traces into profiles (sim/fedscale.py), on small files in exactly FedScale's structure."""
import os
import pickle

import numpy as np
import pytest

from seafl_dist.sim.fedscale import TraceError, convert, import_fedscale, load_plain, main
from seafl_dist.sim.population import Population
from seafl_dist.sim.profiles import read_profiles

CAPACITY = {1: {"computation": 20.0, "communication": 800.0}, 2: {"computation": 150.5, "communication": 64.0},
            3: {"computation": 7.0, "communication": 12000.0}}
BEHAVE = {"f0": {"duration": 100, "active": [0, 300], "inactive": [100, 600], "finish_time": 600, "model": "x"},
          "f1": {"duration": 50, "active": [250, 100, 120], "inactive": [400, 150, 200], "finish_time": 500,
                 "model": "y"}}


def dump(tmp_path, name, obj):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj))
    return path


def test_rows_follow_fedscale_s_pairing_and_units(tmp_path):
    out = tmp_path / "profile.csv"
    n = import_fedscale(dump(tmp_path, "cap", CAPACITY), dump(tmp_path, "beh", BEHAVE), out)
    table = read_profiles(out)
    assert n == len(table) == 3  # max(len(capacity), len(behave))
    r0, r1, r2 = table.rows
    # client 1 -> capacity key 1 % 3 = 1, behaviour position 1 % 2 = 1 ("f1")
    assert r0.id == "fedscale-1" and r0.sec_per_sample == pytest.approx(3 * 20.0 / 1000)
    assert r0.download_bytes_per_s == r0.upload_bytes_per_s == 800.0 * 1024 / 8
    assert r0.period == 500 and r0.windows == ((100.0, 200.0), (250.0, 400.0))  # sorted, overlaps merged
    # client 3 -> capacity key 0: absent, FedScale's default {1.0, 1.0}; behaviour "f1" again
    assert r2.sec_per_sample == pytest.approx(0.003) and r2.download_bytes_per_s == 128.0
    # client 2 -> "f0": [0, 100) and [300, 600) touch across the period's end: one wrapping window
    assert r1.windows == ((300.0, 700.0),) and r1.sec_per_sample == pytest.approx(3 * 150.5 / 1000)


def test_converted_profiles_drive_a_population(tmp_path):
    text = convert(CAPACITY, BEHAVE, rows=8)
    (tmp_path / "p.csv").write_text(text)
    pop = Population(read_profiles(tmp_path / "p.csv"), 100, 0, availability_scale=0.01, model_bytes=4000)
    online = pop.eligible(1.5, np.zeros(100, dtype=bool))
    assert 0 < len(online) < 100


def test_windows_clipped_and_never(tmp_path):
    behave = {0: {"active": [50, 700], "inactive": [900, 800], "finish_time": 600, "duration": 1, "model": ""}}
    text = convert({0: {"computation": 1, "communication": 1}}, behave)
    assert text.splitlines()[1].endswith(",600.0,50.0:600.0")
    behave[0]["active"], behave[0]["inactive"] = [700], [800]  # entirely after finish_time
    assert convert({0: {"computation": 1, "communication": 1}}, behave).splitlines()[1].endswith(",never")


@pytest.mark.parametrize("capacity, behave, fragment", [
    ({"a": {"computation": 1, "communication": 1}}, BEHAVE, "no integer client ids"),
    ({0: {"computation": -1, "communication": 1}}, BEHAVE, "field 'computation': -1"),
    ({0: {"computation": 1, "communication": 0}}, BEHAVE, "'communication': 0 is not a finite number > 0"),
    ({0: {"computation": 1}}, BEHAVE, "expected a dict with 'computation' and 'communication'"),
    (CAPACITY, {1: {"active": [0], "inactive": [], "finish_time": 10}}, "lists of the same length"),
    (CAPACITY, {1: {"active": [0], "inactive": [5]}}, "'active', 'inactive' and 'finish_time'"),
    (CAPACITY, {}, "not a non-empty dict"),
])
def test_bad_traces_get_one_line(capacity, behave, fragment):
    with pytest.raises(TraceError) as err:
        convert(capacity, behave)
    assert fragment in str(err.value) and "\n" not in str(err.value)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/seafl-fedscale-pwned",))


def test_a_malicious_pickle_is_refused_before_it_runs(tmp_path):
    target = "/tmp/seafl-fedscale-pwned"
    if os.path.exists(target):
        os.remove(target)
    bad = dump(tmp_path, "evil", {1: Evil()})
    with pytest.raises(TraceError, match=r"is refused: the pickle asks for (posix|os)\.system, and only plain data"):
        load_plain(bad)
    assert not os.path.exists(target)
    with pytest.raises(TraceError, match=r"asks for numpy\S*scalar"):  # numpy numbers are classes too
        load_plain(dump(tmp_path, "np", {1: np.float64(2.0)}))
    with pytest.raises(TraceError, match="holds a set"):
        load_plain(dump(tmp_path, "set", {1: {2, 3}}))
    (tmp_path / "cut").write_bytes(pickle.dumps(CAPACITY)[:-5])
    with pytest.raises(TraceError, match="not a readable pickle"):
        load_plain(tmp_path / "cut")
    assert load_plain(dump(tmp_path, "ok", CAPACITY)) == CAPACITY


def test_command_line(tmp_path, capsys):
    cap, beh, out = dump(tmp_path, "cap", CAPACITY), dump(tmp_path, "beh", BEHAVE), tmp_path / "o.csv"
    assert main([str(cap), str(beh), "--out", str(out)]) == 0
    assert "wrote 3 profiles" in capsys.readouterr().out and len(read_profiles(out)) == 3
    evil = dump(tmp_path, "evil", Evil())
    assert main([str(evil), str(beh), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is refused" in err
