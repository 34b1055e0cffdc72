"""One job of a finished run, trained again with its loss printed at every step: why did it blow up?

    python benchmarks/job_losses.py RUN_DIR --job 474 [--every 1] [--save-start w.pt | --start w.pt]

The job's device, base version and epochs come from RUN_DIR/events.jsonl. Its start model w_{t_k} is
rebuilt by rerunning RUN_DIR/config.yaml to ``run.max_aggregations = t_k`` (a run's model.pt is its
last global version), in a temporary directory; the job then trains from it with its own seeds,
exactly as the run trained it, and each optimizer step's loss, gradient norm (after clipping, where
``train.grad_clip_val`` is set) and the distance from the start model are printed. ``--save-start`` keeps
that start model; ``--start`` trains from a kept one instead of rerunning the run (the same start
model under other kernels: whether the job itself, not its start, decides). Set ``ONEDNN_MAX_CPU_ISA`` the same as the run had it (the
kernels decide the last bits, and the last bits decide whether a borderline job blows up).

Also printed: the device's shard (samples, label histogram) and the local recipe (lr, momentum,
batch size, steps per epoch), which is what makes a blow-up possible.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import seafl_dist
from seafl_dist.runtime.executor import JobSpec, run_job
from seafl_dist.runtime.setup import prepare
from seafl_dist.train.flat import flatten


def job_record(run_dir: Path, job: int) -> tuple[dict, dict | None]:
    """The job's start event and, if it was aggregated, its entry in the aggregate event."""
    start, entry = None, None
    with open(run_dir / "events.jsonl") as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "start" and e["job"] == job:
                start = e
            elif e["event"] == "aggregate":
                entry = next((dict(u, at_version=e["version"]) for u in e["updates"] if u["job"] == job), entry)
    if start is None:
        sys.exit(f"job_losses: no job {job} in {run_dir}/events.jsonl")
    return start, entry


def start_model(config: Path, version: int, tmp: Path) -> dict:
    """w_version of the run: its config rerun to ``version`` aggregations (quietly)."""
    out = tmp / "to-base"
    seafl_dist.run(str(config), out=out, run__max_aggregations=version, run__target_accuracy=None,
                   run__stop_on_divergence=False, logging__wandb__enabled=False)
    return torch.load(out / "model.pt", weights_only=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--every", type=int, default=1, help="print every N-th step (the largest loss is always said)")
    ap.add_argument("--save-start", type=Path, help="keep the start model (a state_dict) here")
    ap.add_argument("--start", type=Path, help="train from this start model instead of rerunning the run")
    args = ap.parse_args()
    start, entry = job_record(args.run_dir, args.job)
    device, base = start["device"], start["version"]
    epochs = entry["epochs"] if entry else len(start["epoch_ends"])
    if args.start:
        state = torch.load(args.start, weights_only=True)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            state = start_model(args.run_dir / "config.yaml", base, Path(tmp))
    if args.save_start:
        torch.save(state, args.save_start)
    cfg = seafl_dist.make_config(str(args.run_dir / "config.yaml"))
    torch.set_num_threads(cfg.runtime.threads or torch.get_num_threads())
    exp = prepare(cfg, need_test=False)
    model = exp.new_model()
    model.load_state_dict(state)
    w0 = flatten(model)
    shard = exp.shard(device)
    labels = exp.train.labels[shard].numpy()
    t = cfg.train
    steps_per_epoch = math.ceil(len(shard) / t.batch_size)
    print(f"job {args.job}: device {device}, base version {base}, {epochs} epochs"
          + (f", aggregated at version {entry['at_version']} with staleness {entry['staleness']},"
             f" weight {entry['weight']:.4g}" if entry else ", never aggregated"))
    print(f"shard: {len(shard)} samples, labels {np.bincount(labels, minlength=exp.train.num_classes).tolist()}")
    print(f"recipe: lr {t.lr}, momentum {t.momentum}, weight decay {t.weight_decay}, batch {t.batch_size} "
          f"({steps_per_epoch} steps an epoch), grad_clip_val {t.grad_clip_val}")

    rows = []
    plain_step = model.training_step

    def logged_step(batch, batch_idx):
        loss = plain_step(batch, batch_idx)
        rows.append({"loss": float(loss.detach())})
        return loss

    model.training_step = logged_step

    def on_step():
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        rows[-1]["drift"] = float(torch.linalg.vector_norm(flatten(model) - w0))
        rows[-1]["grad"] = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))

    spec = JobSpec(job=args.job, device=device, version=base, epochs=epochs, finish=0.0)
    result = run_job(exp, model, spec, w0, on_step=on_step)
    worst = max(range(len(rows)), key=lambda i: rows[i]["loss"] if math.isfinite(rows[i]["loss"]) else math.inf)
    print(f"{'step':>5} {'epoch':>5} {'loss':>12} {'grad norm':>12} {'|w - w_start|':>14}")
    for i, r in enumerate(rows):
        if i % args.every == 0 or i == worst or i == len(rows) - 1:
            print(f"{i:5d} {i // steps_per_epoch + 1:5d} {r['loss']:12.5g} {r.get('grad', float('nan')):12.5g}"
                  f" {r.get('drift', float('nan')):14.5g}")
    print(f"update norm |w_k - w_t_k| = {float(torch.linalg.vector_norm(result - w0)):.5g}"
          f" (the run recorded it in the divergence line, if it diverged)")


if __name__ == "__main__":
    main()
