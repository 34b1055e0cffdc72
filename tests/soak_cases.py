"""The kill soak's cases (issue 52): the newest features together, each codec with error feedback and each server
optimizer spread over them, on the tiny quickstart variant, checkpointing after every aggregation.

- ``dp-cap``: DP (clipping, noise, the participation cap m = 2 at 6 aggregations, SEAFL's model form) with top-k
  and error feedback, and AMSGrad with the delay-adaptive η on the released w′ (its m, v, v̂ in the checkpoints),
  and record-level DP-SGD on the devices (each device's steps in the checkpoints, its ε in summary.json);
- ``device-eval``: device evaluation (held-out samples of each device) with fp16 + error feedback and momentum, and
  CA²FL (its cache of each device's latest update, the rule's state, in the checkpoints);
- ``churn``: a device profile with availability windows and dropouts, SEAFL², bf16 + error feedback and Adam;
- ``lightning``: a LightningModule that logs, trained by Lightning's loop, int8 + error feedback and Yogi, and Port
  (its last two global models, the rule's state, in the checkpoints);
- ``datamodule``: a DataModule split naturally by a key of its samples (one device a speaker), QSGD + error
  feedback and Adagrad;
- ``scaffold``: SCAFFOLD's control variates (the worker-state case: each device's c_k on the worker that trains it,
  in the workers' residual files; the server's c of every kept version, the rule's state) with the upload priced.
:func:`kills` gives each case a worker killed after aggregation 2 and rank 0 killed during aggregation 4 (and,
with ``rounds`` > 1, more of each at the later aggregations of a longer run).
"""
from pathlib import Path

from datamodules import ARGS as DM_ARGS
from datamodules import write
from device_runs import churn_overrides, write_profile
from small_runs import DP_KEY, DP_SGD_KEY, SCAFFOLD, SMALL

TESTS = Path(__file__).resolve().parent
EVERY = ["run.checkpoint_every=1", "run.checkpoint_every_s=null"]


def feedback(codec: str, *extra) -> list[str]:
    return [f"compression.codec={codec}", *extra, "compression.error_feedback=true", "runtime.placement=device",
            "clock.upload_s=5"]


def cases(tmp: Path, aggregations: int = 6) -> tuple[dict[str, list[str]], Path]:
    """{name: overrides}, and the folder of the DataModule's module (it must be on the ranks' PYTHONPATH)."""
    mods = tmp / "mods"
    mods.mkdir(parents=True, exist_ok=True)
    dm = write(mods)
    profile = write_profile(tmp / "devices.csv")
    n = f"run.max_aggregations={aggregations}"
    out = {
        # the cap m: 10 devices x m inclusions outlast 2 updates an aggregation (m = 2 at CI's 6 aggregations)
        "dp-cap": [*SMALL, "privacy.enabled=true", "privacy.noise_multiplier=0.8", *DP_KEY,
                   "train.dp_sgd.enabled=true", "train.dp_sgd.noise_multiplier=0.8", *DP_SGD_KEY,  # and DP-SGD
                   f"privacy.max_participation={max(2, aggregations // 4 + 1)}",
                   "privacy.seafl_form=model", *feedback("topk", "compression.fraction=0.05"),
                   "algorithm.server_opt.name=amsgrad", "algorithm.server_opt.delay_adaptive=true"],
        "device-eval": [*SMALL, "data.device_holdout=0.25", "run.device_eval_every=2", "run.device_eval_sample=7",
                        "algorithm.name=ca2fl",
                        *feedback("fp16"), "algorithm.server_opt.name=momentum"],
        "churn": [*churn_overrides(profile, "algorithm.name=seafl2", "train.epochs=2", "algorithm.staleness_limit=1"),
                  *feedback("bf16"), "algorithm.server_opt.name=adam", "algorithm.server_opt.lr=0.01"],
        "lightning": [*SMALL, "model.name=lightning_modules:every_hook", "train.loop=lightning", *feedback("int8"),
                      "algorithm.name=port", "algorithm.port.lag=2",
                      "algorithm.server_opt.name=yogi", "algorithm.server_opt.lr=0.01"],
        "datamodule": [*SMALL, *DM_ARGS(dm, "SpeakersDM"), "data.partition=natural", "data.partition_by=speaker",
                       "devices.num=null", "data.device_test=writers",
                       *feedback("qsgd", "compression.levels=2", "compression.bucket=128"),
                       "algorithm.server_opt.name=adagrad", "algorithm.server_opt.lr=0.01"],
        "scaffold": [*SMALL, *SCAFFOLD, "runtime.placement=device", "clock.upload_s=5"],
    }
    return {k: [*v, n, *EVERY, f"data.root={tmp / 'data'}"] for k, v in out.items()}, mods


def kills(n_cases: int, rounds: int = 1, worker: int = 2) -> list[dict]:
    """Per case, ``rounds`` times: worker rank ``worker`` killed after aggregation 2 + 4r, rank 0 during aggregation
    4 + 4r."""
    out = []
    for i in range(n_cases):
        for r in range(rounds):
            out += [{"case": i, "fault": f"after_aggregate:{2 + 4 * r}:KILL@{worker}"},
                    {"case": i, "fault": f"during_aggregate:{4 + 4 * r}"}]
    return out


SAME = ("events.jsonl", "metrics.csv", "model.pt", "device_metrics.csv", "device_summary.csv", "train_log.csv")
