"""What training produced in a run dir, and "trained alike" within tolerances: for runs whose
bits may differ by fp32 rounding (runtime.batch_jobs > 1, GPU kernels), so tests compare the
models, evaluations and aggregation weights that training made, not the schedule (which is
computed from the config before anything trains and cannot differ)."""
import json
from pathlib import Path

import torch


def events(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]


def final_model(run_dir) -> torch.Tensor:
    """model.pt's state_dict as one float32 vector."""
    return torch.cat([t.float().reshape(-1) for t in torch.load(Path(run_dir) / "model.pt", weights_only=True).values()])


def assert_trained_alike(ref_dir, got_dir, *, accuracy: float, model: float, weight: float, evaluations: int,
                         learned: float) -> None:
    """The same number of evaluations, each accuracy and loss within ``accuracy`` of the reference's,
    every aggregation weight within ``weight``, the final model within relative L2 ``model``; and
    the reference learned (final accuracy above ``learned``), so agreeing means something."""
    ref, got = events(ref_dir), events(got_dir)
    evals = [(r, g) for r, g in zip(ref, got) if r["event"] == g["event"] == "eval"]
    assert len(evals) == evaluations and evals[-1][0]["accuracy"] > learned, evals[-1]
    for r, g in evals:
        assert abs(r["accuracy"] - g["accuracy"]) <= accuracy and abs(r["loss"] - g["loss"]) <= accuracy, (r, g)
    weights = [(u["weight"], v["weight"]) for r, g in zip(ref, got) if r["event"] == g["event"] == "aggregate"
               for u, v in zip(r["updates"], g["updates"])]
    assert weights and max(abs(a - b) for a, b in weights) <= weight
    apart = model_distance(ref_dir, got_dir)
    assert apart <= model, f"final models {apart:.2e} apart (relative L2), more than {model}"


def model_distance(ref_dir, got_dir) -> float:
    """Relative L2 distance of the final models."""
    m_ref, m_got = final_model(ref_dir), final_model(got_dir)
    return float((m_got - m_ref).norm() / m_ref.norm())
