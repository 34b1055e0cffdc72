"""torchrun with W ranks gives the same run dir as one process (issue: "same answer as one process").

Each algorithm runs once in this pytest process (the in-process runner, via the CLI's
``main``) and once under torchrun on CPU/gloo; W = 2, 3 and 4 are spread over the
algorithms to keep the suite short, and one torchrun job per W runs all of its algorithms (launching.run_batch).
Checked: events.jsonl byte-identical, metrics.csv equal
(accuracy and loss within 1e-6; bit-identical in practice with one thread per rank), the same
summary apart from wall time, every rank exiting 0, and nothing written but rank 0's run dir. The W = 3 job also
runs a user's rule with memory (tests/user_extensions.py fair_momentum) and centered clipping (its centre): the state
stays on rank 0.
"""
import csv
import json

import pytest
import torch

from launching import run_batch
from rule_states import STATEFUL
from small_runs import FEDCOMPASS, PER_ALGORITHM, QUICKSTART, SCAFFOLD, SMALL
from seafl_dist.cli import main as seafl_main

pytestmark = pytest.mark.dist

WORLD = {"seafl": 3, "seafl2": 3, "fedbuff": 2, "fedasync": 2, "fedavg": 4, "fadas": 3, "asyncsgd": 2, "port": 3,
         "fedstaleweight": 3}
RUN_FILES = {"config.yaml", "events.jsonl", "metrics.csv", "partition.json", "summary.json", "model.pt"}

_INPROCESS: dict = {}


def overrides(name):
    return [*SMALL, f"algorithm.name={name}", *PER_ALGORITHM[name]]


# Malicious devices (docs/robustness.md): a local attack from the job's stream on the workers with fast attackers, an
# omniscient one on rank 0 from the workers' uploads, and a data attack made on every rank with its rate on rank 0;
# with fedbuff, whose own case runs in the W = 2 job (the W = 3 job counts each of its algorithms' summaries)
THREATS = {"threats_local": [*overrides("fedbuff"), "threats.malicious=0.3", "threats.attack=gaussian",
                             "threats.fast=true"],
           "threats_omniscient": [*overrides("fedbuff"), "threats.malicious=0.3", "threats.attack=min_max"],
           "threats_data": [*overrides("fedbuff"), "threats.malicious=0.3", "threats.attack=backdoor",
                            "runtime.placement=device"]}


# The W = 3 job's rows beside its algorithms: seafl2 with runtime.placement=device, a user's rule with memory
# (tests/user_extensions.py fair_momentum; its state on rank 0 with the server, algo/memory.py), and fedcompass (its
# step-counted jobs travel to the workers with their steps)
ROWS_OF_3 = {"placement": [*overrides("seafl2"), "runtime.placement=device"], "stateful": [*SMALL, *STATEFUL],
             "fedcompass": [*SMALL, *FEDCOMPASS],
             # a defense with a state (centered clipping's centre, rule memory on rank 0; seafl_dist/defenses/)
             "defense": [*SMALL, "algorithm.name=fedbuff", "algorithm.defense.name=centered_clipping",
                         "algorithm.defense.tau=0.5"],
             # a defense with a server-held set (FLTrust's root set; rank 0 trains g_0 on it: runtime/server_data.py)
             "server_held": [*SMALL, "algorithm.name=fedbuff", "algorithm.defense.name=fltrust",
                             "algorithm.defense.server_samples=100"],
             # Zeno++'s v, computed and cached on rank 0 (a filter, under SEAFL)
             "zeno": [*SMALL, "algorithm.name=seafl", "algorithm.defense.name=zenopp",
                      "algorithm.defense.server_samples=100", "algorithm.defense.refresh=3"],
             # AsyncFilter's record of past averages on rank 0 (a filter, under SEAFL): version 0's nine jobs fill
             # aggregations 1-3 at staleness 0, 1 and 2, so its record is read (tests/integration/test_defense_runs.py)
             "asyncfilter": [*SMALL, "algorithm.name=seafl", "algorithm.defense.name=asyncfilter",
                             "algorithm.buffer_size=3", "devices.concurrency=9", "clock.idle.distribution=none",
                             "data.partition=iid"],
             "scaffold": [*SMALL, *SCAFFOLD, "runtime.placement=device"], **THREATS}


def _algorithm(args: list[str]) -> str:
    """The algorithm a case's overrides name (the last algorithm.name=; the quickstart's seafl without one)."""
    names = [a.split("=", 1)[1] for a in args if a.startswith("algorithm.name=")]
    return names[-1] if names else "seafl"


@pytest.fixture(scope="module")
def inprocess(tmp_path_factory):
    """inprocess(algorithm) -> the run dir of the in-process reference run (made once)."""
    def get(name):
        if name not in _INPROCESS:
            out = tmp_path_factory.mktemp(f"{name}-w1") / "run"
            threads = torch.get_num_threads()
            try:
                with torch.random.fork_rng(devices=[]):
                    args = ROWS_OF_3[name] if name in ROWS_OF_3 else overrides(name)
                    assert seafl_main(["run", str(QUICKSTART), *args, "--out", str(out)]) == 0
            finally:
                torch.set_num_threads(threads)
            _INPROCESS[name] = out
        return _INPROCESS[name]
    return get


def read_metrics(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_same_metrics(ref_path, got_path):
    ref, got = read_metrics(ref_path), read_metrics(got_path)
    assert [r.keys() for r in ref] == [g.keys() for g in got]
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        for key in r:
            if key in ("accuracy", "loss"):
                assert abs(float(r[key]) - float(g[key])) <= 1e-6, (key, r, g)
            else:
                assert r[key] == g[key], (key, r, g)


@pytest.fixture(scope="module")
def on_ranks(tmp_path_factory):
    """on_ranks(case) -> (the torchrun job's finished process, the case's run dir): one job per W runs all of its
    cases (launching.run_batch), each case an algorithm, or a row of ROWS_OF_3."""
    jobs = {}

    def get(case):
        world = 3 if case in ROWS_OF_3 else WORLD[case]
        if world not in jobs:
            cases = {n: overrides(n) for n in PER_ALGORITHM if WORLD[n] == world}
            if world == 3:
                cases.update(ROWS_OF_3)
            jobs[world] = run_batch(world, cases, tmp_path_factory.mktemp(f"w{world}"))
        proc, outs = jobs[world]
        return proc, outs[case], set(outs)
    return get


@pytest.mark.parametrize("name", list(PER_ALGORITHM))
def test_distributed_run_matches_inprocess(name, inprocess, on_ranks):
    ref = inprocess(name)
    world = WORLD[name]
    proc, got, names = on_ranks(name)
    assert proc.returncode == 0, f"torchrun exit {proc.returncode}:\n{proc.stderr[:3000]}\n...\n{proc.stderr[-3000:]}"  # every rank exited 0
    assert "seafl: error" not in proc.stderr and "seafl: rank" not in proc.stderr, proc.stderr[-3000:]
    assert f"on {world} ranks (gloo)" in proc.stderr
    # only rank 0 prints the summary, once a run: once per case of the job that runs this algorithm (the "placement"
    # row runs seafl2 too, the "zeno" and "asyncfilter" rows seafl)
    runs_it = [n for n in names if _algorithm(ROWS_OF_3[n] if n in ROWS_OF_3 else overrides(n)) == name]
    assert name in runs_it and proc.stdout.count(f"({name}): completed") == len(runs_it)

    # Only rank 0 wrote anything, and only the run dirs (beside the job's plan).
    assert {p.name for p in got.parent.iterdir()} == names | {"plan.json"}
    assert {p.name for p in got.iterdir()} == {p.name for p in ref.iterdir()} == RUN_FILES

    # The same schedule, the same aggregations, the same models.
    assert (got / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
    assert (got / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()  # the final model, bit for bit
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    assert (got / "config.yaml").read_text() == (ref / "config.yaml").read_text()
    assert (got / "partition.json").read_text() == (ref / "partition.json").read_text()
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    assert s_got["status"] == "completed"
    s_ref.pop("wall_time_s", None), s_got.pop("wall_time_s", None)  # absent under DP
    assert s_got == s_ref

    events = [json.loads(line) for line in (got / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "aggregate" for e in events) == 6
    if name == "seafl2":  # the epochs a job trains were only known once the server notified it
        notified = {e["job"] for e in events if e["event"] == "notify"}
        assert notified, "no notifications: the seafl2 case no longer exercises partial training"
        short = [e for e in events if e["event"] == "finish" and e["job"] in notified and e["epochs"] < 2]
        assert short, "notified jobs should upload after fewer epochs than planned"
        aggregated = {u["job"] for e in events if e["event"] == "aggregate" for u in e["updates"]}
        assert notified & aggregated, "a partially trained update should take part in an aggregation"


def test_fedcompass_on_3_ranks_matches_inprocess(inprocess, on_ranks):
    """Workers train each job for the steps its start event assigns (the JOB header carries them): the same bytes."""
    ref = inprocess("fedcompass")
    proc, got, _ = on_ranks("fedcompass")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (got / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
    assert (got / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    events = [json.loads(line) for line in (got / "events.jsonl").read_text().splitlines()]
    steps = {e["steps"] for e in events if e["event"] == "start"}
    assert len(steps) > 1, steps  # counts assigned by the schedule, not Q_max alone


def test_fixed_device_placement_matches_inprocess(inprocess, on_ranks):
    """runtime.placement=device (device k on worker 1 + k mod (W-1), each worker holding only its
    devices' rows) gives the same run as the default balanced placement and as one process."""
    ref = inprocess("seafl2")
    proc, got, _ = on_ranks("placement")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (got / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
    assert (got / "model.pt").read_bytes() == (ref / "model.pt").read_bytes()
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")


def test_a_rule_with_memory_of_ones_own_matches_inprocess(inprocess, on_ranks):
    """A user's stateful rule (its state kept on rank 0 with the server, algo/memory.py) on 3 ranks: the one-process
    run's events, model and metrics, and its summary, rule_state included."""
    ref = inprocess("stateful")
    proc, got, _ = on_ranks("stateful")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("(user_extensions:fair_momentum): completed") == 1
    for f in ("events.jsonl", "model.pt", "config.yaml"):
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref and s_got["rule_state"]["keys"] == ["m", "seen"]


def test_centered_clipping_on_3_ranks_matches_inprocess(inprocess, on_ranks):
    """A defense whose centre lives on rank 0 with the server (algo/memory.py): the one-process run's bytes."""
    ref = inprocess("defense")
    proc, got, _ = on_ranks("defense")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in ("events.jsonl", "model.pt", "config.yaml"):
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref and s_got["rule_state"]["keys"] == ["centre"]


@pytest.mark.parametrize("case", ["server_held", "zeno", "asyncfilter"])
def test_fltrust_zeno_and_asyncfilter_on_3_ranks_match_inprocess(inprocess, on_ranks, case):
    """The server-held set carved alike on every rank (the same shards), FLTrust's g_0 trained, Zeno++'s v computed
    and AsyncFilter's record kept on rank 0 alone: the one-process run's bytes."""
    ref = inprocess(case)
    proc, got, _ = on_ranks(case)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in ("events.jsonl", "model.pt", "config.yaml", "partition.json"):
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref


@pytest.mark.parametrize("case", list(THREATS))
def test_malicious_devices_on_3_ranks_match_inprocess(case, inprocess, on_ranks):
    """Which devices are malicious, their attack and its record are functions of the config: on 3 ranks (the data
    attack's shards each on its one worker, runtime.placement=device) the one-process run's bytes."""
    ref = inprocess(case)
    proc, got, _ = on_ranks(case)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in ("events.jsonl", "model.pt", "config.yaml", "partition.json"):
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f
    assert b'"malicious": true' in (got / "events.jsonl").read_bytes()
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
    s_ref, s_got = (json.loads((d / "summary.json").read_text()) for d in (ref, got))
    s_ref.pop("wall_time_s"), s_got.pop("wall_time_s")
    assert s_got == s_ref and s_got["threats"]["malicious"]


def test_scaffold_with_each_devices_c_k_on_its_worker_matches_inprocess(inprocess, on_ranks):
    """SCAFFOLD's c_k live on the workers (runtime.placement=device), each job downloads w and c and uploads y and Δc,
    and a TAKEN says whether its Δc is kept: the one-process run's bytes."""
    ref = inprocess("scaffold")
    proc, got, _ = on_ranks("scaffold")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for f in ("events.jsonl", "model.pt", "config.yaml"):
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f
    assert_same_metrics(ref / "metrics.csv", got / "metrics.csv")
