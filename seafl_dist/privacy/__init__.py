"""User-level differential privacy (``privacy.*``; docs/privacy.md): stages 3 and 5 of SPEC's "One aggregation,
end to end", and the accountant.

This room owns what the mechanism does to a buffer and what it costs in ε, and nothing else: clipping each
update's delta to the bound C (:func:`clip_updates`, stage 3), the rule's sensitivity S under replace-one
user-level adjacency with |B| fixed (:func:`sensitivity`, derived per rule in docs/privacy.md), the Gaussian noise
N(0, (z·S)² I) from the run's named stream ``privacy`` (:func:`add_noise`, stage 5), batch norm's running variance
kept non-negative after it (:func:`clamp_variance`), and ε at δ for a device included m times
(:func:`epsilon`, ``dp-accounting``, imported only when ε is asked for). Pure tensor functions, like the rules in
algo/ and the codecs: no schedule, no transport, no config object beyond the sections handed in. With
``privacy.enabled: false`` nothing here is called.

    clipped, norms = clip_updates(updates, base_model, parts, cfg.privacy.clipping_bound)
    result = rule(cfg.algorithm, t, w_t, clipped, base_model, parts)        # |B| fixed: nothing is rejected
    S = sensitivity(cfg.algorithm, C, devices, staleness, n_samples)
    w = add_noise(result.new_global, z * S, parts.params | parts.stats, noise_seed(cfg.run.seed, t))
"""
from seafl_dist.privacy.accountant import epsilon, run_epsilon  # noqa: F401
from seafl_dist.privacy.clip import clip_updates  # noqa: F401
from seafl_dist.privacy.noise import add_noise, clamp_variance, noise_seed, variance_mask  # noqa: F401
from seafl_dist.privacy.sensitivity import coefficients, sensitivity  # noqa: F401

__all__ = ["add_noise", "clamp_variance", "clip_updates", "coefficients", "epsilon", "noise_seed", "run_epsilon",
           "sensitivity", "variance_mask"]
