"""The gaps the planted slips of the devices' DP-SGD key left open (docs/audits/dp_sgd_device_key.md): a job's
arguments as run_job hands them to train_job (Poisson seed and noise seed each the SHAKE-256 derivation of the
key's purpose for *this* device and job, written here from privacy/device_key.py's doc, never run.seed's; the
calibrated section); the exclusive-create fallback where the file system has no hard links; one start line per
trainer however many jobs it keys."""
import errno
import hashlib
import os
import stat
from types import SimpleNamespace

import pytest

from seafl_dist.privacy import device_key
from seafl_dist.privacy.device_key import DEVICE_KEY_ENV, DeviceKey, device_key_path
from seafl_dist.runtime import executor
from seafl_dist.runtime.executor import JobSpec
from seafl_dist.settings import config_from_dict
from seafl_dist.sim import stream_seed

KEY = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(DEVICE_KEY_ENV, raising=False)


def oracle(key: bytes, purpose: str, device: int, job: int) -> int:
    """The module doc's derivation: the top 63 of 64 SHAKE-256 bits over the tag, the length-prefixed key and
    purpose, then device and job as big-endian u64."""
    msg = b"seafl-dp-sgd/v1\0" + len(key).to_bytes(4, "big") + key + len(purpose).to_bytes(4, "big") + \
        purpose.encode() + device.to_bytes(8, "big") + job.to_bytes(8, "big")
    return int.from_bytes(hashlib.shake_256(msg).digest(8), "big") >> 1


def test_run_job_hands_train_job_the_keys_seeds_of_this_device_and_job_and_the_calibrated_section(tmp_path,
                                                                                                   monkeypatch):
    """Device 2's job 5 (device != job, so their order shows): ``seed`` is the key's ``sample`` draw (Poisson
    batches), ``dp_seed`` its ``noise`` draw, neither run.seed's data-order stream; ``dp_sgd`` the Experiment's."""
    cfg = config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"buffer_size": 2},
                            "train": {"dp_sgd": {"enabled": True}}})
    f = tmp_path / "k"
    f.write_bytes(KEY)
    calibrated = SimpleNamespace(noise_multiplier=0.7)
    got = {}
    monkeypatch.setattr(executor, "train_job", lambda *a, **kw: got.update(kw))
    exp = SimpleNamespace(cfg=cfg, dp_sgd=calibrated, dp_key=DeviceKey(tmp_path / "run", str(f), say=False),
                          train=SimpleNamespace(to=lambda d: "rows"), shard=lambda d: f"shard {d}", device="cpu")
    executor.run_job(exp, None, JobSpec(job=5, device=2, version=0, epochs=1, finish=1.0), start=None)
    sample, noise = oracle(KEY, "sample", 2, 5), oracle(KEY, "noise", 2, 5)
    assert sample != stream_seed(cfg.run.seed, "train", 2, 5)
    assert (got["seed"], got["dp_seed"], got["dp_sgd"]) == (sample, noise, calibrated)
    assert got["torch_seed"] == stream_seed(cfg.run.seed, "torch", 2, 5)  # the layers' stream stays run.seed's
    got.clear()
    exp.cfg = config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"buffer_size": 2}})
    executor.run_job(exp, None, JobSpec(job=5, device=2, version=0, epochs=1, finish=1.0), start=None)
    assert got["seed"] == stream_seed(cfg.run.seed, "train", 2, 5) and "dp_seed" not in got and "dp_sgd" not in got


def test_without_hard_links_the_exclusive_create_keeps_the_first_key(tmp_path, monkeypatch):
    """A file system where os.link fails (EPERM): the first trainer's exclusive create keeps its key (mode 0600),
    a later one's is not taken, and every opening returns the kept bytes."""
    def no_link(src, dst):
        raise OSError(errno.EPERM, "no hard links here")

    monkeypatch.setattr(os, "link", no_link)
    private = tmp_path / "run"
    path = device_key_path(private)
    private.mkdir()
    assert device_key._publish(path, KEY) is True
    assert device_key._publish(path, b"another key, sixteen bytes or more") is False
    assert path.read_bytes() == KEY and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in private.iterdir()] == ["device.key"]  # no temp left beside it
    key, origin = device_key.open_device_key(tmp_path / "fresh", None)
    assert device_key_path(tmp_path / "fresh").read_bytes() == key and origin == "a fresh key from os.urandom"
    assert device_key.open_device_key(tmp_path / "fresh", None)[0] == key


def test_a_trainer_says_where_its_key_came_from_once_however_many_jobs_it_keys(tmp_path, capsys):
    key = DeviceKey(tmp_path / "run", None)
    first = key.seeds(0, 1)
    assert key.seeds(0, 1) == first and key.seeds(3, 2) != first
    assert capsys.readouterr().err.count("seafl: dp_sgd: ") == 1
