"""User-level differential privacy (``privacy.*``; docs/privacy.md): stages 3 to 5 of SPEC's "One aggregation, end
to end", the participation ledger and the accountant.

This room owns what the mechanism does to a buffer and what it costs in ε, and nothing else: clipping each
update's delta to the bound C (:func:`clip_updates`, stage 3), the rule's sensitivity S under replace-one
user-level adjacency with |B| fixed (:func:`sensitivity`, derived per rule in docs/privacy.md), the Gaussian noise
N(0, (z·S)² I) from a stream keyed by the run's secret key (:func:`add_noise`, stage 5; the key: keys.py; secure
noise's write-ahead record, which a resume replays: released.py), batch norm's running variance
kept non-negative after it (:func:`clamp_variance`), ε at δ for a device included m times (:func:`epsilon`) and z
calibrated from a target ε (:func:`calibrate`), both by ``dp-accounting``, imported only when asked for. These are
pure functions, like the rules in algo/ and the codecs. ``mechanism.py`` puts them together for a run: the object
the server loop calls at one place in place of the rule, holding each device's inclusion count m_k (checkpointed)
and what the run reports. With ``privacy.enabled: false`` the server gets :class:`~.mechanism.NoPrivacy`, the rule
itself, and nothing else here is called. The participation cap lives in the scheduler (sim/scheduler.py), which
must stay free of anything but the schedule.

    clipped, norms = clip_updates(updates, base_model, parts, cfg.privacy.clipping_bound)
    result = rule(cfg.algorithm, t, w_t, clipped, base_model, parts)        # |B| fixed: nothing is rejected
    S = sensitivity(cfg.algorithm, C, devices, staleness, n_samples)
    w = add_noise(result.new_global, z * S, parts.params | parts.stats, KeyedStream(key, t + 1))
"""
from seafl_dist.privacy.accountant import calibrate, epsilon, run_epsilon  # noqa: F401
from seafl_dist.privacy.clip import clip_updates  # noqa: F401
from seafl_dist.privacy.mechanism import Mechanism, NoPrivacy, mechanism_of  # noqa: F401
from seafl_dist.privacy.noise import KeyedStream, add_noise, clamp_variance, noise_seed, variance_mask  # noqa: F401
from seafl_dist.privacy.sensitivity import coefficients, sensitivity  # noqa: F401

__all__ = ["KeyedStream", "Mechanism", "NoPrivacy", "add_noise", "calibrate", "clamp_variance", "clip_updates", "coefficients",
           "epsilon", "mechanism_of", "noise_seed", "run_epsilon", "sensitivity", "variance_mask"]
