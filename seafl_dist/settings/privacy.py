"""The ``privacy`` section: central, user-level differential privacy (seafl_dist/privacy/ clips, adds the noise
and accounts; docs/privacy.md derives each rule's sensitivity and states every assumption).

``enabled: false``, the default, is no mechanism at all: the server never calls seafl_dist/privacy/, and every
byte of a run is what it was before the section existed. Enabled, each update's delta Δ_k = w_k − w_{t_k} is
clipped to L2 norm ``clipping_bound`` (C) over the trainable parameters and batch norm's float statistics (integer
counters exact), the rule runs with |B| fixed, and N(0, (z·S)² I) is added to its result, z = ``noise_multiplier``
and S the rule's sensitivity under replace-one adjacency at the user level (every update of one device replaced).
ε at ``delta`` is a device's composition of its m inclusions, each a Gaussian mechanism with multiplier z
(``dp-accounting``; no amplification by sampling is claimed: a device takes part because it is fast and online,
not because a random sample drew it). The names follow pfl-research's (``clipping_bound``, ``noise_multiplier``,
``epsilon``, ``delta``). The section is left out of config.yaml when every key is at its default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from seafl_dist.settings.domains import check_fields
from seafl_dist.settings.errors import _fail
from seafl_dist.settings.keys import key, section

ACCOUNTANTS = ("pld", "rdp")
DP_RULES = ("fedbuff", "fedasync", "fedavg", "seafl", "seafl2", "fadas", "asyncsgd")  # the rules whose sensitivity docs/privacy.md derives
SEAFL_FORMS = ("delta", "model")


@dataclass(kw_only=True)
class AdaptiveClipConfig:
    """Adaptive clipping (Andrew et al., NeurIPS 2021; seafl_dist/privacy/adaptive.py): C follows a quantile of
    the update norms, from ``privacy.clipping_bound``, with a noised count of the updates within it."""

    enabled: bool = key(False, "adapt the clipping bound C_t after each aggregation to the `target_quantile` of "
                        "the update norms, by the paper's geometric update C ← C·exp(−η_C (b̃ − γ)), b̃ the noised "
                        "fraction of the buffer's updates within C (docs/privacy.md, \"Adaptive clipping\")",
                        note="C starts at `privacy.clipping_bound`. The count's noise is drawn from the run's privacy "
                             "noise source, and the update noise is raised to z_Δ = (z⁻² − σ_b⁻²)^(−½) so that ε is "
                             "that of z (the paper's first accounting). Left out of config.yaml (the whole section) at "
                             "its defaults.")
    target_quantile: float = key(0.5, "γ: the fraction of updates C_t aims to leave unclipped (the paper's 0.5, the "
                                 "median norm)", "(0, 1)")
    lr: float = key(0.2, "η_C: the geometric update's step, C ← C·exp(−η_C (b̃ − γ)) (the paper's 0.2)", "(0, inf)")
    count_std: Optional[float] = key(None, "σ_b: the std of the noise on the count of unclipped updates; `null`: "
                                     "K/20, the paper's m/20 with m the updates per aggregation, here the buffer "
                                     "size K", "(0, inf)", shown="`null` (K/20)",
                                     note="Refused unless σ_b > z, where z_Δ = (z⁻² − σ_b⁻²)^(−½) is real: a device's "
                                          "update moves the count by 1 under replace-one adjacency.")

    def count_std_for(self, buffer_size: int) -> float:
        """σ_b: ``count_std``, or the paper's m/20 with m the updates per aggregation, here the buffer size K."""
        return buffer_size / 20.0 if self.count_std is None else float(self.count_std)

    def __post_init__(self) -> None:
        check_fields(self, "privacy.adaptive_clip")


def check_count_std(z: float, count_std: float, count_sensitivity: float = 1.0) -> None:
    """Refuse in one line a σ_b with no real z_Δ = (z⁻² − (σ_b/Δ_b)⁻²)^(−½) for the multiplier z (z = 0, no noise,
    takes any): σ_b ≤ z·Δ_b, Δ_b the count's sensitivity per update (1 under replace-one adjacency)."""
    if z > 0 and not count_std > z * count_sensitivity:
        _fail("privacy.adaptive_clip.count_std", count_std, f"a number > {z * count_sensitivity:.6g} = z·Δ_b for the "
              f"noise multiplier z {z:.6g} (below it the update noise z_Δ = (z⁻² − σ_b⁻²)^(−½) has no real value): "
              f"raise privacy.adaptive_clip.count_std, or lower z")


@dataclass(kw_only=True)
class PrivacyConfig:
    """User-level DP: clip each update's delta, run the rule with |B| fixed, add Gaussian noise, account ε."""

    enabled: bool = key(False, "central user-level differential privacy: clip every delta to `clipping_bound`, add "
                        "Gaussian noise to the rule's result, account ε at `delta` (docs/privacy.md)",
                        note="For the built-in rules (a rule of your own declares no sensitivity), without "
                             "`algorithm.update_norm_factor` (a rejection that depends on the data would change "
                             "|B|). A non-finite update counts as a zero delta. The noise is drawn from the run's "
                             "secret key (`key_file`, $SEAFL_DP_KEY, or fresh from os.urandom, kept in the run dir's private/); "
                             "`secure_noise` and `seeded_noise` are the other sources. What "
                             "a run writes outside the guarantee is off (`diagnostics`). Left out of config.yaml (the "
                             "whole section) at its defaults.")
    clipping_bound: float = key(1.0, "C: each update's delta Δ_k = w_k − w_{t_k} is scaled to L2 norm at most C, "
                                "over the trainable parameters and batch norm's float statistics", "(0, inf)")
    noise_multiplier: Optional[float] = key(
        None, "z: the noise's standard deviation is z·S, S the rule's sensitivity; `null`: calibrated from "
              "`epsilon`", "[0, inf)",
        note="z = 0 adds no noise: ε is then ∞ (clipping alone is no guarantee). Give `noise_multiplier` or "
             "`epsilon`, not both.")
    epsilon: Optional[float] = key(None, "the target ε: z is calibrated before the first job so that a device "
                                   "included `max_participation` times has ε ≤ this; `null`: give "
                                   "`noise_multiplier`", "(0, inf)")
    delta: float = key(1e-5, "δ: ε is reported (or calibrated) at this δ, e.g. 1/N^1.1 for N devices", "(0, 1)")
    accountant: str = key("pld", "how ε composes over a device's inclusions: `pld` (privacy loss distributions, "
                          "tight) or `rdp` (Rényi DP, an upper bound), both from `dp-accounting`", ACCOUNTANTS)
    seafl_form: str = key("delta", "SEAFL and SEAFL² under DP: `delta` applies Eq. 7 to the deltas on the current "
                          "model (w_t + ϑ Σ p_k Δ_k); `model` is the paper's Eq. 7 (Σ p_k w_k, the bases mixed in), "
                          "whose sensitivity grows with the distance between the bases", SEAFL_FORMS,
                          note="docs/privacy.md, \"SEAFL\", derives both and says how the default was chosen.")
    max_participation: Optional[int] = key(None, "the cap m: a device included this many times retires and is no "
                                           "longer started; `null`: no cap (ε grows as the run goes)", "[1, inf)")
    diagnostics: bool = key(False, "also write what lies outside the guarantee, for debugging: SEAFL's per-update "
                            "cosines and weights, a module's logged training values, the clip counts, update norms on "
                            "stderr, label histograms, device evaluation, real time (and W&B logged live); a warning "
                            "line says so",
                            note="docs/privacy.md, \"Every output and its status\", lists each output. Off: a run "
                                 "writes only what is public, post-processing of the noised models, or server-private "
                                 "(the checkpoints), and `run.device_eval_every` is refused.")
    secure_noise: bool = key(False, "draw every noise vector from the OS's cryptographic source (os.urandom), no key "
                             "kept: no one holding the run dir can regenerate it",
                             note="Two runs of one config then differ in their noise and bytes, and agree on ε and the "
                                  "schedule. Each released model is fsynced to a write-ahead record in the run dir's "
                                  "private/ before anything derived from it is released, and a resume replays it: "
                                  "nothing is released twice. `false`: the keyed stream (the default).")
    seeded_noise: bool = key(False, "draw the noise from `run.seed`'s named stream `privacy` (torch's generator), for "
                             "studies only: anyone holding config.yaml can regenerate it and subtract it",
                             note="A warning line, summary.json's privacy `guarantee`, the progress line and the "
                                  "report say that its ε holds against no reader who has the config.")
    key_file: Optional[str] = key(None, "a file whose bytes (at least 16, whitespace stripped) are the noise key, so "
                                  "that two runs draw the same noise; `null`: $SEAFL_DP_KEY if set, else a fresh key "
                                  "from os.urandom",
                                  note="The key never reaches config.yaml, W&B or a released file; it is kept in the "
                                       "run dir's private/noise.key, and summary.json records its fingerprint. The "
                                       "path may change between a run and its resume, the key may not.")
    adaptive_clip: AdaptiveClipConfig = section(AdaptiveClipConfig, "adaptive clipping: C_t follows a target "
                                                "quantile of the update norms (Andrew et al. 2021)")

    @property
    def withheld(self) -> bool:
        """True when the run writes nothing outside the guarantee: privacy on, diagnostics off."""
        return self.enabled and not self.diagnostics

    def __post_init__(self) -> None:
        check_fields(self, "privacy")
        if not self.enabled:
            if self.adaptive_clip.enabled:
                _fail("privacy.adaptive_clip.enabled", True, "false with privacy.enabled=false (it adapts the "
                      "clipping bound of central DP)")
            return
        if self.noise_multiplier is not None and self.epsilon is not None:
            _fail("privacy.epsilon", self.epsilon, f"null with privacy.noise_multiplier={self.noise_multiplier} "
                  f"(give z, or the target ε to calibrate z from, not both)")
        if self.noise_multiplier is None and self.epsilon is None:
            _fail("privacy.noise_multiplier", None, "a number >= 0, or null with privacy.epsilon set (the target "
                  "ε that z is calibrated from)")
        if self.secure_noise and self.seeded_noise:
            _fail("privacy.seeded_noise", True, "false with privacy.secure_noise=true (one source of noise: "
                  "os.urandom, run.seed, or the default secret key)")
        if self.key_file is not None and (self.secure_noise or self.seeded_noise):
            mode = "secure_noise" if self.secure_noise else "seeded_noise"
            _fail("privacy.key_file", self.key_file, f"null with privacy.{mode}=true (a key feeds the default keyed "
                  f"noise only)")
        if self.epsilon is not None and self.max_participation is None:
            _fail("privacy.epsilon", self.epsilon, "null without privacy.max_participation (ε is known before "
                  "training only when every device's inclusions are capped)")

    def check_with(self, alg, run) -> None:
        """What DP asks of the rule: a derived sensitivity, no rejection that depends on the data, and a server
        optimizer that reads only the released (noised) model; and of the run: no output outside the guarantee
        unless ``diagnostics`` asks for it."""
        if not self.enabled:
            return
        if self.adaptive_clip.enabled and self.noise_multiplier is not None:  # a calibrated z: privacy/mechanism.py
            check_count_std(self.noise_multiplier, self.adaptive_clip.count_std_for(alg.buffer_size))
        if run.device_eval_every is not None and not self.diagnostics:
            _fail("run.device_eval_every", run.device_eval_every, "null with privacy.enabled=true, or "
                  "privacy.diagnostics=true (device evaluation scores the released model on devices' own held-out "
                  "data without noise: outside the guarantee)")
        if alg.rule == "seafl" and self.seafl_form == "model" and alg.alpha == 0:
            _fail("algorithm.alpha", 0, "> 0 with privacy.seafl_form=model, or privacy.seafl_form=delta (with α = 0 "
                  "every weight can be 0, and the paper's Eq. 7 then returns w_t, a jump of ‖w_{t_k} − w_t‖ that the "
                  "model form's sensitivity does not cover)")
        name, update_norm_factor, opt = alg.name, alg.update_norm_factor, alg.server_opt
        if opt.name != "none" and opt.pseudo_gradient == "delta":
            _fail("algorithm.server_opt.pseudo_gradient", "delta", "model with privacy.enabled=true (the delta form "
                  "reads the clipped updates themselves, without the noise; the model form reads w′ + noise only, "
                  "which is post-processing)")
        if update_norm_factor is not None:
            _fail("algorithm.update_norm_factor", update_norm_factor, "null with privacy.enabled=true (the guard "
                  "rejects by the data, which would change |B|; clipping bounds every update instead)")
        if name == "ca2fl":
            _fail("algorithm.name", name, "a rule other than ca2fl with privacy.enabled=true (its cache puts every past "
                  "contributor's latest update into every later aggregation, which neither the inclusion count nor "
                  "privacy.max_participation bounds)")
        if name == "port":
            _fail("algorithm.name", name, "a rule with a derived sensitivity (seafl, seafl2, fedbuff, fedasync, fedavg) "
                  "with privacy.enabled=true: Port's deltas are taken against the current model, w_k − w_t = "
                  "Δ_k + (w_{t_k} − w_t), and its data-dependent weights also scale the server's drift w_{t_k} − w_t, "
                  "which clipping Δ_k to C does not bound (docs/privacy.md, \"Port\")")
        if name == "fedstaleweight":
            _fail("algorithm.name", name, "a rule with a derived sensitivity (seafl, seafl2, fedbuff, fedasync, fedavg) "
                  "with privacy.enabled=true: FedStaleWeight's weights s̄_i/Σ_B s̄ are set by the schedule, but by "
                  "each device's staleness since the run began (the rule's state), which privacy/sensitivity.py's "
                  "coefficients, computed from the buffer alone, do not read (docs/privacy.md, \"FedStaleWeight\")")
        if name not in DP_RULES:
            _fail("algorithm.name", name, f"a built-in rule ({', '.join(DP_RULES)}) with "
                  "privacy.enabled=true (a rule of your own declares no sensitivity)")
