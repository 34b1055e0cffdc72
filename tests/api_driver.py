"""A user's script calling ``seafl_dist.run``, for the API's signal and failure tests (run as a child process).

    python tests/api_driver.py signals OUT      # interrupted by SIGINT, SIGUSR1, SIGTERM, then completed
    python tests/api_driver.py fail OUT         # an aggregation rule that raises: RunFailed
    python tests/api_driver.py thread OUT       # run() off the main thread
    torchrun --nproc_per_node=3 tests/api_driver.py signals OUT    # the same on every rank

Each call's outcome is one line ``RESULT <json>`` on stdout (with the rank). The script installs
handlers of its own first; they must be back after every call and never called. Signals come
from the ``SEAFL_FAULT`` hook at an exact point (``@*``: to every rank, as torchrun and Slurm do).
"""
import json
import os
import signal
import sys
import threading
from pathlib import Path

import torch

from seafl_dist.algo import AggregationResult, screen

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
SMALL = {"devices.num": 10, "devices.concurrency": 4, "algorithm.buffer_size": 2, "train.epochs": 1,
         "run.max_aggregations": 6, "runtime.threads": 1, "runtime.device": "cpu", "logging.progress": "none"}
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
called = []


def failing_mean(cfg, version, global_flat, updates, base_model):
    """An aggregation rule that breaks at the third aggregation (a user's bug)."""
    if version >= 2:
        raise RuntimeError(f"injected failure at version {version}")
    accepted, info = screen(version, global_flat, updates)
    for i in accepted:
        info[i]["weight"] = 1 / len(accepted)
    return AggregationResult(torch.stack([updates[i].flat for i in accepted]).mean(0), info)


def mine(signum, frame):
    called.append(signum)


def attempt(out, fault=None, **overrides) -> dict:
    import seafl_dist
    if fault:
        os.environ["SEAFL_FAULT"] = fault
    else:
        os.environ.pop("SEAFL_FAULT", None)
    result = {"rank": int(os.environ.get("RANK", "0"))}
    try:
        summary = seafl_dist.run(QUICKSTART, out=out, **SMALL, **overrides)
        result.update(outcome="returned", status=summary and summary["status"])
    except seafl_dist.RunInterrupted as err:
        result.update(outcome="RunInterrupted", signal=err.signal, is_keyboard_interrupt=isinstance(err, KeyboardInterrupt))
    except seafl_dist.RunFailed as err:
        result.update(outcome="RunFailed", message=str(err), summary=err.summary and err.summary["status"])
    result["handlers_restored"] = all(signal.getsignal(s) is mine for s in SIGNALS)
    print("RESULT " + json.dumps(result), flush=True)
    return result


def main(scenario: str, out: str) -> None:
    for s in SIGNALS:
        signal.signal(s, mine)
    if scenario == "signals":
        for point, sig in (("during_aggregate:2", "INT"), ("after_aggregate:3", "USR1"), ("during_aggregate:4", "TERM")):
            attempt(out, f"{point}:{sig}@*")
        attempt(out)
    elif scenario == "fail":
        attempt(out, **{"algorithm.name": "api_driver:failing_mean", "algorithm.staleness_limit": None})
    elif scenario == "thread":
        t = threading.Thread(target=attempt, args=(out,))
        t.start()
        t.join()
    print("CALLED " + json.dumps(called), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
