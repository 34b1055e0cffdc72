"""``seafl devices import-fedscale`` (issue 17, point 3): FedScale's two pickles, written here in exactly
their structure, become a profile CSV that `seafl run` takes; a pickle naming a function is refused in
one line (exit 2) before it runs."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

from one_line import one_error_line
from seafl_dist.sim.profiles import read_profiles

ROOT = Path(__file__).resolve().parents[2]
# {id: {'computation': inference ms per sample, 'communication': kbit/s}} and FLASH's behaviour traces
CAPACITY = {1: {"computation": 20.0, "communication": 800.0}, 2: {"computation": 150.5, "communication": 64.0},
            3: {"computation": 7.0, "communication": 12000.0}}
BEHAVE = {"f0": {"duration": 100, "active": [0, 300], "inactive": [100, 600], "finish_time": 600, "model": "x"},
          "f1": {"duration": 50, "active": [250, 100, 120], "inactive": [400, 150, 200], "finish_time": 500,
                 "model": "y"}}


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/seafl-import-pwned",))


def seafl(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seafl_dist", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_import_fedscale_writes_a_profile_the_run_reads(tmp_path):
    cap, beh, out = tmp_path / "client_device_capacity", tmp_path / "client_behave_trace", tmp_path / "fs.csv"
    cap.write_bytes(pickle.dumps(CAPACITY))
    beh.write_bytes(pickle.dumps(BEHAVE))
    done = seafl("devices", "import-fedscale", cap, beh, "--out", out)
    assert done.returncode == 0, done.stderr
    assert f"wrote 3 device profiles to {out}" in done.stderr
    table = read_profiles(out)
    assert [r.id for r in table.rows] == ["fedscale-1", "fedscale-2", "fedscale-3"]
    assert table.rows[0].upload_bytes_per_s == 800.0 * 1024 / 8  # FedScale's kbit/s, one bandwidth both ways
    dry = seafl("run", "quickstart", f"devices.profile={out}", "devices.availability_scale=0.1", "--out",
                tmp_path / "run", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"profile: {out} (3 rows" in dry.stdout


def test_import_fedscale_refuses_a_malicious_pickle_in_one_line(tmp_path):
    target = Path("/tmp/seafl-import-pwned")
    target.unlink(missing_ok=True)
    evil, beh = tmp_path / "evil", tmp_path / "beh"
    evil.write_bytes(pickle.dumps({1: Evil()}))
    beh.write_bytes(pickle.dumps(BEHAVE))
    refused = seafl("devices", "import-fedscale", evil, beh, "--out", tmp_path / "fs.csv")
    assert refused.returncode == 2
    assert one_error_line(refused.stderr, "system").startswith(f"seafl: error: {evil} is refused")
    assert not target.exists() and not (tmp_path / "fs.csv").exists()
