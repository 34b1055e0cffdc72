"""Runs with user-level DP (privacy.enabled, issue 42 A) end to end in one process: the aggregate events carry S,
the noise's std z·S and ε so far; the summary's ε is dp-accounting's for the most-included device; the cap holds
and, when it leaves too few devices, ends the run stalled; a target ε calibrates z before the first job and the
first lines say so; a run killed in the middle resumes to the same bytes (the counts m_k are in the checkpoint)."""
import json
import re
from collections import Counter

import pytest
import torch

import in_process
from resuming import assert_same_run, checkpoint_path, checkpoint_versions, cli, reference, run_args, summary
from seafl_dist.privacy import epsilon, sensitivity
from seafl_dist.privacy.sensitivity import seafl_sensitivity
from seafl_dist.report.build import write_report
from seafl_dist.report.trace import check_run
from seafl_dist.settings import config_from_dict
from small_runs import DP_KEY, SMALL

Z = 0.8
PRIVATE = ["algorithm.name=fedbuff", "privacy.enabled=true", f"privacy.noise_multiplier={Z}",
           "privacy.clipping_bound=2", "privacy.max_participation=3", *DP_KEY]  # one key: runs compared share noise
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]


@pytest.fixture
def here():
    """``seafl ARGS`` in this process (tests/in_process.py), as a finished process.
    The killed and the resumed runs stay real processes (``cli``)."""
    return in_process.seafl


def aggregates(run):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] == "aggregate"]


def inclusions(aggs) -> Counter:
    return Counter(d for e in aggs for d in {u["device"] for u in e["updates"]})


@pytest.mark.parametrize("rule", ["fedbuff", "fedasync", "seafl2"])
def test_each_aggregation_records_s_and_the_noise_and_the_summary_says_epsilon(rule, tmp_path):
    args = [*SMALL, *PRIVATE, f"algorithm.name={rule}"]
    out = reference(tmp_path / rule, args)
    assert check_run(out) == []
    alg = config_from_dict({}, args).algorithm
    aggs, running = aggregates(out), Counter()
    assert len(aggs) == 6
    for e in aggs:
        ups = e["updates"]
        who = ([u["device"] for u in ups], [u["staleness"] for u in ups], [u["n_samples"] for u in ups])
        s = seafl_sensitivity(alg, 2.0, *who, "delta") if rule == "seafl2" else sensitivity(alg, 2.0, *who)
        p = e["privacy"]
        assert p["sensitivity"] == pytest.approx(s, rel=1e-12) and s > 0
        assert p["noise_std"] == pytest.approx(Z * s, rel=1e-12)
        running.update({u["device"] for u in ups})
        assert p["max_inclusions"] == max(running.values())
        assert p["epsilon"] == epsilon(Z, p["max_inclusions"], 1e-5)
    m = inclusions(aggs)
    priv = summary(out)["privacy"]
    assert priv["max_inclusions"] == max(m.values()) <= 3
    assert priv["epsilon"] == epsilon(Z, max(m.values()), 1e-5) > 0
    assert priv["devices_included"] == len(m)
    assert (priv["noise_multiplier"], priv["clipping_bound"], priv["delta"], priv["max_participation"]) == \
        (Z, 2.0, 1e-5, 3)
    plain = reference(tmp_path / "plain", [*SMALL, f"algorithm.name={rule}"])
    assert (out / "model.pt").read_bytes() != (plain / "model.pt").read_bytes()  # the noise is there
    assert "privacy" not in summary(plain) and "privacy" not in aggregates(plain)[0]
    write_report([out, plain], tmp_path / "report")  # the tables per arm: an ε column, "—" for the plain run
    md = (tmp_path / "report" / "report.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in md.splitlines() if line.startswith("| ")}
    assert rows["run"].endswith("| ε |")
    assert rows[rule].endswith(f"| {priv['epsilon']:.3f} |") and rows["plain"].endswith("| — |")


def test_a_cap_that_leaves_too_few_devices_ends_the_run_stalled_and_says_why(tmp_path):
    out = reference(tmp_path / "r", [*SMALL, *PRIVATE, "privacy.max_participation=1"])
    s = summary(out)
    assert s["status"] == "stalled" and "privacy.max_participation = 1" in s["stalled"]
    m = inclusions(aggregates(out))
    assert max(m.values()) == 1 and s["privacy"]["max_inclusions"] == 1
    assert len(aggregates(out)) <= 5  # 10 devices, one inclusion each, 2 a buffer


def test_a_target_epsilon_calibrates_z_before_the_first_job_and_the_first_lines_say_so(tmp_path, here):
    out = tmp_path / "r"
    args = [*SMALL, "algorithm.name=fedbuff", "privacy.enabled=true", "privacy.epsilon=4",
            "privacy.max_participation=3"]
    proc = here(*run_args(args, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("seafl: privacy:"))
    z = summary(out)["privacy"]["noise_multiplier"]
    assert f"z {z:.6g} (calibrated to ε 4)" in line and "C 1, δ 1e-05, pld" in line
    bound = float(re.search(r"so ε <= ([0-9.]+)", line).group(1))
    assert 3.96 <= bound <= 4.0 and 3.96 <= epsilon(z, 3, 1e-5) <= 4.0
    assert summary(out)["privacy"]["target_epsilon"] == 4.0


def test_a_run_killed_in_the_middle_resumes_to_the_same_bytes_with_its_counts(tmp_path):
    args = [*SMALL, *PRIVATE, "privacy.max_participation=2", *EVERY_2]
    ref = reference(tmp_path / "ref", args)
    assert max(inclusions(aggregates(ref)).values()) == 2  # the cap binds in this run
    out = tmp_path / "run"
    stopped = cli(*run_args(args, out), fault="during_aggregate:3")
    assert stopped.returncode != 0 and checkpoint_versions(out) == [2]
    state = torch.load(checkpoint_path(out, 2), weights_only=True)["privacy"]
    assert state["inclusions"] == dict(inclusions(aggregates(ref)[:2]))
    resumed = in_process.seafl(*run_args(args, out))  # the resume in this process: only the kill must be real
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "after aggregation 2" in resumed.stderr
    assert_same_run(ref, out)


def test_the_api_returns_the_privacy_figures_with_the_summary(tmp_path):
    import seafl_dist
    from seafl_dist.settings import parse_override
    from small_runs import QUICKSTART
    overrides = dict(parse_override(o) for o in [*SMALL, *PRIVATE])
    got = seafl_dist.run(str(QUICKSTART), out=tmp_path / "r", **overrides)
    assert got["privacy"] == summary(tmp_path / "r")["privacy"]
    assert got["privacy"]["noise_multiplier"] == Z and got["privacy"]["epsilon"] > 0


def events_but_evals(run):
    return [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["event"] != "eval"]


def test_secure_noise_differs_run_to_run_and_agrees_on_epsilon(tmp_path):
    """privacy.secure_noise: the noise from os.urandom, seeded by nothing the run dir holds. Two runs of one config
    then differ in their models and agree on the schedule and ε, as the keyed run does. A killed run's resume
    (which replays what was released, never draws it again): test_privacy_neighbours.py."""
    args = [*SMALL, *[x for x in PRIVATE if x not in DP_KEY], "privacy.secure_noise=true", *EVERY_2]
    a, b = reference(tmp_path / "a", args), reference(tmp_path / "b", args)
    keyed = reference(tmp_path / "keyed", [*SMALL, *PRIVATE, *EVERY_2])
    models = {(d / "model.pt").read_bytes() for d in (a, b, keyed)}
    assert len(models) == 3
    assert events_but_evals(a) == events_but_evals(b) == events_but_evals(keyed)  # the schedule, S, σ, ε
    assert summary(a)["privacy"]["epsilon"] == summary(b)["privacy"]["epsilon"] == summary(keyed)["privacy"]["epsilon"]
    assert summary(a)["privacy"]["noise"] == "secure" and summary(keyed)["privacy"]["noise"] == "keyed"
