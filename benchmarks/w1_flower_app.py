"""W1 as a Flower 1.42 simulation (benchmarks/w1_flower.py runs it and times the whole command).

    /path/to/flwr-venv/bin/python benchmarks/w1_flower_app.py --data-root ROOT [--rounds 10] [--cpus 2]
        [--momentum 0.9] [--form fused]

A Flower app in the shape of Flower's own quickstart-pytorch (Message API: a ``ClientApp`` whose
``train`` gets the global arrays and returns its trained arrays and ``num-examples``; a
``ServerApp`` running ``flwr.serverapp.strategy.FedAvg`` with a centralised ``evaluate_fn``),
started with ``flwr.simulation.run_simulation`` on the Ray backend:

- 100 supernodes, node k holding MNIST-format training images 600k .. 600k + 599 (its partition);
- FedAvg, ``fraction_train=0.2`` (20 clients a round), no federated evaluation, ``--rounds`` rounds;
- each client: LeNet-5, SGD lr 0.01 with ``--momentum``, E = 5, B = 32, written as ``--form`` says
  (benchmarks/w1_client_forms.py: from w1_bare.py's ``train_local`` to a fused SGD over the shard
  normalised once), 1 torch thread;
- the server evaluates the global model on the 10,000 test images before the first round and
  after each (11 evaluations, as seafl's W1 run with ``run.eval_every=1``), 1 torch thread, in
  the form's layout;
- ``client_resources={"num_cpus": 1}`` and a Ray cluster of ``--cpus`` CPUs: as many clients train
  at once as there are cores (Flower's default of 2 CPUs a client would run one at a time).

Each client process reads the IDX files once and keeps them (a module-level cache, as Flower's
examples keep their ``FederatedDataset``). Prints one JSON line: the rounds, clients trained,
the evaluations, the final centralised accuracy and the CPU seconds the clients spent in their
training calls (their own thread's, as each reports them in its metrics). Needs ``flwr[simulation]==1.42.*`` and torch
in the interpreter that runs it (docs/performance.md, "W1 against Flower"); not a project dependency.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # w1_bare, in the driver and in Ray's workers
os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent),
                                            *[p for p in [os.environ.get("PYTHONPATH")] if p]])

import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from w1_bare import lenet5, normalise, read_idx_images, read_idx_labels  # noqa: E402
from w1_client_forms import FORMS, LAYOUT  # noqa: E402

DEVICES, PER_DEVICE, PER_ROUND = 100, 600, 20
_DATA: dict = {}


def data(root: str, split: str):
    """The images and labels of ``split``, read once per process."""
    if split not in _DATA:
        _DATA[split] = (read_idx_images(Path(root), split), read_idx_labels(Path(root), split))
    return _DATA[split]


# ---- the clients --------------------------------------------------------------------------

client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    """Local training of one device: the global arrays in, the trained arrays and sample count out."""
    torch.set_num_threads(1)
    cpu0 = time.thread_time()  # this thread's CPU: the training itself (1 torch thread), not Ray's threads
    cfg = msg.content["config"]
    images, labels = data(cfg["data-root"], "train")
    k = int(context.node_config["partition-id"])
    shard = torch.arange(k * PER_DEVICE, (k + 1) * PER_DEVICE)
    model = lenet5()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    gen = torch.Generator().manual_seed(int(cfg["round"]) * DEVICES + k)
    steps = FORMS[cfg["form"]](model, images, labels, shard, int(cfg["epochs"]), gen, lr=float(cfg["lr"]),
                               momentum=float(cfg["momentum"]), batch_size=int(cfg["batch-size"]))
    reply = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                        "metrics": MetricRecord({"num-examples": len(shard), "steps": steps,
                                                 "train-cpu-s": time.thread_time() - cpu0,
                                                 "torch-threads": torch.get_num_threads()})})
    return Message(content=reply, reply_to=msg)


# ---- the server ---------------------------------------------------------------------------

server = ServerApp()


class RoundedFedAvg(FedAvg):
    """FedAvg that tells each round's clients the round number (it seeds their shuffles), counts the
    updates it aggregates and sums the CPU seconds the clients report for their training."""

    aggregated, client_cpu, client_threads = 0, 0.0, set()

    def configure_train(self, server_round, arrays, config, grid):
        config["round"] = server_round
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.aggregated += sum(not m.has_error() for m in replies)
        for m in replies:
            if not m.has_error():
                self.client_cpu += float(m.content["metrics"]["train-cpu-s"])
                self.client_threads.add(int(m.content["metrics"]["torch-threads"]))
        return super().aggregate_train(server_round, replies)


@server.main()
def main(grid: Grid, context: Context) -> None:
    cfg = json.loads(os.environ["W1_RUN_CONFIG"])  # run_simulation passes no run config of its own
    torch.set_num_threads(1)
    torch.manual_seed(0)
    fmt = LAYOUT.get(cfg["form"], torch.contiguous_format)
    model = lenet5()
    test_x, test_y = data(cfg["data-root"], "t10k")
    evals = []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        """The global model on the 10,000 test images (batches of 1,024, as seafl evaluates)."""
        model.load_state_dict(arrays.to_torch_state_dict())
        model.to(memory_format=fmt).eval()
        correct, loss = 0, 0.0
        with torch.no_grad():
            for lo in range(0, len(test_x), 1024):
                logits = model(normalise(test_x[lo:lo + 1024]).contiguous(memory_format=fmt))
                loss += float(torch.nn.functional.cross_entropy(logits, test_y[lo:lo + 1024], reduction="sum"))
                correct += int((logits.argmax(1) == test_y[lo:lo + 1024]).sum())
        evals.append({"round": server_round, "accuracy": correct / len(test_x), "loss": loss / len(test_x)})
        return MetricRecord({"accuracy": correct / len(test_x)})

    strategy = RoundedFedAvg(fraction_train=PER_ROUND / DEVICES, fraction_evaluate=0.0,
                             min_train_nodes=PER_ROUND, min_available_nodes=DEVICES)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=int(cfg["rounds"]),
                            train_config=ConfigRecord({k: cfg[k] for k in ("data-root", "epochs", "lr", "momentum",
                                                                           "batch-size", "form")}),
                            evaluate_fn=evaluate)
    assert result.arrays is not None, "Flower returned no final model"
    print(json.dumps({"rounds": int(cfg["rounds"]), "updates": strategy.aggregated, "evaluations": len(evals),
                      "final_accuracy": evals[-1]["accuracy"] if evals else None,
                      "client_train_cpu_s": strategy.client_cpu,
                      "client_torch_threads": sorted(strategy.client_threads), "momentum": float(cfg["momentum"])}),
          flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-root", required=True, help="holds MNIST/raw/ (IDX files, gzipped or not)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cpus", type=int, default=os.cpu_count(), help="Ray's CPUs: clients training at once")
    ap.add_argument("--momentum", type=float, default=0.9, help="the clients' SGD momentum")
    ap.add_argument("--form", default="index", choices=FORMS, help="how the clients' local training is written "
                    "(benchmarks/w1_client_forms.py)")
    args = ap.parse_args()
    run_config = {"data-root": str(Path(args.data_root).resolve()), "rounds": args.rounds, "epochs": 5, "lr": 0.01,
                  "momentum": args.momentum, "batch-size": 32, "form": args.form}
    os.environ["W1_RUN_CONFIG"] = json.dumps(run_config)
    run_simulation(server_app=server, client_app=client, num_supernodes=DEVICES,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": args.cpus}})
