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


# ---- the gaps an independent audit found (docs/testing.md, "planted independently") --------------------------

def test_a_key_of_exactly_the_minimum_length_is_taken(tmp_path):
    f = tmp_path / "k"
    f.write_bytes(b"x" * 16)
    assert given_key(str(f))[0] == b"x" * 16


@pytest.mark.parametrize("std", [math.nan, -1e-9])
def test_a_noise_std_that_is_not_a_number_at_least_0_is_refused(std):
    with pytest.raises(ValueError, match="must be >= 0"):
        add_noise(torch.zeros(4), std, torch.ones(4, dtype=torch.bool), KeyedStream(KEY, 1))


def test_all_zero_bytes_still_give_finite_normals():
    """A uniform is (k + 1)·2⁻⁵³, never 0, so the Box–Muller log is finite even for k = 0."""
    assert bool(torch.isfinite(secure_normal(16, lambda chunk, draw, nbytes: bytes(nbytes))).all())


DIM = 300


def mechanism(tmp_path, *extra, state=None, key=KEY):
    from types import SimpleNamespace
    from seafl_dist.algo.types import FlatParts
    from seafl_dist.privacy import Mechanism
    tmp_path.mkdir(parents=True, exist_ok=True)
    f = tmp_path / "key"
    f.write_bytes(key)
    keyed = not any("secure_noise" in x or "seeded_noise" in x for x in extra)
    cfg = config_from_dict({}, ["algorithm.name=fedbuff", "algorithm.buffer_size=2", "privacy.enabled=true",
                                "privacy.noise_multiplier=1.5", *([f"privacy.key_file={f}"] if keyed else []), *extra])
    mech = Mechanism(cfg, FlatParts.all_params(DIM), SimpleNamespace(names=("w",), shapes=((DIM,),)), say=False)
    mech.open(tmp_path / "private", state)
    return mech, cfg


def aggregate_zero_deltas(mech, cfg, version):
    """One aggregation of two updates that did not move (FedBuff's w′ is then w_t = 0): its output is the noise."""
    from seafl_dist.algo.types import BufferedUpdate
    w = torch.zeros(DIM)
    ups = [BufferedUpdate(device=d, job=d, flat=w.clone(), n_samples=10, base_version=version, epochs=1)
           for d in (1, 2)]
    ev = {"updates": [{"device": u.device} for u in ups]}
    out = mech.aggregate(ev, cfg.algorithm, version, w, ups, {version: w}.__getitem__, mech_parts(), None)
    return out.new_global, ev["privacy"]["noise_std"]


def mech_parts():
    from seafl_dist.algo.types import FlatParts
    return FlatParts.all_params(DIM)


def oracle_noise(key: bytes, t: int, n: int) -> torch.Tensor:
    """Aggregation t's N(0, 1) draws as docs/privacy.md words them (the stream of shake() above)."""
    streams = [shake(key, t, 0, d, 8 * n) for d in range(8)]

    def uniform(draw: int, i: int) -> float:
        return ((int.from_bytes(streams[draw][8 * i:8 * i + 8], "little") >> 11) + 1) * 2.0 ** -53
    return torch.tensor([sum(math.sqrt(-2 * math.log(uniform(2 * k, i))) * math.cos(2 * math.pi * uniform(2 * k + 1, i))
                             for k in range(4)) / 2 for i in range(n)], dtype=torch.float64)


def test_each_aggregation_draws_its_own_keyed_noise_from_the_key_and_its_number(tmp_path):
    mech, cfg = mechanism(tmp_path)
    for version in (0, 1):
        got, std = aggregate_zero_deltas(mech, cfg, version)
        want = (oracle_noise(KEY, version + 1, DIM) * std).float()
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-7 * std), version


def test_a_resume_whose_key_is_not_the_checkpoints_is_refused(tmp_path):
    mechanism(tmp_path)  # private/noise.key: KEY
    state = {"version": 3, "privacy": {"key_fingerprint": fingerprint(b"the key the checkpoint's run used")}}
    with pytest.raises(NoiseKeyError, match="checkpoint's run used"):
        mechanism(tmp_path, state=state)


def test_only_seeded_noise_says_so_in_the_progress_note(tmp_path):
    notes = {mode: mechanism(tmp_path / mode, *extra)[0].note(None)
             for mode, extra in (("keyed", ()), ("secure", ("privacy.secure_noise=true",)),
                                 ("seeded", ("privacy.seeded_noise=true",)))}
    assert notes == {"keyed": "ε 0 (m 0)", "secure": "ε 0 (m 0)",
                     "seeded": "ε 0 (m 0; seeded noise: none against config.yaml's readers)"}


def test_the_secure_record_holds_what_was_released_and_a_resume_replays_it_after_the_checkpoint(tmp_path):
    mech, cfg = mechanism(tmp_path, "privacy.secure_noise=true")
    private = tmp_path / "private"
    released = [aggregate_zero_deltas(mech, cfg, v)[0] for v in range(3)]  # w′_1, w′_2, w′_3
    assert all(not torch.equal(a, b) for i, a in enumerate(released) for b in released[i + 1:])  # fresh each time
    names = sorted(p.name for p in private.iterdir() if p.name.startswith("released-"))
    assert names == ["released-00000001.pt", "released-00000002.pt", "released-00000003.pt"]
    for t, model in enumerate(released, 1):  # the noised model itself, as released
        assert torch.equal(torch.load(private / names[t - 1], weights_only=True), model)
    again, _ = mechanism(tmp_path, "privacy.secure_noise=true", state={"version": 1, "privacy": {}})
    assert sorted(p.name for p in private.iterdir() if p.name.startswith("released-")) == names[1:]
    assert torch.equal(aggregate_zero_deltas(again, cfg, 1)[0], released[1])  # replayed, never drawn again
    assert torch.equal(aggregate_zero_deltas(again, cfg, 2)[0], released[2])
    fourth = aggregate_zero_deltas(again, cfg, 3)[0]
    assert not any(torch.equal(fourth, m) for m in released)  # past the record: fresh
    again.checkpointed(3)
    assert sorted(p.name for p in private.iterdir() if p.name.startswith("released-")) == ["released-00000004.pt"]


@pytest.mark.parametrize("other", ["dtype", "shape"])
def test_a_record_entry_of_another_model_is_refused_in_one_line(other, tmp_path):
    from seafl_dist.privacy.released import ReleaseRecord
    record = ReleaseRecord(tmp_path)
    record.write(1, torch.zeros(DIM, dtype=torch.float64) if other == "dtype" else torch.zeros(DIM + 1))
    with pytest.raises(ValueError, match="another run's") as err:
        record.get(1, torch.zeros(DIM))
    assert "\n" not in str(err.value)


def test_a_config_yaml_that_is_no_yaml_is_not_this_run_and_clear_removes_the_private_part(tmp_path):
    from seafl_dist.runtime import rundir
    cfg = config_from_dict({}, ["algorithm.name=fedbuff"])
    run = tmp_path / "run"
    rundir.private_dir(run).mkdir(parents=True)
    (run / "config.yaml").write_text("algorithm: [unclosed\n")
    assert not rundir.same_run(run, cfg)
    rundir.clear(run, cfg=cfg)
    assert not rundir.private_dir(run).exists()


def test_a_kept_key_too_short_to_use_is_refused_naming_the_kept_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SEAFL_DP_KEY", raising=False)
    private = tmp_path / "private"
    private.mkdir()
    (private / "noise.key").write_bytes(b"short")
    with pytest.raises(NoiseKeyError) as err:
        open_key(private, None, resuming=True)
    assert str(err.value).startswith(f"{private / 'noise.key'} holds a noise key of 5 bytes")
