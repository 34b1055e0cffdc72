"""The attacks a malicious device makes on its own delta Δ = w_k − w_{t_k}, on the device, before its upload is
encoded: it knows its own trained model and the model it started from, nothing else.

- ``sign_flip``: Δ′ = −Δ;
- ``scale``: Δ′ = λ·Δ (``threats.scale``, "boosting");
- ``gaussian``: Δ′ = Δ + σ·ξ, ξ ~ N(0, I) from the job's own stream ("attack", device, job) (``threats.sigma``).

Only the trainable parameters are attacked; batch norm's statistics and the integer counters go as trained.
"""
from __future__ import annotations

import torch

from seafl_dist.sim.rng import stream_seed


def attack_delta(attack: str, delta: torch.Tensor, threats, seed: int | None = None) -> torch.Tensor:
    """Δ′ for ``attack`` (one of settings.threats.LOCAL_ATTACKS) of ``delta``; ``seed``: gaussian's generator seed."""
    if attack == "sign_flip":
        return -delta
    if attack == "scale":
        return delta * threats.scale
    if attack == "gaussian":
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(delta.shape, generator=g, dtype=torch.float32).to(delta.device, delta.dtype)
        return delta + threats.sigma * noise
    raise ValueError(f"not a local attack: {attack!r}")


def attacked_upload(attack: str, flat: torch.Tensor, start: torch.Tensor, params: torch.Tensor, threats,
                    run_seed: int, device: int, job: int) -> torch.Tensor:
    """The trained model ``flat`` with its parameters' delta from ``start`` attacked (``params``: their mask)."""
    out = flat.clone()
    p = params.to(flat.device)
    base = start.to(flat.device, flat.dtype)[p]
    out[p] = base + attack_delta(attack, flat[p] - base, threats, stream_seed(run_seed, "attack", device, job))
    return out
