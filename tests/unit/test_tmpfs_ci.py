"""tests/tmpfs.py: where no tmpfs can be mounted the full-disk tests skip, but under CI=true they fail."""
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PROBE = """
import os, sys
sys.path.insert(0, {tests!r})
os.geteuid = lambda: 1000  # as a user who may not mount
from tmpfs import tmpfs
def test_probe(tmp_path):
    with tmpfs(tmp_path / "m", "size=1m"):
        pass
"""


def run_probe(tmp_path, ci: str | None):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE.format(tests=str(TESTS)))
    env = {"PATH": "/usr/bin:/bin", "CI": ci} if ci is not None else {"PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(probe)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_without_a_mount_the_full_disk_tests_skip_but_fail_under_ci(tmp_path):
    local = run_probe(tmp_path, None)
    assert local.returncode == 0 and "1 skipped" in local.stdout and "needs root" in local.stdout, local.stdout
    ci = run_probe(tmp_path, "true")
    assert ci.returncode == 1 and "1 failed" in ci.stdout, ci.stdout
    assert "the full-disk tests cannot run under CI: mounting a tmpfs needs root" in ci.stdout, ci.stdout
