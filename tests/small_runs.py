"""The tiny quickstart variant the CLI and distributed tests run, and each algorithm's extras.

Runs are tiny (digits, 10 devices, 4 in flight, 6 aggregations) so the cost is mostly the
interpreter importing torch and Lightning. One torch thread everywhere: the same thread count
gives bit-identical training on every rank, and two spinning intra-op threads on two busy cores
are many times slower.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
SMALL = ["devices.num=10", "devices.concurrency=4", "algorithm.buffer_size=2", "train.epochs=1",
         "run.max_aggregations=6", "runtime.threads=1", "runtime.device=cpu", "logging.progress=none"]
# SEAFL² with beta = 1 and two epochs: with this seed, blocked aggregations notify stragglers
# that then upload after their first epoch (the tests check it, so a changed schedule cannot hide it).
PER_ALGORITHM = {
    "seafl": [],
    "seafl2": ["train.epochs=2", "algorithm.staleness_limit=1", "run.seed=2"],
    "fedbuff": [],
    "fedasync": [],
    "fedavg": [],
    "fadas": [],  # a server optimizer's state (AMSGrad's m, v, v̂) on rank 0
    "asyncsgd": ["algorithm.asyncsgd.lr=0.5"],
    "port": ["algorithm.port.lag=2"],  # a state of two models (algo/port.py): the W = 3 job keeps it on rank 0
    "fedstaleweight": [],  # a state per device seen (algo/fedstaleweight.py), on rank 0 in the W = 3 job
}
# FedCompass on SMALL's 10 devices: every device trains (M = N), steps in [5, 30] keep the jobs short
FEDCOMPASS = ["algorithm.name=fedcompass", "devices.concurrency=10", "algorithm.fedcompass.q_min=5",
              "algorithm.fedcompass.q_max=30"]
# SCAFFOLD (algo/scaffold.py) needs plain SGD: the quickstart's momentum 0.9 is refused
SCAFFOLD = ["algorithm.name=scaffold", "train.momentum=0"]
# The noise key two DP runs share when a test compares their bytes (privacy/keys.py): a test fixture, no secret.
# Without it each DP run draws a fresh key, so two runs (or a run and its reference) differ in their noise.
DP_KEY = [f"privacy.key_file={ROOT / 'tests' / 'dp_test.key'}"]
# The devices' DP-SGD key (privacy/device_key.py) two DP-SGD runs share when a test compares their bytes: without it
# each run draws its batches and noise from a fresh key. The same fixture file: the two streams' domains differ.
DP_SGD_KEY = [f"train.dp_sgd.key_file={ROOT / 'tests' / 'dp_test.key'}"]
