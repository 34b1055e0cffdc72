"""The devices' DP-SGD key: what record-level DP-SGD's randomness is drawn from, where that key comes from, where it is
kept, and who reads it.

DP-SGD (``train.dp_sgd``, train/dp_sgd.py) protects a device's records against whoever sees its uploads, the
server included. Its guarantee needs two draws of every step to be secret from them: which records the Poisson
batch holds (amplification by subsampling assumes the sample is unknown) and the Gaussian noise. So neither is drawn
from ``run.seed``, which config.yaml and W&B record: both come from this key.

- **Per job** (:func:`job_seeds`): a job's sampling seed and noise seed are 63 bits each of SHAKE-256 over a domain
  tag, the key (length-prefixed), the purpose (``sample``, ``noise``), the device and the job. In a deployment
  every device would hold a key of its own; here one key stands for the devices' keys, and (device, job) in the
  hash makes each device's streams its own. A job's seeds are the same on any rank, in any order, after a resume,
  so W = 3 equals one process and a resume is exact. The seeds feed ``torch.Generator`` (Opacus's DPOptimizer takes
  one), which is not a cryptographic generator; docs/privacy.md says what that leaves.
- **Where it comes from** (:func:`open_device_key`): ``train.dp_sgd.key_file`` or ``$SEAFL_DP_SGD_KEY`` (for two
  runs that must share their draws: W = 3 against one process, a study), else the key kept in
  ``<run>/private/device.key``, else 32 fresh bytes of ``os.urandom``. A given key must match a kept one.
- **Who reads it:** only the code that trains the devices' jobs (the in-process executor at W = 1, each worker rank
  under torchrun), at its first DP-SGD job, after rank 0 has cleared the run dir (rank 0 sends no job before). Rank
  0's server code never opens it. The first trainer to find no key writes a fresh one with an atomic link, so every
  worker reads the same bytes; a restart of the same config keeps it (runtime/rundir.py ``clear``), as it keeps the
  central noise key, so a restart draws what the attempt uploaded again. Only its :func:`fingerprint
  <seafl_dist.privacy.keys.fingerprint>` is printed; the key never reaches config.yaml, W&B or any released file.
"""
from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
from pathlib import Path

from .keys import NoiseKeyError, _checked, durable_write, fingerprint, fresh_key, given_key

DEVICE_KEY_ENV = "SEAFL_DP_SGD_KEY"
DEVICE_KEY_NAME = "device.key"
FIELD = "train.dp_sgd.key_file"
TAG = b"seafl-dp-sgd/v1\0"
PURPOSES = ("sample", "noise")


def job_seeds(key: bytes, device: int, job: int) -> dict[str, int]:
    """A DP-SGD job's secret seeds: ``sample`` (its Poisson batches) and ``noise`` (Opacus's Gaussian noise)."""
    out = {}
    for purpose in PURPOSES:
        name = purpose.encode()
        digest = hashlib.shake_256(TAG + struct.pack(">I", len(key)) + key + struct.pack(">I", len(name)) + name +
                                   struct.pack(">QQ", device, job)).digest(8)
        out[purpose] = int.from_bytes(digest, "big") >> 1  # 63 bits: any torch.Generator seed
    return out


def device_key_path(private: Path) -> Path:
    return Path(private) / DEVICE_KEY_NAME


def _publish(path: Path, key: bytes) -> bool:
    """Write ``key`` at ``path`` unless a key is there already: a private temp (mode 0600, fsynced) linked into place,
    which fails if another trainer linked first. True if this call's key is the one kept."""
    tmp = durable_write(path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"), key)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: an exclusive create, written before any job reads it
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        return True
    finally:
        tmp.unlink(missing_ok=True)


def open_device_key(private: Path, key_file: str | None) -> tuple[bytes, str]:
    """The devices' key and where it came from; kept in ``private/device.key`` (written if absent)."""
    given = given_key(key_file, field=FIELD, env_name=DEVICE_KEY_ENV)
    path = device_key_path(private)
    if not path.is_file():
        key, origin = given if given is not None else (fresh_key(), "a fresh key from os.urandom")
        if _publish(path, key):
            return key, origin
    kept = _checked(path.read_bytes(), str(path))
    if given is not None and fingerprint(given[0]) != fingerprint(kept):
        raise NoiseKeyError(f"the DP-SGD key from {given[1]} is not the key {path} keeps for this run (fingerprint "
                            f"{fingerprint(given[0])}, not {fingerprint(kept)}): its devices would upload jobs drawn "
                            f"afresh; give the same key, or rerun with --overwrite")
    return kept, (given[1] if given is not None else f"the key kept in {path}")


def check_kept(private: Path, key_file: str | None) -> None:
    """A resume's check, on rank 0 before anything starts (it reads no key): the run's devices' key is still kept,
    or one is given; else the resumed jobs would draw other batches and noise than the checkpointed run's."""
    if given_key(key_file, field=FIELD, env_name=DEVICE_KEY_ENV) is None and not device_key_path(private).is_file():
        raise NoiseKeyError(f"the run's DP-SGD key {device_key_path(private)} is missing, so a resume cannot draw "
                            f"its jobs' batches and noise again; give it ({FIELD} or ${DEVICE_KEY_ENV}), or rerun "
                            f"with --overwrite to start afresh")


class DeviceKey:
    """The devices' key for one trainer (an in-process executor or a worker rank): opened at its first use."""

    def __init__(self, private: Path, key_file: str | None, *, say=True):
        self.private, self.key_file, self.say = Path(private), key_file, say
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def open(self) -> bytes:
        """The key (:func:`open_device_key`), opened once; its first opening says where it came from, in one line."""
        with self._lock:
            if self._key is None:
                self._key, origin = open_device_key(self.private, self.key_file)
                if self.say:
                    print(f"seafl: dp_sgd: the devices' batches and noise keyed by {origin} (fingerprint "
                          f"{fingerprint(self._key)}), never by run.seed", file=sys.stderr)
            return self._key

    def seeds(self, device: int, job: int) -> dict[str, int]:
        return job_seeds(self.open(), device, job)


def device_key_for(cfg, private: Path, *, resuming: bool, trains: bool = True) -> DeviceKey | None:
    """A runner's part, before anything starts: None without ``train.dp_sgd``; on a resume, :func:`check_kept`
    first; a :class:`DeviceKey` where this process trains jobs (``trains``), None where it only serves (rank 0, which
    never reads the key). A resume that trains here opens the kept key at once, so a given key that is not the run's
    is refused before anything is touched; a fresh start opens it at its first job, after the run dir is cleared."""
    dp = cfg.train.dp_sgd
    if not dp.enabled:
        return None
    if resuming:
        check_kept(private, dp.key_file)
    if not trains:
        return None
    key = DeviceKey(private, dp.key_file)
    if resuming:
        key.open()
    return key
