"""The sections of how a run executes and reports, not what it computes: ``runtime`` and ``logging``.

Most of these may change when a run resumes (docs/failures.md, "What may change on resume");
``runtime.precision`` and ``runtime.batch_jobs`` change the trained bits and may not. Declared as in
:mod:`.sections`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import Text, check_fields, list_of
from seafl_dist.settings.keys import key, section


@dataclass(kw_only=True)
class RuntimeConfig:
    device: str = key("auto", "where models train and evaluate: `auto` (a GPU when there is one), `cpu` or `cuda`",
                      ("auto", "cpu", "cuda"))
    backend: str = key("auto", "payload transport: `auto` (= gloo), `gloo`, or `nccl` (opt-in)",
                       ("auto", "gloo", "nccl"),
                       note="`auto` and `gloo` send payloads over gloo, through pinned host buffers on a GPU. "
                            "`nccl` needs one GPU per rank and has not yet run on ≥ 2 GPUs.")
    timeout_s: float = key(600.0, "a dead, frozen or stuck (no training progress) worker is named within this many "
                           "real seconds", "(0, inf)")
    precision: str = key("32", "`32`, or `bf16` (autocast on a GPU)", ("32", "bf16"))
    threads: Optional[int] = key(None, "torch intra-op threads per process; `null`: torch's default (a sweep's runs: "
                                 "their share of the CPUs)", "[1, inf)")
    batch_jobs: int = key(1, "G: pending jobs a rank trains together (torch.func); 1 = one at a time, bit for bit",
                          "[1, inf)",
                          note="G > 1 keeps the schedule identical but changes the trained bits by floating-point "
                               "rounding, so such a run is another sample of the same experiment, not a replay. "
                               "On a CPU G > 1 is slower; out of GPU memory a group is retrained in halves.")
    deterministic: bool = key(False, "on a GPU, the same command gives the same bytes: deterministic cuDNN/cuBLAS "
                              "algorithms (`torch.use_deterministic_algorithms`)",
                              note="A CPU run is reproducible without it. On a GPU it costs some speed "
                                   "(docs/performance.md); a model with an op that has no deterministic implementation "
                                   "stops before training, naming the op. Left out of config.yaml when false.")
    cuda_graphs: bool = key(True, "on a GPU, each job's optimiser step replays a CUDA graph, and G = `batch_jobs` jobs "
                            "train at once on their own streams",
                            note="The same bits as eager steps (so G changes no result with `deterministic`); a model "
                                 "that cannot be captured trains eagerly, with one line. No effect on a CPU. Left out "
                                 "of config.yaml when true.")
    placement: str = key("balanced", "which worker trains a job under torchrun: `balanced` or `device`",
                         ("balanced", "device"),
                         note="`balanced`: the worker with the least queued work (every worker holds the training "
                              "set). `device`: device k on worker 1 + k mod (W−1), so a worker holds only its "
                              "devices' rows.")

    def __post_init__(self) -> None:
        check_fields(self, "runtime")


@dataclass(kw_only=True)
class WandbConfig:
    enabled: bool = key(False, "log to Weights & Biases (from rank 0 only)")
    mode: str = key("offline", "`online`, `offline` (sync later: the run dir's `wandb_sync.txt`) or `disabled`",
                    ("online", "offline", "disabled"))
    project: str = key("seafl", "W&B project")
    entity: Optional[str] = key(None, "W&B entity (user or team); `null`: your default")
    group: Optional[str] = key(None, "W&B group; `null`: none (a sweep's runs: the sweep's name)")
    tags: list = key([], "W&B tags", list_of(Text()))
    job_type: Optional[str] = key(None, "W&B job type; `null`: `seafl-run` (a sweep's runs: their grid point's label, "
                                  "e.g. `SEAFL, K = 10`, so W&B can show a mean and band per point)")

    def __post_init__(self) -> None:
        check_fields(self, "logging.wandb")


@dataclass(kw_only=True)
class LoggingConfig:
    wandb: WandbConfig = section(WandbConfig, "Weights & Biases tracking")
    progress: str = key("auto", "`auto` (a bar on a terminal, lines otherwise), `bar`, `lines` or `none`",
                        ("auto", "bar", "lines", "none"))
    progress_every_s: float = key(10.0, "real seconds between plain progress lines", "[0, inf)")

    def __post_init__(self) -> None:
        check_fields(self, "logging")
