"""The devices' DP-SGD key (seafl_dist/privacy/device_key.py): a job's sampling and noise seeds against SHAKE-256
written here from the module's stated derivation; where the key comes from (train.dp_sgd.key_file,
$SEAFL_DP_SGD_KEY, the kept private/device.key, a fresh os.urandom key) and each refusal in one line; the kept file
(mode 0600); trainers racing to a fresh key, threads and processes, all end with one key; a resume's check."""
import hashlib
import multiprocessing
import stat
import struct
import threading

import pytest

from one_line import one_line_message
from seafl_dist.privacy.device_key import (DEVICE_KEY_ENV, DeviceKey, check_kept, device_key_for, device_key_path,
                                           job_seeds, open_device_key)
from seafl_dist.privacy.keys import NoiseKeyError, fingerprint
from seafl_dist.settings import config_from_dict

KEY = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(DEVICE_KEY_ENV, raising=False)


def oracle(key: bytes, purpose: str, device: int, job: int) -> int:
    """The derivation as the module's doc states it: the top 63 of 64 SHAKE-256 bits over the domain tag, the
    length-prefixed key, the length-prefixed purpose, then device and job as big-endian u64."""
    msg = b"seafl-dp-sgd/v1\0" + len(key).to_bytes(4, "big") + key + len(purpose).to_bytes(4, "big") + \
        purpose.encode() + device.to_bytes(8, "big") + job.to_bytes(8, "big")
    return int.from_bytes(hashlib.shake_256(msg).digest(8), "big") // 2


@pytest.mark.parametrize("device,job", [(0, 0), (0, 1), (1, 0), (7, 123456), (2 ** 40, 2 ** 33)])
def test_a_jobs_seeds_are_shake256_of_the_key_purpose_device_and_job(device, job):
    seeds = job_seeds(KEY, device, job)
    assert seeds == {"sample": oracle(KEY, "sample", device, job), "noise": oracle(KEY, "noise", device, job)}
    assert all(0 <= v < 2 ** 63 for v in seeds.values()) and seeds["sample"] != seeds["noise"]
    assert job_seeds(KEY[:-1] + b"X", device, job)["noise"] != seeds["noise"]  # every byte of the key counts
    assert struct.pack(">Q", seeds["noise"])  # a u64: any torch.Generator takes it


def test_the_key_comes_from_the_file_the_environment_the_kept_file_or_fresh_in_that_order(tmp_path, monkeypatch):
    f = tmp_path / "k"
    f.write_bytes(b"  " + KEY + b"\n")
    assert open_device_key(tmp_path / "a", str(f)) == (KEY, f"train.dp_sgd.key_file {f}")
    monkeypatch.setenv(DEVICE_KEY_ENV, KEY.decode())
    assert open_device_key(tmp_path / "b", None) == (KEY, f"${DEVICE_KEY_ENV}")
    monkeypatch.delenv(DEVICE_KEY_ENV)
    key, origin = open_device_key(tmp_path / "c", None)
    assert origin == "a fresh key from os.urandom" and len(key) == 64 and int(key, 16) >= 0
    kept = device_key_path(tmp_path / "c")
    assert kept.read_bytes() == key and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert open_device_key(tmp_path / "c", None) == (key, f"the key kept in {kept}")  # the kept key, not a fresh one
    assert open_device_key(tmp_path / "d", None)[0] != key  # another run dir: another fresh key
    assert not [p for p in (tmp_path / "c").iterdir() if p.name != "device.key"]  # no temp left beside it


def test_a_given_key_that_is_not_the_kept_one_is_refused_in_one_line(tmp_path):
    f = tmp_path / "k"
    f.write_bytes(KEY)
    kept, _ = open_device_key(tmp_path / "run", None)
    with pytest.raises(NoiseKeyError) as err:
        open_device_key(tmp_path / "run", str(f))
    one_line_message(str(err.value), f"train.dp_sgd.key_file {f}", fingerprint(KEY), fingerprint(kept), "--overwrite")
    device_key_path(tmp_path / "same").parent.mkdir()
    device_key_path(tmp_path / "same").write_bytes(KEY + b"\n")
    assert open_device_key(tmp_path / "same", str(f))[0] == KEY  # the same key given again: taken


@pytest.mark.parametrize("case", ["both", "short-file", "short-env", "unreadable"])
def test_a_key_that_cannot_be_used_is_refused_in_one_line(tmp_path, monkeypatch, case):
    f = tmp_path / "k"
    f.write_bytes(b"x" * (15 if case == "short-file" else 40))
    if case in ("both", "short-env"):
        monkeypatch.setenv(DEVICE_KEY_ENV, "y" * (15 if case == "short-env" else 40))
    key_file = None if case == "short-env" else str(f if case != "unreadable" else tmp_path / "missing")
    with pytest.raises(NoiseKeyError) as err:
        open_device_key(tmp_path / "run", key_file)
    msg = one_line_message(str(err.value))
    assert ("train.dp_sgd.key_file" in msg) == (case != "short-env") and (DEVICE_KEY_ENV in msg) == (case != "short-file" and case != "unreadable")
    assert ("at least 16" in msg) == case.startswith("short") and not device_key_path(tmp_path / "run").exists()


def test_trainers_racing_to_a_fresh_key_all_take_one_key(tmp_path, capsys):
    private = tmp_path / "run"
    keys, barrier = [], threading.Barrier(8)

    def one():
        barrier.wait()
        keys.append(DeviceKey(private, None, say=False).open())

    threads = [threading.Thread(target=one) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(keys) == 8 and len(set(keys)) == 1 and device_key_path(private).read_bytes() == keys[0]
    assert capsys.readouterr().err == ""  # say=False: a trainer that is told to keep quiet prints nothing
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        got = pool.map(_open_in_child, [str(tmp_path / "procs")] * 8)
    assert len(set(got)) == 1 and device_key_path(tmp_path / "procs").read_bytes() == got[0]


def _open_in_child(private: str) -> bytes:
    return open_device_key(private, None)[0]


def test_a_resume_needs_the_kept_key_or_a_given_one_and_rank_0_never_reads_it(tmp_path, monkeypatch, capsys):
    cfg = config_from_dict({"train": {"dp_sgd": {"enabled": True}}})
    private = tmp_path / "run"
    with pytest.raises(NoiseKeyError) as err:
        check_kept(private, None)
    one_line_message(str(err.value), str(device_key_path(private)), "train.dp_sgd.key_file", DEVICE_KEY_ENV,
                     "--overwrite")
    with pytest.raises(NoiseKeyError):
        device_key_for(cfg, private, resuming=True)
    assert device_key_for(cfg, private, resuming=False, trains=False) is None  # a fresh start's rank 0: nothing
    assert not private.exists()  # a fresh start opens the key at its first job, after the run dir is cleared
    fresh = device_key_for(cfg, private, resuming=False)
    assert not private.exists() and isinstance(fresh, DeviceKey)
    key = fresh.open()
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and fingerprint(key) in line and key.decode() not in line and "run.seed" in line
    path = device_key_path(private)
    path.write_bytes(b"short")  # rank 0's resume check only asks whether the file is there: it never reads it
    assert device_key_for(cfg, private, resuming=True, trains=False) is None
    with pytest.raises(NoiseKeyError, match="holds a noise key of 5 bytes") as err:  # where a trainer would read it
        device_key_for(cfg, private, resuming=True)
    assert str(err.value).startswith(f"{path} holds")  # the kept file named
    path.write_bytes(key)
    assert device_key_for(cfg, private, resuming=True).open() == key  # opened at once on a resume
    monkeypatch.setenv(DEVICE_KEY_ENV, KEY.decode())
    assert device_key_for(cfg, tmp_path / "gone", resuming=True, trains=False) is None  # given: nothing to check
    with pytest.raises(NoiseKeyError):  # given, but not the run's kept key: refused before anything trains
        device_key_for(cfg, private, resuming=True)
    assert device_key_for(config_from_dict({}), private, resuming=True) is None  # no DP-SGD: no key at all
