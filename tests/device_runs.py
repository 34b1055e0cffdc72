"""The device population the `seafl run` tests of profiles and dropouts use (docs/devices.md).

A profile of four rows written by the test: phones online 25 s of every 40 (so jobs that span a
window's close drop, and the devices come back), a tablet online in a shifted window, a laptop
that is always on, a slow device with a slow network. Runs are the tiny quickstart variant
(small_runs.SMALL) with idle times off, so job lengths come from the profile alone.
"""
import hashlib
from pathlib import Path

from small_runs import SMALL

PROFILE = """\
# written by tests/device_runs.py
id,sec_per_sample,download_bytes_per_s,upload_bytes_per_s,period_s,windows
phone,0.03,1000000,500000,40,0:25
tablet,0.02,2000000,250000,40,10:38
laptop,0.01,inf,1000000,,always
slow,0.06,250000,125000,60,0:30 35:60
"""
# Every device online for 8 s once, never again: the run stalls once they have gone.
GONE = """\
sec_per_sample,download_bytes_per_s,upload_bytes_per_s,windows
0.001,inf,inf,0:8
"""
CHURN = [*SMALL, "clock.idle.distribution=none", "devices.dropout=0.2"]


def write_profile(path: Path, text: str = PROFILE) -> Path:
    path.write_text(text)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def churn_overrides(profile: Path, *extra) -> list[str]:
    return [*CHURN, f"devices.profile={profile}", *extra]
