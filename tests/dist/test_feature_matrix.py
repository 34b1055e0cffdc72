"""The features together (issue 51): a pairwise matrix over the features that meet, each row a tiny run.

Factors (tests/pairwise.py covers every pair of their levels in some row):

- data: the bundled digits, a DataModule (tests/datamodules.py: WordsDM, or SpeakersDM when split by a key), LEAF
  writers' files (tests/leaf_files.py);
- partition: iid, dirichlet, natural (one device a writer), by_key (natural over `data.partition_by=speaker`);
- holdout: none, split (`data.device_holdout=0.25`), writers (`data.device_test=writers`), both with device
  evaluation every 2 aggregations;
- codec: none, or int8 with error feedback; server_opt: none or Adam; privacy: off, on (noise 0.8), or on with
  adaptive clipping (privacy.adaptive_clip: C_t and its noised count on rank 0, C_{t+1} in the checkpoint);
- rule, one of each kind: the default (seafl: stateless), one with a server state (ca2fl: its cache of each
  device's latest update, algo/memory.py's state, in every checkpoint), or one with worker state (scaffold: each
  device's control variate c_k on the worker that trains it, the server's c in the rule's state);
- churn: a device profile with availability windows and dropouts; wandb: offline; loop: plain or lightning;
- W: 1 (one process) or 3 (torchrun); resume: rank 0 killed during aggregation 4 and restarted by torchrun.
- prox_mu: FedProx's proximal term off (0) or `train.prox_mu=0.01` (issue 66), on every loop and W.
- defense: none, or Krum (`algorithm.defense.name=krum`, f = 0, K = 3: a filter, so with either rule; issue 65).
- attack: none, or a third of the devices malicious flipping their deltas' sign (`threats.attack=sign_flip`, made on
  the worker that trains the job, from its own stream; issue 65).
- dp_sgd: record-level DP-SGD off or on (`train.dp_sgd.enabled=true`, σ = 0.5, Opacus; issue 67): Poisson batches and
  noise from the devices' key and the job (the key shared), so a retrained job after a kill draws them again.

Every row must complete, and where it runs under torchrun (W = 3, or W = 1 with a kill) end with the bytes of
the same config run uninterrupted in this process. The pairs that may not meet are each run once and must be
refused in one line naming the key docs/configuration.md names for it (REFUSED below): they are the whole list of
refused combinations of these features. One torchrun job per W runs all of its rows (tests/soak_driver.py), so
the matrix costs two launches.
"""
import json
import os
import subprocess
import sys
from itertools import product

import pytest
import torch

from datamodules import ARGS as DM_ARGS
from datamodules import write as write_dm
from device_runs import CHURN, write_profile
from launching import clean_env
from leaf_files import WRITERS, write_leaf
from pairwise import pairwise
from resuming import summary
from seafl_dist.cli import main as seafl_main
from seafl_dist.data import clear_cache
from small_runs import DP_KEY, DP_SGD_KEY, QUICKSTART, SCAFFOLD, SMALL
from soak_cases import EVERY, SAME, TESTS
from wandb_runs import offline_env

pytestmark = pytest.mark.dist

FACTORS = {
    "data": ["digits", "datamodule", "leaf"],
    "partition": ["iid", "dirichlet", "natural", "by_key"],
    "holdout": ["none", "split", "writers"],
    "codec": ["none", "int8_ef"],
    "rule": ["default", "stateful", "worker_state"],
    "server_opt": ["none", "adam"],
    "privacy": [False, True, "adaptive"],
    "churn": [False, True],
    "wandb": [False, True],
    "loop": ["plain", "lightning"],
    "W": [1, 3],
    "resume": [False, True],
    "prox_mu": [0.0, 0.01],
    "defense": ["none", "krum"],
    "attack": ["none", "sign_flip"],
    "dp_sgd": [False, True],
}

# (pair, the key the one-line refusal names): docs/configuration.md's notes of these keys say why
REFUSED = {
    (("data", "digits"), ("partition", "natural")): "data.partition",  # digits has no writers
    (("data", "digits"), ("partition", "by_key")): "data.partition",  # natural (by_key is natural by a key)
    (("data", "leaf"), ("partition", "by_key")): "data.partition_by",  # LEAF's writers are its own
    (("data", "datamodule"), ("partition", "natural")): "data.partition",  # no writers without a key
    (("partition", "iid"), ("holdout", "writers")): "data.device_test",  # writers' own tests need natural
    (("data", "digits"), ("holdout", "writers")): "data.device_test",  # so digits (never natural) cannot
    (("partition", "dirichlet"), ("holdout", "writers")): "data.device_test",
    (("holdout", "split"), ("privacy", True)): "run.device_eval_every",  # un-noised per-device values
    (("holdout", "writers"), ("privacy", True)): "run.device_eval_every",
    # the DataModule's test split holds its devices' own speakers: no central test set under DP (docs/privacy.md)
    (("partition", "by_key"), ("privacy", True)): "data.name",
    # ca2fl's cache puts every past contributor into every later aggregation: no sensitivity (docs/privacy.md)
    (("rule", "stateful"), ("privacy", True)): "algorithm.name",
    # no sensitivity is derived for a defense (docs/robustness.md, "Defenses")
    (("privacy", True), ("defense", "krum")): "algorithm.defense.name",
    # DP's guarantee is about an honest device's records; malicious devices are outside it (docs/robustness.md)
    (("privacy", True), ("attack", "sign_flip")): "privacy.enabled",
    # scaffold: no sensitivity derived for c; Δc travels exact
    (("rule", "worker_state"), ("privacy", True)): "privacy.enabled",
    (("codec", "int8_ef"), ("rule", "worker_state")): "compression.codec",
    # option II's c_i⁺ reads plain SGD steps; DP-SGD's steps are noised after c − c_i would be added (settings/dp_sgd.py)
    (("rule", "worker_state"), ("dp_sgd", True)): "train.dp_sgd.enabled",
}
REFUSED.update({tuple((k, "adaptive" if k == "privacy" else v) for k, v in pair): key  # adaptive clipping is DP
                for pair, key in list(REFUSED.items()) if ("privacy", True) in pair})


def forbidden(row: dict) -> bool:
    return any(all(row.get(k) == v for k, v in pair) for pair in REFUSED)


ROWS, IMPOSSIBLE = pairwise(FACTORS, forbidden)


def overrides(row: dict, where) -> list[str]:
    """The run's `seafl run configs/quickstart.yaml` overrides for ``row``; ``where``: the matrix's folder."""
    leaf_dp = row["data"] == "leaf" and row["privacy"]
    args = [*SMALL, f"data.root={where / ('data_by_writer' if leaf_dp else 'data')}", *EVERY]
    if row["data"] == "datamodule":
        dm = "SpeakersDM" if row["partition"] == "by_key" else "WordsDM"
        args += DM_ARGS((where / "module.txt").read_text(), dm)
    elif row["data"] == "leaf":
        args += ["data.name=femnist", "devices.concurrency=2"]
    args += {"iid": ["data.partition=iid"], "dirichlet": ["data.partition=dirichlet"],
             "natural": ["data.partition=natural", "devices.num=null"],
             "by_key": ["data.partition=natural", "data.partition_by=speaker", "devices.num=null"]}[row["partition"]]
    if row["holdout"] != "none":
        args += ["run.device_eval_every=2", "run.device_eval_sample=7"]
        args += ["data.device_holdout=0.25"] if row["holdout"] == "split" else ["data.device_test=writers"]
    if row["codec"] == "int8_ef":
        args += ["compression.codec=int8", "compression.error_feedback=true", "runtime.placement=device"]
    if row["rule"] == "stateful":
        args += ["algorithm.name=ca2fl"]
    if row["rule"] == "worker_state":  # the DataModule's bag_of_words has its own SGD at lr 0.5: train.lr says so
        args += [*SCAFFOLD, "runtime.placement=device", *(["train.lr=0.5"] if row["data"] == "datamodule" else [])]
    if row["server_opt"] == "adam":
        args += ["algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01"]
    if row["privacy"]:
        args += ["privacy.enabled=true", "privacy.noise_multiplier=0.8", *DP_KEY]  # one key: the same noise
    if row["privacy"] == "adaptive":  # σ_b = 2 > z: z_Δ = (0.8⁻² − 2⁻²)^(−½); η_C = 1, so C_t moves
        args += ["privacy.adaptive_clip.enabled=true", "privacy.adaptive_clip.count_std=2",
                 "privacy.adaptive_clip.lr=1"]
    if row["churn"]:
        args += [*CHURN[len(SMALL):], f"devices.profile={where / 'devices.csv'}"]
    if row["wandb"]:
        args += ["logging.wandb.enabled=true", "logging.wandb.mode=offline"]
    if row["loop"] == "lightning":
        args += ["train.loop=lightning"]
    if row["prox_mu"]:
        args += [f"train.prox_mu={row['prox_mu']}"]
    if row["defense"] == "krum":  # Krum needs K ≥ 2f + 3 = 3 in flight (LEAF's five writers: three of them)
        args += ["algorithm.defense.name=krum", "algorithm.defense.f=0", "algorithm.buffer_size=3",
                 f"devices.concurrency={3 if row['data'] == 'leaf' else 4}"]
    if row["attack"] == "sign_flip":
        args += ["threats.malicious=0.34", "threats.attack=sign_flip"]
    if row["dp_sgd"]:
        args += ["train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=0.5", *DP_SGD_KEY]
    return args


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """The matrix's folder: the DataModule's module in mods/ (its name: module.txt), LEAF files in data/ (and split
    by writer in data_by_writer/, for DP), the device profile."""
    base = tmp_path_factory.mktemp("matrix")
    (base / "mods").mkdir()
    (base / "module.txt").write_text(write_dm(base / "mods"))
    write_leaf(base / "data")
    # under DP the central test set may hold no device's own writers (settings refuse it: docs/privacy.md,
    # "Evaluation and adjacency"): the same training writers, and the test samples of a writer no device holds
    write_leaf(base / "data_by_writer", {**{w: (n, 0) for w, (n, _) in WRITERS.items()},
                                         "f0099_00": (0, sum(t for _, t in WRITERS.values()))})
    write_profile(base / "devices.csv")
    return base


def in_process(where, args, out, monkeypatch):
    """``seafl run`` in this process (W&B offline under ``where``): the exit code."""
    for k, v in offline_env(where).items():
        if k.startswith("WANDB_") or k == "NETRC":
            monkeypatch.setenv(k, v)
    monkeypatch.syspath_prepend(str(where / "mods"))
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            return seafl_main(["run", str(QUICKSTART), *args, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
        clear_cache()


@pytest.fixture(scope="module")
def launched(where):
    """Each W's torchrun rows run by one torchrun job: {W: stderr}."""
    errs = {}
    for world in (1, 3):
        rows = [i for i, r in enumerate(ROWS) if r["W"] == world and (world == 3 or r["resume"])]
        cases = [{"args": overrides(ROWS[i], where), "out": str(where / f"w{world}" / f"row{i}")} for i in rows]
        kills = [{"case": j, "fault": "during_aggregate:4"} for j, i in enumerate(rows) if ROWS[i]["resume"]]
        plan = where / f"plan-w{world}.json"
        plan.write_text(json.dumps({"cases": cases, "kills": kills}))
        env = offline_env(where, base=clean_env())
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(where / "mods")] + [p for p in [env.get("PYTHONPATH")]
                                                                                 if p])
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
               f"--max-restarts={len(kills)}", str(TESTS / "soak_driver.py"), str(plan)]
        proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=1500)
        assert proc.returncode == 0, proc.stderr[-6000:]
        errs[world] = proc.stderr
    return errs


def test_the_matrix_covers_every_pair_and_refuses_only_the_listed_ones():
    assert IMPOSSIBLE == set(REFUSED)
    assert len(ROWS) <= 20, len(ROWS)


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[f"row{i}" for i in range(len(ROWS))])
def test_each_row_completes_and_matches_its_uninterrupted_run(i, where, launched, monkeypatch):
    row = ROWS[i]
    args = overrides(row, where)
    ref = where / "ref" / f"row{i}"
    assert in_process(where, args, ref, monkeypatch) == 0, row
    assert summary(ref)["status"] == "completed", row
    if row["W"] == 1 and not row["resume"]:
        return
    got = where / f"w{row['W']}" / f"row{i}"
    if row["resume"]:
        assert launched[row["W"]].count(f"seafl: resumed {got} after aggregation 3 ") == 1, \
            launched[row["W"]][-4000:]
    compared = [f for f in SAME if (ref / f).exists()]
    assert {"events.jsonl", "metrics.csv", "model.pt"} <= set(compared)
    for f in SAME:
        assert (got / f).exists() == (ref / f).exists(), (f, row)
    for f in compared:
        assert (got / f).read_bytes() == (ref / f).read_bytes(), f"{f} differs from the uninterrupted run: {row}"
    s_ref, s_got = summary(ref), summary(got)
    s_ref.pop("wall_time_s", None), s_got.pop("wall_time_s", None)  # absent under DP
    assert s_got == s_ref, {k: (s_ref.get(k), s_got.get(k)) for k in {*s_ref, *s_got} if s_ref.get(k) != s_got.get(k)}


def refused_row(pair) -> dict:
    """The first row (defaults but for data, partition, holdout, privacy, rule, codec, loop, defense, attack, dp_sgd) that holds
    ``pair`` and whose refused pairs all name ``pair``'s key."""
    base = {name: levels[0] for name, levels in FACTORS.items()}
    varied = ("data", "partition", "holdout", "privacy", "rule", "codec", "loop", "defense", "attack", "dp_sgd")
    for levels in product(*(FACTORS[k] for k in varied)):
        row = {**base, **dict(zip(varied, levels))}
        fired = {REFUSED[p] for p in REFUSED if all(row[k] == v for k, v in p)}
        if all(row[k] == v for k, v in pair) and fired == {REFUSED[pair]}:
            return row
    raise AssertionError(f"no row holds {pair} alone")


@pytest.mark.parametrize("pair", sorted(REFUSED, key=str), ids=[f"{a[1]}-{b[1]}" for a, b in sorted(REFUSED, key=str)])
def test_each_refused_pair_is_one_line_naming_its_key(pair, where, tmp_path, capsys, monkeypatch):
    row = refused_row(pair)
    assert in_process(where, overrides(row, where), tmp_path / "run", monkeypatch) == 2, row
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("seafl: error: ")]
    assert len(errors) == 1 and REFUSED[pair] in errors[0], (row, err)
    # a config's refusal is its only line; a DataModule's writers are known once it is loaded, after the run's
    # "running ..." line: that is the one other line allowed
    assert all(line in errors or line.startswith("seafl: running ") for line in err), err
    assert not (tmp_path / "run").exists()
