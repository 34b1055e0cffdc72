"""A job of the server loop: one device training from one global version (sim/scheduler.py makes
them, sim/churn.py too; here so that neither imports the other back)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

# plan(device, device_job_index, start_time) -> absolute epoch ends [b_1..b_E]
PlanFn = Callable[[int, int, float], list]


@dataclass
class Job:
    job: int
    device: int
    version: int  # t_k, the global version the job started from
    start: float
    epoch_ends: list
    upload_s: float
    finish: float = 0.0
    epochs: int = 0
    notified: bool = False
    download_s: float = 0.0  # recorded on churn-mode start events
    drop_at: float = math.inf  # churn mode: the job drops here if that is before its finish
    drop_cause: str = ""  # "offline" (its window closed) or "dropout"
    steps: int = 0  # FedCompass (sim/compass.py): the local steps assigned; 0: an epoch-counted job

    def __post_init__(self) -> None:
        self.epochs = len(self.epoch_ends)
        self.finish = self.epoch_ends[-1] + self.upload_s

    def notify(self, tau: float) -> None:
        """SEAFL² (SPEC step 4): upload at the end of the epoch in progress at time tau."""
        self.notified = True
        for e, b in enumerate(self.epoch_ends, start=1):
            if tau < b:
                self.epochs = e
                self.finish = b + self.upload_s
                return

    @property
    def drops(self) -> bool:
        """Churn mode: the job is dropped (its upload does not land by ``drop_at``; landing at it counts)."""
        return self.drop_at < self.finish

    @property
    def ends_at(self) -> float:
        return self.drop_at if self.drops else self.finish
