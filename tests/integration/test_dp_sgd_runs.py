"""``train.dp_sgd`` in whole runs on the bundled digits (SMALL's settings), in this process: the plain loop and
``train.loop: lightning`` each complete under DP-SGD with summary.json's ``dp_sgd`` entry (tests/unit/test_dp_sgd.py
shows the step's bits); a run killed during aggregation 3 resumes from its checkpoint at 2 to the uninterrupted bytes
(the batches and noise come from the devices' key and the job, so a retrained job draws them again; another
key, or none kept, is refused in one line), each device's ε with it (its checkpoint
holds the steps of aggregations 1 and 2); each device's ε is Opacus's accountant stepped here over the jobs the trace
says arrived (SEAFL²'s notified jobs at the epochs they trained, jobs in flight at the end never), and σ calibrated to
train.dp_sgd.target_epsilon keeps the largest within it, tightly; ResNet-18 is refused naming its first
BatchNorm (its fix: tests/dist/test_features_on_ranks.py); ``runtime.batch_jobs`` > 1 trains one job at a time, one
line saying why."""
import json
import warnings
from collections import Counter

import pytest

import in_process
from one_line import one_line
from resuming import ROOT, assert_same_run, cli, killed_during_3, reference, refused, resumed_from_2, run_args, summary
from seafl_dist.privacy.device_key import device_key_path
from seafl_dist.privacy.keys import fingerprint
from seafl_dist.runtime.rundir import private_dir
from small_runs import DP_SGD_KEY, QUICKSTART, SMALL

DP = ["train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=0.5", "train.dp_sgd.clip=1.0", *DP_SGD_KEY]
EVERY_2 = ["run.checkpoint_every=2", "run.checkpoint_every_s=null"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    root = tmp_path_factory.mktemp("dp_sgd")
    return reference(root / "dp", [*SMALL, *DP, *EVERY_2])


def test_a_plain_loop_run_completes_under_dp_sgd_and_says_so(plain):
    s = summary(plain)
    assert s["status"] == "completed" and s["dp_sgd"] == {"clip": 1.0, "noise_multiplier": 0.5, "sampling": "poisson",
                                                          "grad_sample_mode": "hooks", "replaced": [],
                                                          "epsilon": s["dp_sgd"]["epsilon"]}
    assert (plain / "events.jsonl").read_text().count('"aggregate"') == 6
    assert "dp_sgd" in (plain / "config.yaml").read_text()


def test_a_killed_dp_sgd_run_resumes_to_the_uninterrupted_bytes(plain, tmp_path):
    ref = plain
    out = tmp_path / "killed"
    state = killed_during_3([*SMALL, *DP, *EVERY_2], out)
    assert state["dp_sgd_steps"] == {"steps": dict(sorted(arrived_steps(ref, through=2).items()))}
    other = tmp_path / "other.key"
    other.write_text("another key of the devices, not the run's")
    err = refused(["run", QUICKSTART, *SMALL, *DP, *EVERY_2, f"train.dp_sgd.key_file={other}", "--out", out], out)
    assert "is not the key" in err and fingerprint(other.read_bytes()) in err  # another key: refused, nothing touched
    kept = device_key_path(private_dir(out))
    assert kept.read_bytes().strip() == (ROOT / "tests" / "dp_test.key").read_bytes().strip()
    moved = kept.rename(tmp_path / "moved.key")
    err = refused(["run", QUICKSTART, *SMALL, *DP, *EVERY_2, "train.dp_sgd.key_file=null", "--out", out], out)
    assert "is missing" in err and "train.dp_sgd.key_file" in err  # the key gone, none given: refused
    moved.rename(kept)
    resumed_from_2(ref, [*SMALL, *DP, *EVERY_2], out)
    assert_same_run(ref, out)  # summary.json's dp_sgd.epsilon included: the same ε bytes
    assert summary(out)["dp_sgd"]["epsilon"]["max"] > 0


# ---- the devices' key (privacy/device_key.py): never run.seed, never released ------------------------------------
UNKEYED = [x for x in DP if not x.startswith("train.dp_sgd.key_file")]
SHORT = ["run.max_aggregations=2"]


def files_of(run_dir):
    return {p: p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_fresh_keys_draw_afresh_and_no_key_reaches_a_file_the_run_keeps(plain, tmp_path, capsys):
    key = (ROOT / "tests" / "dp_test.key").read_bytes().strip()
    assert not [p for p, data in files_of(plain).items() if key in data]  # config.yaml holds the key's path only
    runs = [reference(tmp_path / f"fresh{i}", [*SMALL, *UNKEYED, *SHORT]) for i in range(2)]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("seafl: dp_sgd: ")]
    assert len(lines) == 2 and all("a fresh key from os.urandom (fingerprint" in ln for ln in lines)
    assert lines[0] != lines[1]  # two fingerprints
    a, b = ((r / "model.pt").read_bytes() for r in runs)
    assert a != b, "the same config and run.seed drew the same DP-SGD batches and noise under two fresh keys"
    assert (runs[0] / "config.yaml").read_bytes() == (runs[1] / "config.yaml").read_bytes()
    assert not any(private_dir(r).exists() for r in runs)  # a completed run keeps no key


def test_a_restart_before_the_first_checkpoint_draws_again_from_the_kept_key(tmp_path, monkeypatch, capsys):
    out = tmp_path / "restart"
    args = [*SMALL, *UNKEYED, *EVERY_2, "run.max_aggregations=3"]
    stopped = cli(*run_args(args, out), fault="during_aggregate:1")
    assert stopped.returncode != 0 and not list(private_dir(out).glob("checkpoint-*"))
    key = device_key_path(private_dir(out)).read_text()
    restarted = in_process.seafl(*run_args(args, out))
    assert restarted.returncode == 0 and f"keyed by the key kept in {device_key_path(private_dir(out))}" in \
        restarted.stderr, restarted.stderr[-2000:]
    monkeypatch.setenv("SEAFL_DP_SGD_KEY", key)
    ref = reference(tmp_path / "ref", args)  # the kept key, given: the same draws
    for name in ("events.jsonl", "metrics.csv", "model.pt"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name


# ---- each device's ε, against Opacus's own accountant over the trace's arrived jobs ------------------------------
BATCH = 16  # configs/quickstart.yaml's train.batch_size
DELTA = 1e-5  # privacy.delta's default


def steps_per_epoch(n: int, b: int = BATCH) -> int:
    """The plan's batches of an epoch (train/plan.py): ceil(n / b), a trailing batch of one sample skipped."""
    batches = -(-n // b)
    return batches - 1 if n % b == 1 and n > 1 and b > 1 else batches


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def arrived_steps(run_dir, through=None) -> Counter:
    """Each device's DP steps over the updates of the trace's aggregate events (up to version ``through``)."""
    steps, n = Counter(), {}
    for ev in events(run_dir):
        if ev["event"] == "aggregate" and (through is None or ev["version"] <= through):
            for u in ev["updates"]:
                steps[u["device"]] += u["epochs"] * steps_per_epoch(u["n_samples"])
                n[u["device"]] = u["n_samples"]
    arrived_steps.n = n
    return steps


def opacus_epsilons(run_dir, kind: str, sigma: float, num: int = 10) -> list[float]:
    from opacus.accountants import PRVAccountant, RDPAccountant
    steps, out = arrived_steps(run_dir), []
    for k in range(num):
        acc = {"rdp": RDPAccountant, "prv": PRVAccountant}[kind]()
        for _ in range(steps[k]):
            acc.step(noise_multiplier=sigma, sample_rate=min(1.0, BATCH / arrived_steps.n[k]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(float(acc.get_epsilon(DELTA)) if steps[k] else 0.0)
    return out


def test_each_devices_epsilon_is_opacus_rdp_over_its_arrived_jobs(plain):
    eps = summary(plain)["dp_sgd"]["epsilon"]
    want = opacus_epsilons(plain, "rdp", 0.5)
    assert eps["by_device"] == want and eps["max"] == max(want) and eps["accountant"] == "rdp"
    assert eps["delta"] == DELTA and eps["devices_charged"] == sum(1 for e in want if e > 0)


def test_the_report_puts_each_devices_epsilon_beside_its_speed(plain, tmp_path):
    import csv
    proc = in_process.seafl("report", plain, "--out", tmp_path / "rep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = opacus_epsilons(plain, "rdp", 0.5)
    with open(tmp_path / "rep" / "participation.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["dp_sgd_epsilon"]) for r in rows] == pytest.approx(want, rel=1e-12)
    with open(tmp_path / "rep" / "dp_sgd_epsilon.csv") as f:
        drawn = list(csv.DictReader(f))
    assert [float(r["dp_sgd_epsilon"]) for r in drawn] == pytest.approx(want, rel=1e-12)
    assert [r["mean_job_s"] for r in drawn] == [r["mean_job_s"] for r in rows]
    assert (tmp_path / "rep" / "dp_sgd_epsilon.png").stat().st_size > 0


def test_seafl2_partial_jobs_are_charged_at_their_steps_and_unarrived_ones_never(tmp_path, capsys):
    """With σ calibrated to train.dp_sgd.target_epsilon = 3 over the schedule replayed before the run: the run is the
    whole schedule here, so its largest ε is within 3 and a σ 1e-5 smaller would exceed it (Opacus, over the trace)."""
    out = reference(tmp_path / "s2", [*SMALL, "train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=null",
                                      "train.dp_sgd.target_epsilon=3", "algorithm.name=seafl2", "train.epochs=2",
                                      "algorithm.staleness_limit=1", "run.seed=2"])
    sigma = summary(out)["dp_sgd"]["noise_multiplier"]
    assert summary(out)["dp_sgd"]["target_epsilon"] == 3 and 0 < sigma
    assert "noise_multiplier: null" in (out / "config.yaml").read_text()  # what was given: the run reruns as it is
    said = [ln for ln in capsys.readouterr().err.splitlines() if "calibrated so that every device" in ln]
    assert len(said) == 1 and f"σ {sigma:.6g}" in said[0]
    evs = events(out)
    aggregated = {u["job"]: u for ev in evs if ev["event"] == "aggregate" for u in ev["updates"]}
    started = {ev["job"]: ev["device"] for ev in evs if ev["event"] == "start"}
    assert any(u["epochs"] == 1 for u in aggregated.values()), "no notified job arrived: the partial edge is untested"
    never = set(started) - set(aggregated)
    assert never, "every started job arrived: the unarrived edge is untested"
    eps = summary(out)["dp_sgd"]["epsilon"]
    assert eps["by_device"] == opacus_epsilons(out, "rdp", sigma) and eps["accountant"] == "rdp"
    assert max(eps["by_device"]) <= 3 < max(opacus_epsilons(out, "rdp", sigma * (1 - 1e-5)))
    charged = arrived_steps(out)  # the steps of the aggregated updates only: the jobs in `never` cost nothing
    assert eps["steps_by_device"] == [charged[k] for k in range(10)]
    idle = [k for k in range(10) if k not in charged]
    assert idle and all(eps["by_device"][k] == 0.0 for k in idle), idle


def test_the_lightning_loop_runs_under_dp_sgd(tmp_path):
    out = reference(tmp_path / "lightning", [*SMALL, *DP, "train.loop=lightning", "run.max_aggregations=3"])
    assert summary(out)["status"] == "completed" and summary(out)["dp_sgd"]["sampling"] == "poisson"


RESNET = [*SMALL, *DP, "run.max_aggregations=1", "model.name=resnet18", "model.width=0.125"]


def test_batch_norm_is_refused_in_one_line_naming_the_layer(tmp_path):
    """(With train.dp_sgd.fix_modules it trains with GroupNorm: tests/dist/test_features_on_ranks.py, W = 1 and 3.)"""
    proc = in_process.seafl("run", QUICKSTART, *RESNET, "--out", tmp_path / "bn")
    assert proc.returncode == 2 and not (tmp_path / "bn").exists()
    one_line(proc.stderr, "config key 'model.name' has value 'resnet18'", "'stem.1' (BatchNorm2d)",
             "train.dp_sgd.fix_modules: true")


def test_batch_jobs_train_one_job_at_a_time_saying_why(tmp_path):
    proc = in_process.seafl("run", QUICKSTART, *SMALL, *DP, "runtime.batch_jobs=2",
                            "run.max_aggregations=1", "--out", tmp_path / "g2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "runtime.batch_jobs=2" in ln]
    assert len(lines) == 1 and "train.dp_sgd.enabled is true (Poisson batches vary in size" in lines[0]


def test_a_users_module_is_probed_at_the_calibrated_sigma(tmp_path):
    """A model named by import path is probed (runtime/model_checks.py check_user_model) before it trains: under
    target_epsilon at the σ calibrated, as its jobs train (the config's σ is null: no DP step could take it)."""
    out = reference(tmp_path / "um", [*SMALL, "model.name=lightning_modules:lenet_with_hook", "train.dp_sgd.enabled=true",
                                      "train.dp_sgd.noise_multiplier=null", "train.dp_sgd.target_epsilon=8",
                                      "run.max_aggregations=2"])
    dp = summary(out)["dp_sgd"]
    assert 0 < dp["epsilon"]["max"] <= 8 and dp["noise_multiplier"] > 0
