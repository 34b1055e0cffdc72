"""The noise key (privacy/keys.py) and the keyed stream (privacy/noise.py KeyedStream), issue 60 A: where a key comes
from (privacy.key_file, $SEAFL_DP_KEY, a fresh os.urandom key), where it is kept (private/noise.key, mode 0600), what
a resume does with it (the kept key, the checkpoint's fingerprint checked), each refusal in one line, and the noise:
SHAKE-256 of the key and the nonce into four halved Box-Muller draws, written here from docs/privacy.md's words."""
import hashlib
import math
import stat
import struct

import pytest
import torch

from seafl_dist.privacy.keys import NoiseKeyError, fingerprint, given_key, open_key
from seafl_dist.privacy.noise import KeyedStream, add_noise, secure_normal
from seafl_dist.settings import ConfigError, config_from_dict

KEY = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    monkeypatch.delenv("SEAFL_DP_KEY", raising=False)


def test_the_fingerprint_is_sha256_of_a_tag_and_the_key_and_tells_keys_apart():
    assert fingerprint(KEY) == hashlib.sha256(b"seafl-dp-key-fingerprint\0" + KEY).hexdigest()[:16]
    assert fingerprint(KEY) != fingerprint(KEY[:-1] + b"0") and KEY.decode() not in fingerprint(KEY)


def test_a_key_comes_from_the_file_or_the_environment_stripped_and_none_without_either(tmp_path, monkeypatch):
    f = tmp_path / "k"
    f.write_bytes(KEY + b"\n")
    assert given_key(str(f)) == (KEY, f"privacy.key_file {f}")
    assert given_key(None) is None
    monkeypatch.setenv("SEAFL_DP_KEY", " " + KEY.decode() + "\n")
    assert given_key(None) == (KEY, "$SEAFL_DP_KEY")


@pytest.mark.parametrize("case", ["both", "short-file", "short-env", "unreadable"])
def test_a_key_that_cannot_be_used_is_refused_in_one_line(case, tmp_path, monkeypatch):
    f = tmp_path / "k"
    f.write_bytes(KEY[:15] if case == "short-file" else KEY)
    if case in ("both", "short-env"):
        monkeypatch.setenv("SEAFL_DP_KEY", "x" * (15 if case == "short-env" else 40))
    path = None if case == "short-env" else str(tmp_path / "absent") if case == "unreadable" else str(f)
    with pytest.raises(NoiseKeyError) as err:
        given_key(path)
    msg = str(err.value)
    assert "\n" not in msg and isinstance(err.value, ConfigError)
    assert {"both": "both set", "short-file": "15 bytes", "short-env": "15 bytes",
            "unreadable": "cannot be read"}[case] in msg
    assert ("SEAFL_DP_KEY" in msg) == (case in ("both", "short-env"))


def test_a_fresh_start_keeps_a_fresh_or_given_key_private_and_a_resume_takes_it_back(tmp_path):
    private = tmp_path / "run" / "private"
    fresh, origin = open_key(private, None, resuming=False)
    assert len(fresh) == 64 and int(fresh, 16) >= 0 and origin == "a fresh key from os.urandom"  # 32 bytes, hex
    kept = private / "noise.key"
    assert kept.read_bytes() == fresh and stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert open_key(private, None, resuming=True, recorded=fingerprint(fresh)) == (fresh, f"the key kept in {kept}")
    # a restart of an attempt that wrote no checkpoint (runtime/rundir.py clear kept private/): the same key
    assert open_key(private, None, resuming=False) == (fresh, f"the key kept in {kept}")
    f = tmp_path / "k"
    f.write_bytes(KEY)
    with pytest.raises(NoiseKeyError, match="release its aggregations a second time"):
        open_key(private, str(f), resuming=False)  # ... and never another one
    kept.unlink()  # a dir cleared for another config: the given key, kept from now on
    assert open_key(private, str(f), resuming=False)[0] == KEY and kept.read_bytes() == KEY


def test_a_restart_of_the_same_config_keeps_the_private_part_and_another_config_clears_it(tmp_path):
    from seafl_dist.runtime import rundir
    from seafl_dist.settings import dump_config
    cfg = config_from_dict({}, ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=1"])
    other = config_from_dict({}, ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=2"])
    run = tmp_path / "run"
    private = rundir.private_dir(run)
    for again, kept in ((cfg, True), (other, False)):
        private.mkdir(parents=True, exist_ok=True)
        (private / "noise.key").write_bytes(KEY)
        (run / "config.yaml").write_text(dump_config(cfg))
        rundir.clear(run, cfg=again)
        assert (private / "noise.key").is_file() == kept and not (run / "config.yaml").exists()
    private.mkdir()
    rundir.clear(run)  # no config to compare: cleared
    assert not private.exists()


def test_a_resume_without_its_key_or_with_another_is_refused_in_one_line(tmp_path):
    private = tmp_path / "private"
    with pytest.raises(NoiseKeyError, match=r"noise key .*noise.key is missing.*--overwrite"):
        open_key(private, None, resuming=True)
    f = tmp_path / "k"
    f.write_bytes(KEY)
    key, _ = open_key(private, str(f), resuming=True, recorded=fingerprint(KEY))  # given: written back
    assert key == KEY and (private / "noise.key").read_bytes() == KEY
    with pytest.raises(NoiseKeyError) as err:
        open_key(private, None, resuming=True, recorded=fingerprint(b"another key, 16+ bytes"))
    assert f"fingerprint {fingerprint(KEY)}" in str(err.value) and "\n" not in str(err.value)


def shake(key: bytes, version: int, chunk: int, draw: int, n: int) -> bytes:
    """The keyed stream as docs/privacy.md words it: SHAKE-256 over the tag, the key and the stream name, each
    length-prefixed (4 bytes, big-endian), the version (8), the chunk (8) and the draw (4)."""
    msg = b"seafl-dp-noise/v1\0" + struct.pack(">I", len(key)) + key + struct.pack(">I", 7) + b"privacy" + \
        struct.pack(">Q", version) + struct.pack(">Q", chunk) + struct.pack(">I", draw)
    return hashlib.shake_256(msg).digest(n)


def test_the_keyed_stream_is_shake256_of_the_key_and_the_nonce():
    for version, chunk, draw in ((1, 0, 0), (7, 0, 5), (7, 3, 1)):
        assert KeyedStream(KEY, version)(chunk, draw, 40) == shake(KEY, version, chunk, draw, 40)


def test_keyed_noise_is_four_halved_box_muller_draws_of_the_stream_and_replays_exactly():
    n = 1000
    streams = [shake(KEY, 3, 0, d, 8 * n) for d in range(8)]  # chunk 0's eight draws

    def uniform(draw: int, i: int) -> float:  # (k + 1)·2⁻⁵³, k the top 53 bits of entry i's 8 bytes
        k = int.from_bytes(streams[draw][8 * i:8 * i + 8], "little") >> 11
        return (k + 1) * 2.0 ** -53

    want = [sum(math.sqrt(-2 * math.log(uniform(2 * t, i))) * math.cos(2 * math.pi * uniform(2 * t + 1, i))
                for t in range(4)) / 2 for i in range(n)]
    got = secure_normal(n, KeyedStream(KEY, 3))
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)
    assert torch.equal(secure_normal(n, KeyedStream(KEY, 3)), got)  # the same key and t: the same bits
    assert not torch.equal(secure_normal(n, KeyedStream(KEY, 4)), got)  # another aggregation
    assert not torch.equal(secure_normal(n, KeyedStream(KEY[::-1], 3)), got)  # another key
    w, mask = torch.zeros(n), torch.ones(n, dtype=torch.bool)
    assert torch.equal(add_noise(w, 0.5, mask, KeyedStream(KEY, 3)), (got * 0.5).float())


def test_keyed_noise_past_a_chunk_draws_the_next_chunk_nonce(monkeypatch):
    import seafl_dist.privacy.noise as noise
    monkeypatch.setattr(noise, "_CHUNK", 64)
    got = noise.secure_normal(100, KeyedStream(KEY, 2))
    whole = noise.secure_normal(64, KeyedStream(KEY, 2))
    assert torch.equal(got[:64], whole)
    calls = []
    noise.secure_normal(100, lambda c, d, nbytes: calls.append((c, d, nbytes)) or bytes(nbytes))
    assert calls == [(0, d, 8 * 64) for d in range(8)] + [(1, d, 8 * 36) for d in range(8)]


@pytest.mark.parametrize("extra, field", [
    (["privacy.secure_noise=true", "privacy.seeded_noise=true"], "privacy.seeded_noise"),
    (["privacy.secure_noise=true", "privacy.key_file=k"], "privacy.key_file"),
    (["privacy.seeded_noise=true", "privacy.key_file=k"], "privacy.key_file"),
])
def test_one_source_of_noise_and_a_key_only_for_the_keyed_one(extra, field):
    base = ["algorithm.name=fedbuff", "privacy.enabled=true", "privacy.noise_multiplier=1"]
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, [*base, *extra])
    assert f"config key '{field}'" in str(err.value) and "\n" not in str(err.value)
    for one in extra:  # each alone is accepted
        config_from_dict({}, [*base, one])
