"""The metric a run's targets follow: ``run.target_metric`` in the direction ``run.target_mode``.

    m = Metric.of(cfg.run)               # or Metric.of_tree(config_tree) for a run dir's config.yaml
    m.reached(row[m.name], 0.9)          # max: value >= target; min: value <= target
    m.best(values)                       # the best of them (None and NaN left out)

By default the built-in evaluation's test accuracy, rising (``accuracy``, ``max``); a module
evaluated by its own ``test_step`` names what it logs there (``test_loss``, falling: ``min``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

BUILT_IN = ("accuracy", "loss")  # what the built-in evaluation gives


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


@dataclass(frozen=True)
class Metric:
    name: str = "accuracy"
    mode: str = "max"

    @classmethod
    def of(cls, run_config) -> "Metric":
        return cls(run_config.target_metric, run_config.target_mode)

    @classmethod
    def of_tree(cls, tree: dict | None) -> "Metric":
        """From a config.yaml's tree (the keys are left out at their defaults)."""
        run = (tree or {}).get("run") or {}
        return cls(run.get("target_metric", "accuracy"), run.get("target_mode", "max"))

    def reached(self, value, target: float) -> bool:
        if not _number(value):
            return False
        return value >= target if self.mode == "max" else value <= target

    def best(self, values):
        found = [v for v in values if _number(v)]
        if not found:
            return None
        return max(found) if self.mode == "max" else min(found)

    @property
    def label(self) -> str:
        """How a reader names it: ``test accuracy``, ``test loss``, or the logged name."""
        return f"test {self.name}" if self.name in BUILT_IN else self.name

    @property
    def direction(self) -> str:
        return "higher is better" if self.mode == "max" else "lower is better"

    @property
    def is_accuracy(self) -> bool:
        return self.name == "accuracy" and self.mode == "max"

    def target_text(self, target: float) -> str:
        """A target as the tables and lines say it: ``90%`` of accuracy, else the number itself."""
        return f"{float(target):.0%}" if self.is_accuracy else f"{'≥' if self.mode == 'max' else '≤'}{float(target):g}"
