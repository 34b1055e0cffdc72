"""The noise key: where a run's DP noise key comes from, where it is kept, and what of it may be released.

Under ``privacy.enabled`` with neither ``privacy.secure_noise`` nor ``privacy.seeded_noise`` (the default), the
noise of aggregation t is drawn from a cryptographic stream keyed by a secret key (privacy/noise.py
:class:`KeyedStream`), never from ``run.seed``, which config.yaml and W&B record. This room owns that key:

- **where it comes from** (:func:`given_key`, then :func:`open_key`): ``privacy.key_file`` (a file's bytes) or the
  environment variable ``SEAFL_DP_KEY`` (its text), for two runs that must share their noise (a neighbouring-runs
  audit, a study); else, on a fresh start, 32 bytes of the OS's cryptographic source (``os.urandom``, as 64 hex
  digits); on a
  resume, the key the run kept. A key is at least :data:`MIN_KEY_BYTES` bytes, surrounding whitespace stripped.
- **where it is kept**: ``<run>/private/noise.key`` (runtime/rundir.py ``private_dir``, the run dir's
  server-private part), written with mode 0600 and fsynced before the first aggregation, read back by a resume so
  that the very same noise is drawn again (exact bytes, nothing released twice).
- **what is released**: only its :func:`fingerprint` (a domain-separated SHA-256, 16 hex digits), in the start
  line, the checkpoints and summary.json, so that a user can tell which key a run used. The key itself never
  reaches config.yaml, W&B or any released file.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..settings.errors import ConfigError

KEY_ENV = "SEAFL_DP_KEY"
KEY_NAME = "noise.key"
MIN_KEY_BYTES = 16
FRESH_KEY_BYTES = 32


class NoiseKeyError(ConfigError):
    """A key that cannot be used, in one line: where it came from, what is wrong, the fix."""


def fingerprint(key: bytes) -> str:
    """What may be released of ``key``: 16 hex digits of SHA-256 over a domain tag and the key."""
    return hashlib.sha256(b"seafl-dp-key-fingerprint\0" + key).hexdigest()[:16]


def _checked(key: bytes, where: str) -> bytes:
    key = key.strip()
    if len(key) < MIN_KEY_BYTES:
        raise NoiseKeyError(f"{where} holds a noise key of {len(key)} bytes; give at least {MIN_KEY_BYTES} (e.g. the "
                        f"64 hex digits of `python -c \"import secrets; print(secrets.token_hex(32))\"`)")
    return key


def given_key(key_file: str | None, *, field: str = "privacy.key_file", env_name: str = KEY_ENV
              ) -> tuple[bytes, str] | None:
    """The key the user gave (``field``, the config's key file, else ``$env_name``) and where it came from, or None
    (the devices' DP-SGD key, privacy/device_key.py, is given the same two ways under its own names)."""
    env = os.environ.get(env_name)
    if key_file is not None and env:
        raise NoiseKeyError(f"{field}={key_file} and ${env_name} are both set; give the noise key one way")
    if key_file is not None:
        try:
            data = Path(key_file).expanduser().read_bytes()
        except OSError as err:
            raise NoiseKeyError(f"{field}={key_file} cannot be read ({err.strerror or err}); give a readable "
                            f"file holding the noise key") from None
        return _checked(data, f"{field}={key_file}"), f"{field} {key_file}"
    if env:
        return _checked(env.encode(), f"${env_name}"), f"${env_name}"
    return None


def fresh_key() -> bytes:
    """32 bytes of ``os.urandom`` as 64 hex digits: text, so that it survives the stripping every key gets and can be
    given back as ``$SEAFL_DP_KEY`` to draw the same noise in another run."""
    return os.urandom(FRESH_KEY_BYTES).hex().encode()


def key_path(private: Path) -> Path:
    return Path(private) / KEY_NAME


def durable_write(path: Path, data: bytes) -> Path:
    """``data`` at ``path`` for good before this returns: a temp file of mode 0600 (server-private), fsynced,
    renamed over ``path``, and the folder fsynced (a kill at any point leaves the old file or the new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def write_key(private: Path, key: bytes) -> Path:
    """``private/noise.key`` holding ``key`` (:func:`durable_write`: mode 0600, fsynced)."""
    return durable_write(key_path(private), key)


def open_key(private: Path, key_file: str | None, *, resuming: bool, recorded: str | None = None
             ) -> tuple[bytes, str]:
    """The run's key and where it came from, kept in ``private/noise.key``.

    A fresh start takes the given key (:func:`given_key`) or 32 fresh bytes of ``os.urandom``, and writes it; but
    where the run dir still holds a key (runtime/rundir.py ``clear`` keeps it for an attempt of the same config that
    ended before its first checkpoint), the restart takes that key as a resume does, so that it draws what the
    attempt released again instead of releasing new draws. A resume takes the given key or the kept one;
    ``recorded``, the fingerprint its checkpoint holds, must match."""
    given = given_key(key_file)
    path = key_path(private)
    if not resuming and not path.is_file():
        key, origin = given if given is not None else (fresh_key(), "a fresh key from os.urandom")
        write_key(private, key)
        return key, origin
    if not resuming and given is not None and fingerprint(given[0]) != fingerprint(_checked(path.read_bytes(), "")):
        raise NoiseKeyError(f"the noise key from {given[1]} is not the key {path} kept from this run's earlier "
                            f"attempt (fingerprint {fingerprint(given[0])}, not "
                            f"{fingerprint(_checked(path.read_bytes(), ''))}): a restart with another key would "
                            f"release its aggregations a second time; give the same key, or rerun with --overwrite")
    if given is not None:
        key, origin = given
    elif path.is_file():
        key, origin = _checked(path.read_bytes(), str(path)), f"the key kept in {path}"
    else:
        raise NoiseKeyError(f"the run's noise key {path} is missing, so a resume cannot draw the same noise again; give "
                        f"it (privacy.key_file or ${KEY_ENV}), or rerun with --overwrite to start afresh")
    if recorded is not None and fingerprint(key) != recorded:
        raise NoiseKeyError(f"the noise key from {origin} has fingerprint {fingerprint(key)}, and the checkpoint's run "
                        f"used {recorded}; resume with the run's own key, or rerun with --overwrite")
    if not path.is_file():
        write_key(private, key)
    return key, origin
