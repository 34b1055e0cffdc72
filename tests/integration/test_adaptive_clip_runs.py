"""Adaptive clipping (privacy.adaptive_clip, issue 67 item 4) in whole runs: C_t, recorded in each aggregate event,
follows the paper's geometric update C_{t+1} = C_t·exp(−η_C (b̃_t − γ)) (written here, from the recorded noised
fractions b̃_t) from a C far above the update norms down to where about γ of them are clipped; S and the noise
scale with C_t, the update noise is z_Δ·S with z_Δ = (z⁻² − σ_b⁻²)^(−½); a run killed in the middle resumes to the
uninterrupted run's bytes (C_{t+1} is in the checkpoint); and secure noise replays its counts as it replays its
models."""
import json
import math

import pytest
import torch

import in_process
from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, run_args, summary
from seafl_dist.privacy import sensitivity
from seafl_dist.settings import config_from_dict
from small_runs import DP_KEY, SMALL

Z, SIGMA_B, ETA, GAMMA, C0 = 0.02, 0.2, 1.0, 0.5, 10.0
K = 4
ADAPTIVE = ["algorithm.name=fedbuff", f"algorithm.buffer_size={K}", "privacy.enabled=true",
            f"privacy.noise_multiplier={Z}", f"privacy.clipping_bound={C0}", "privacy.adaptive_clip.enabled=true",
            f"privacy.adaptive_clip.count_std={SIGMA_B}", f"privacy.adaptive_clip.lr={ETA}", *DP_KEY]
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]


def aggregates(run):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "aggregate"]


RUN = [*SMALL, *ADAPTIVE, "privacy.diagnostics=true", "run.max_aggregations=10", *EVERY_2]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The run both tests below read: C_t's series, and the bytes a killed run must resume to."""
    return reference(tmp_path_factory.mktemp("adaptive") / "ref", RUN)


def test_the_bound_moves_to_the_target_quantile_by_the_papers_update(uninterrupted):
    out, args = uninterrupted, RUN
    aggs = aggregates(out)
    assert len(aggs) == 10 and summary(out)["status"] == "completed"
    bounds = [e["privacy"]["clipping_bound"] for e in aggs]
    fractions = [e["privacy"]["unclipped_fraction"] for e in aggs]
    clipped = [e["privacy"]["clipped"] for e in aggs]
    assert bounds[0] == C0
    for c, c_next, b in zip(bounds, bounds[1:], fractions):  # the paper's geometric update, step by step
        assert c_next == pytest.approx(c * math.exp(-ETA * (b - GAMMA)), rel=1e-12)
    noise = [b * K - (K - n) for b, n in zip(fractions, clipped)]  # b̃·K − Σ b_k: the count's draw, std σ_b
    assert all(abs(x) < 5 * SIGMA_B for x in noise) and len({round(x, 12) for x in noise}) == len(noise)
    assert clipped[:2] == [0, 0]  # C_0 lies above every norm
    late = clipped[len(clipped) // 2:]
    assert 0.2 <= sum(late) / (K * len(late)) <= 0.8  # about γ = 1/2 of the updates clipped once C has come down
    assert bounds[-1] < C0 / 3
    alg = config_from_dict({}, args).algorithm
    z_delta = (Z ** -2 - SIGMA_B ** -2) ** -0.5
    for e, c in zip(aggs, bounds):  # S at the C_t the update was clipped at; the update noise z_Δ·S
        ups = e["updates"]
        s = sensitivity(alg, c, [u["device"] for u in ups], [u["staleness"] for u in ups], [u["n_samples"] for u in ups])
        assert e["privacy"]["sensitivity"] == pytest.approx(s, rel=1e-12)
        assert e["privacy"]["noise_std"] == pytest.approx(z_delta * s, rel=1e-12)
    priv = summary(out)["privacy"]
    assert priv["clipping_bound"] == C0 and priv["noise_multiplier"] == Z  # ε is z's: accounted as before
    assert priv["adaptive_clip"] == {"target_quantile": GAMMA, "lr": ETA, "count_std": SIGMA_B,
                                     "update_multiplier": pytest.approx(z_delta, rel=1e-12),
                                     "last_clipping_bound": bounds[-1]}


def test_without_diagnostics_the_events_hold_c_t_and_no_count(tmp_path, capsys):
    out = reference(tmp_path / "r", [*SMALL, *ADAPTIVE, "run.max_aggregations=3"])
    privacy = [e["privacy"] for e in aggregates(out)]
    assert all(set(p) == {"sensitivity", "noise_std", "epsilon", "max_inclusions", "clipping_bound"} for p in privacy)
    assert privacy[0]["clipping_bound"] == C0 and privacy[1]["clipping_bound"] != C0
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("seafl: privacy: z"))
    assert f"C {C0:g} adaptive (γ {GAMMA:g}, η_C {ETA:g}, σ_b {SIGMA_B:g}; update noise z_Δ" in line


def test_a_killed_run_resumes_to_the_same_bytes_with_its_bound(uninterrupted, tmp_path):
    ref, args = uninterrupted, RUN
    out = tmp_path / "run"
    stopped = cli(*run_args(args, out), fault="during_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    state = torch.load(checkpoint_path(out, 2), weights_only=True)["privacy"]["adaptive_clip"]
    bounds = [e["privacy"]["clipping_bound"] for e in aggregates(ref)]
    assert (state["bound"], state["used"]) == (bounds[2], bounds[1])  # C_3, what aggregation 3 clips at
    resumed = in_process.seafl(*run_args(args, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)


def test_secure_noise_replays_its_counts_after_a_kill(tmp_path):
    """Secure noise draws the count from os.urandom: the write-ahead record keeps it beside the released model,
    so the resume clips at the C_t the killed run released (not at one from a fresh draw)."""
    args = [*SMALL, *[x for x in ADAPTIVE if x not in DP_KEY], "privacy.secure_noise=true", "run.checkpoint_every=3",
            "run.checkpoint_every_s=null"]
    out = tmp_path / "run"
    killed = cli(*run_args(args, out), fault="after_aggregate:5")
    assert killed.returncode != 0 and checkpoint_versions(out) == [3]
    private = out / "private"
    assert sorted(p.name for p in private.glob("clip-count-*.json")) == ["clip-count-00000004.json",
                                                                         "clip-count-00000005.json"]
    counts = {t: json.loads((private / f"clip-count-{t:08d}.json").read_text())["count"] for t in (4, 5)}
    before = [e["privacy"]["clipping_bound"] for e in aggregates(out)]
    resumed = in_process.seafl(*run_args(args, out))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = [e["privacy"]["clipping_bound"] for e in aggregates(out)]
    assert len(before) == 5 and after[:5] == before and len(after) == 6
    for t in (4, 5):  # C_{t+1} from the count aggregation t drew before the kill, never a fresh draw
        assert after[t] == pytest.approx(after[t - 1] * math.exp(-ETA * (counts[t] / K - GAMMA)), rel=1e-12)
