"""Tests the independent slip audit (docs/testing.md, "Semantic mutants", issue 67 item 4) found missing in the
defenses: each oracle is written from the paper or docs/robustness.md, never from seafl_dist/defenses/."""
import torch

from seafl_dist.algo import BufferedUpdate, aggregate, memory_of
from seafl_dist.settings import config_from_dict

T = 3


def config(*overrides, k=2):
    return config_from_dict({}, [f"algorithm.buffer_size={k}", "devices.num=200", "devices.concurrency=100",
                                 "algorithm.name=fedbuff",
                                 *overrides])


def update(i, flat, base=T):
    return BufferedUpdate(device=i, job=i, n_samples=1, base_version=base, epochs=1, flat=flat)


def test_the_trimmed_mean_counts_beta_as_written_in_decimal():
    """E1: b = ⌊β n⌋ with β as the user wrote it: ⌊0.29 × 100⌋ = 29, where the float product is 28.999999999999996.
    The values are i² (i = 0..99, one coordinate), so dropping 28 or 29 at each end gives another mean."""
    cfg = config("algorithm.defense.name=trimmed_mean", "algorithm.defense.beta=0.29")
    w_t = torch.zeros(1, dtype=torch.float64)
    updates = [update(i, torch.tensor([float(i * i)], dtype=torch.float64)) for i in range(100)]
    result = aggregate(cfg.algorithm, T, w_t, updates, {T: w_t}.__getitem__, None)
    kept = [i * i for i in range(29, 71)]  # 29 dropped at each end: 42 values
    assert len(kept) == 100 - 2 * 29
    assert result.new_global.tolist() == [sum(kept) / len(kept)]


def test_centered_clippings_earlier_centre_is_not_changed_by_the_next_aggregation():
    """E8: the rule's state is replaced, never mutated (SPEC, "Rule state"): the centre a checkpoint took after the
    first aggregation still holds that aggregation's result after the second. τ = 10 clips nothing here:
    v₁ = mean of the deltas = (1, 2); v₂ = v₁ + mean(Δ − v₁) = (3, 4)."""
    cfg = config("algorithm.defense.name=centered_clipping", "algorithm.defense.tau=10")
    memory = memory_of(cfg.algorithm)
    w_t = torch.zeros(2, dtype=torch.float64)
    first = [update(0, torch.tensor([0.0, 2.0], dtype=torch.float64)),
             update(1, torch.tensor([2.0, 2.0], dtype=torch.float64))]
    aggregate(cfg.algorithm, T, w_t, first, {T: w_t}.__getitem__, None, memory=memory)
    snapshot = memory.state
    assert snapshot["centre"].tolist() == [1.0, 2.0]
    second = [update(2, torch.tensor([3.0, 4.0], dtype=torch.float64)),
              update(3, torch.tensor([3.0, 4.0], dtype=torch.float64))]
    aggregate(cfg.algorithm, T, w_t, second, {T: w_t}.__getitem__, None, memory=memory)
    assert memory.state["centre"].tolist() == [3.0, 4.0]
    assert snapshot["centre"].tolist() == [1.0, 2.0]
