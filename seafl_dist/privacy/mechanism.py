"""The mechanism of one run: what the server loop calls at one place (runtime/server.py ``_aggregate``) in place
of algo's ``aggregate``, and the ledger that ε is accounted from.

:func:`mechanism_of` gives :class:`NoPrivacy` with ``privacy.enabled: false`` (the rule itself: nothing is
clipped, drawn, counted or reported, and every byte of a run is what it was before this room existed) or
:class:`Mechanism`, which, for each aggregation t (stages 3 to 5 of SPEC's "One aggregation, end to end"; stage 1,
decompression, comes before it, stage 6, the server optimizer, after it, as post-processing):

1. clips every update's delta to C (privacy/clip.py; a non-finite update is a zero delta, so |B| is fixed),
2. runs the rule on the clipped buffer,
3. adds N(0, (z·S)² I), S the rule's sensitivity for this buffer (privacy/sensitivity.py), drawn from the run's
   keyed stream (the default: the secret key of privacy/keys.py, which :meth:`Mechanism.open` takes from the run
   dir's server-private part), from ``os.urandom`` (``secure_noise``: each released model first goes to the
   write-ahead record of privacy/released.py, which a resume replays) or from ``run.seed`` (``seeded_noise``,
   studies only), and clamps batch norm's running variance at 0,
4. counts one inclusion m_k for each distinct device of the buffer, and writes into the aggregate event (so into
   events.jsonl and W&B's ``privacy/epsilon``) S, the noise's std, the run's ε so far and the largest m_k,
5. under ``privacy.adaptive_clip`` (privacy/adaptive.py), clips at the run's current C_t instead of
   ``clipping_bound`` (S scales with it), raises the update noise to z_Δ·S, draws the noised count of the updates
   within C_t from the same source under a stream of its own (secure: kept in the write-ahead record too), and moves
   C_t to C_{t+1}; the event records the C_t it clipped at (C_{t+1} is server state, in the checkpoint).

ε is that of the device with the largest m_k (privacy/accountant.py): each inclusion is one Gaussian mechanism
with multiplier z for it, whatever the rule's weights (S covers them). The counts m_k are a function of the
schedule, so a resumed run restores them from its checkpoint and goes on with the same numbers.

What the guarantee covers is the sequence of released global models. Integer counters (batch norm's
``num_batches_tracked``) take no noise, so under DP they are w_t's, never an upload's: a non-finite update, taken
as its base, would otherwise lower the max by an exact amount. With ``privacy.diagnostics: false`` (the default)
nothing computed from an un-noised update is written: each update's entry in the aggregate event keeps only
:data:`PUBLIC_INFO` (and ``weight`` for the rules whose weights are functions of the schedule, not SEAFL's),
a module's logged training values are dropped (:meth:`Mechanism.released_log`), and neither the clip count nor
the zeroed count is reported. docs/privacy.md, "Every output and its status", lists every output.
"""
from __future__ import annotations

import math
import sys
from collections import Counter

import torch

from ..algo import AggregationResult, aggregate
from ..algo.seafl import seafl_on_deltas
from ..sim.rng import stream_seed
from .accountant import calibrate, epsilon
from .adaptive import COUNT_STREAM, AdaptiveClip, noised_count
from .clip import clip_updates
from .keys import fingerprint, key_path, open_key
from .noise import KeyedStream, add_noise, clamp_variance, noise_seed, variance_mask
from .released import ReleaseRecord
from .sensitivity import RULES, seafl_sensitivity, sensitivity

# an update's entry in the aggregate event under DP without diagnostics: the scheduler's fields (device, job,
# n_samples, epochs, base_version) and these of the rule's info, each a function of the schedule (a rejection is a
# broken upload's size or dtype, never a value); ``weight`` too for RULES, whose c_i are the schedule's alone
PUBLIC_INFO = ("device", "job", "staleness", "base_version", "n_samples", "epochs", "rejected", "reason", "gamma", "a")
DIAGNOSTICS_WARNING = ("seafl: warning: privacy.diagnostics is on: this run dir holds values outside the DP guarantee "
                       "(per-update weights and cosines, logged training values, clip counts, update norms, label "
                       "histograms, device evaluation, real time); do not publish it (docs/privacy.md)")
# printed after the announcement: what the guarantee assumes of n_k (docs/privacy.md, "Evaluation and adjacency")
N_K_NOTE = ("seafl: privacy: n_k, each device's sample count, is public by assumption: it sets the device's compute "
            "time on the clock and is written to partition.json; data.samples_per_device gives every device the same "
            "count, so that n_k reveals nothing (docs/privacy.md, \"Evaluation and adjacency\")")
SEEDED_WARNING = ("seafl: warning: privacy.seeded_noise is on: the noise is drawn from run.seed, so anyone holding "
                  "config.yaml can regenerate it and subtract it; the ε reported holds against no reader who has the "
                  "config (for studies only; the default keyed noise holds, docs/privacy.md)")
SEEDED_CAVEAT = "none against a reader of config.yaml: the noise is seeded from run.seed (privacy.seeded_noise)"


class NoPrivacy:
    """``privacy.enabled: false``: the rule itself, and nothing to record, report or checkpoint."""

    active = False

    @staticmethod
    def aggregate(ev: dict, *args):
        return aggregate(*args)

    @staticmethod
    def note(note: str | None) -> str | None:
        return note

    @staticmethod
    def summary() -> dict:
        return {}

    @staticmethod
    def released_log(logged: dict | None) -> dict | None:
        return logged

    @staticmethod
    def state() -> None:
        return None

    @staticmethod
    def open(private, state: dict | None) -> None:
        return None

    @staticmethod
    def checkpointed(version: int) -> None:
        return None

    @staticmethod
    def load(state: dict | None) -> None:
        return None


class Mechanism:
    """Clipping, the rule, noise and the inclusion ledger of a run with ``privacy.enabled: true``."""

    active = True

    def __init__(self, cfg, parts, layout, *, say=True):
        p = self.p = cfg.privacy
        self.seed, self.mask = cfg.run.seed, parts.params | parts.stats
        self.variance = variance_mask(layout.names, [math.prod(s) for s in layout.shapes])
        self.calibrated = p.noise_multiplier is None
        self.z = calibrate(p.epsilon, p.max_participation, p.delta, p.accountant) if self.calibrated else \
            float(p.noise_multiplier)
        self.adaptive = AdaptiveClip(p.adaptive_clip, self.z, cfg.algorithm.buffer_size, p.clipping_bound) \
            if p.adaptive_clip.enabled else None  # C_t and the count (privacy/adaptive.py); refuses a calibrated z
        self.noise_z = self.adaptive.z_update if self.adaptive is not None else self.z  # z_Δ: the total stays z
        self.used = p.clipping_bound  # the C of the last aggregation, as released
        self.inclusions: Counter = Counter()  # device -> m_k, the aggregations that included it
        self.clipped = self.zeroed = 0  # updates scaled down to C, non-finite updates taken as zero deltas
        self.counters = parts.counters
        self.mode = "secure" if p.secure_noise else "seeded" if p.seeded_noise else "keyed"
        self.key: bytes | None = None  # the keyed mode's secret, from open()
        self.record: ReleaseRecord | None = None  # the secure mode's write-ahead record, from open()
        self.say = say
        if say:
            print(self.announcement(), file=sys.stderr)
            print(N_K_NOTE, file=sys.stderr)
            if p.diagnostics:
                print(DIAGNOSTICS_WARNING, file=sys.stderr)
            if self.mode == "seeded":
                print(SEEDED_WARNING, file=sys.stderr)

    def open(self, private, state: dict | None) -> None:
        """Before the first aggregation, with the run dir's server-private folder ``private`` and the checkpoint
        resumed from (None: a fresh start). Keyed: the run's key (privacy/keys.py), given, kept or fresh, and one
        line naming where it came from and its fingerprint. Secure: the write-ahead record, emptied on a fresh start,
        else holding what the run released after its checkpoint (replayed, never drawn again)."""
        if self.mode == "keyed":
            recorded = ((state or {}).get("privacy") or {}).get("key_fingerprint")
            self.key, origin = open_key(private, self.p.key_file, resuming=state is not None, recorded=recorded)
            if self.say:
                print(f"seafl: privacy: noise keyed by {origin} (fingerprint {fingerprint(self.key)}), kept "
                      f"server-private in {key_path(private)}", file=sys.stderr)
        elif self.mode == "secure":  # a restart of the same config kept the record (runtime/rundir.py clear)
            self.record = ReleaseRecord(private)
            if state is not None:
                self.record.prune(state["version"])

    def checkpointed(self, version: int) -> None:
        """A checkpoint at ``version`` is on disk: the write-ahead record no longer needs what came before it."""
        if self.record is not None:
            self.record.prune(version)

    def _source(self, t: int):
        """Where aggregation t's noise comes from: the keyed stream, None (os.urandom) or the seed."""
        if self.mode == "keyed":
            if self.key is None:
                raise RuntimeError("Mechanism.open() must give the run's noise key before the first aggregation")
            return KeyedStream(self.key, t)
        return None if self.mode == "secure" else noise_seed(self.seed, t)

    def _count_draw(self, t: int):
        """Aggregation t's noised count (adaptive clipping): the mode's source under the stream COUNT_STREAM, so
        never a draw of the update noise; secure, from os.urandom and into the write-ahead record before anything
        derived from it is released (a resume replays it)."""
        def draw(count: int, std: float) -> float:
            if self.mode == "keyed":
                return noised_count(count, std, KeyedStream(self.key, t, COUNT_STREAM))
            if self.mode == "seeded":
                return noised_count(count, std, stream_seed(self.seed, COUNT_STREAM, t))
            value = self.record.get_count(t)
            if value is None:
                value = noised_count(count, std, None)
                self.record.write_count(t, value)
            return value
        return draw

    @property
    def bound(self) -> float:
        """The clipping bound of the next aggregation: C_t under adaptive clipping, else ``clipping_bound``."""
        return self.adaptive.bound if self.adaptive is not None else self.p.clipping_bound

    def announcement(self) -> str:
        """The run's first line on privacy: z (and where it came from), C, δ, the cap and what it bounds ε by."""
        p = self.p
        z = f"z {self.z:.6g}" + (f" (calibrated to ε {p.epsilon:g})" if self.calibrated else "") + \
            {"secure": ", noise from os.urandom", "seeded": ", noise seeded from run.seed", "keyed": ""}[self.mode]
        if p.max_participation is None:
            bound = "no cap: ε grows with the most-included device's m, reported as the run goes"
        else:
            bound = (f"m <= {p.max_participation} per device, so ε <= "
                     f"{epsilon(self.z, p.max_participation, p.delta, p.accountant):.4g}")
        c = f"C {p.clipping_bound:g}"
        if self.adaptive is not None:
            a = self.adaptive
            c += (f" adaptive (γ {a.target:g}, η_C {a.lr:g}, σ_b {a.count_std:g}; update noise z_Δ "
                  f"{a.z_update:.6g}, total z)")
        return f"seafl: privacy: {z}, {c}, δ {p.delta:g}, {p.accountant}; {bound}"

    # ---- one aggregation --------------------------------------------------------------------
    def aggregate(self, ev: dict, alg, version, global_flat, updates, base_model, parts=None, history=None,
                  memory=None) -> AggregationResult:
        """Stages 3-5 for the buffer of aggregate event ``ev`` (t = ``version`` + 1); ``ev`` gets a ``privacy``
        entry. The arguments after ``ev`` are algo's ``aggregate``'s."""
        bound = self.bound
        clipped, norms = clip_updates(updates, base_model, parts, bound)
        result = aggregate(alg, version, global_flat, clipped, base_model, parts, history, memory)
        if alg.rule == "seafl" and self.p.seafl_form == "delta":  # Eq. 7 on the deltas (docs/privacy.md, "SEAFL")
            result = seafl_on_deltas(alg, global_flat, clipped, result, base_model, parts)
        kept = [(u, info) for u, info in zip(updates, result.info) if not info["rejected"]]  # a broken upload only
        s = self._sensitivity(alg, [u for u, _ in kept], [info["staleness"] for _, info in kept], base_model, bound)
        std = self.noise_z * s
        counters = self.counters.to(global_flat.device)
        result.new_global[counters] = global_flat[counters]  # w_t's: no upload's (a zeroed update's would tell)
        t = version + 1
        new = self.record.get(t, result.new_global) if self.record is not None else None  # released: replayed
        if new is None:
            new = clamp_variance(add_noise(result.new_global, std, self.mask, self._source(t)), self.variance)
            if self.record is not None:  # on disk for good before anything derived from it is released
                self.record.write(t, new)
        self.inclusions.update({u.device for u, _ in kept})
        clipped_here = sum(1 for n in norms if n is not None and n > bound)
        self.clipped += clipped_here
        self.zeroed += sum(1 for n in norms if n is not None and math.isnan(n))
        ev["privacy"] = {"sensitivity": s, "noise_std": std, **self._spent(),
                         **({"clipped": clipped_here} if self.p.diagnostics else {})}
        if self.adaptive is not None:  # C_{t+1} from the noised count; the event holds the C_t it clipped at
            fraction = self.adaptive.step(norms, [u.device for u, _ in kept], self._count_draw(t))
            self.used = bound
            ev["privacy"]["clipping_bound"] = bound
            if self.p.diagnostics:
                ev["privacy"]["unclipped_fraction"] = fraction
        return AggregationResult(new, self._released(alg, result.info), result.norms)

    def _released(self, alg, info: list[dict]) -> list[dict]:
        """The rule's info as the aggregate event may hold it: all of it with diagnostics, else PUBLIC_INFO's keys
        (and ``weight`` for a rule whose weights the schedule alone gives)."""
        if self.p.diagnostics:
            return info
        keep = PUBLIC_INFO + (("weight",) if alg.rule in RULES else ())
        return [{k: v for k, v in entry.items() if k in keep} for entry in info]

    def released_log(self, logged: dict | None) -> dict | None:
        """A job's logged training values as the trace may hold them: none without diagnostics (they are its
        un-noised loss and the like)."""
        return logged if self.p.diagnostics else None

    def _sensitivity(self, alg, kept, staleness, base_model, bound: float) -> float:
        """S for the buffer's kept updates clipped at ``bound``: privacy/sensitivity.py's, per rule (SEAFL's per
        ``seafl_form``)."""
        devices, n = [u.device for u in kept], [u.n_samples for u in kept]
        if alg.rule != "seafl":
            return sensitivity(alg, bound, devices, staleness, n)
        distances: dict = {}

        def base_distance(i: int, j: int) -> float:  # ‖w_{t_i} − w_{t_j}‖ over what clipping covers, float64
            a, b = sorted((kept[i].base_version, kept[j].base_version))
            if (a, b) not in distances:
                m = self.mask.to(base_model(a).device)
                distances[(a, b)] = 0.0 if a == b else float(torch.linalg.vector_norm(
                    base_model(a)[m].to(torch.float64) - base_model(b)[m].to(torch.float64)))
            return distances[(a, b)]
        return seafl_sensitivity(alg, bound, devices, staleness, n, self.p.seafl_form, base_distance)

    def _spent(self) -> dict:
        m = max(self.inclusions.values(), default=0)
        return {"epsilon": epsilon(self.z, m, self.p.delta, self.p.accountant), "max_inclusions": m}

    # ---- reporting and checkpoints ----------------------------------------------------------
    def note(self, note: str | None) -> str:
        """The progress line's note: ``note`` (device evaluation's, if any), then ε so far."""
        spent = self._spent()
        mine = f"ε {spent['epsilon']:.3g} (m {spent['max_inclusions']}" + \
            ("; seeded noise: none against config.yaml's readers)" if self.mode == "seeded" else ")")
        return f"{note} · {mine}" if note else mine

    def summary(self) -> dict:
        """summary.json's ``privacy``: ε at δ (the largest over devices), z, C, the cap and the largest m_k."""
        p = self.p
        return {"privacy": {**self._spent(), "delta": p.delta, "noise_multiplier": self.z,
                            "clipping_bound": p.clipping_bound, "accountant": p.accountant,
                            "max_participation": p.max_participation, "target_epsilon": p.epsilon,
                            "devices_included": len(self.inclusions),
                            "noise": self.mode,
                            **({"key_fingerprint": fingerprint(self.key)} if self.key is not None else {}),
                            **({"guarantee": SEEDED_CAVEAT} if self.mode == "seeded" else {}),
                            **({"updates_clipped": self.clipped, "updates_zeroed": self.zeroed}
                               if p.diagnostics else {}),
                            **({"adaptive_clip": self._adaptive_summary()} if self.adaptive is not None else {})}}

    def _adaptive_summary(self) -> dict:
        """summary.json's ``privacy.adaptive_clip``: γ, η_C, σ_b, z_Δ and the C of the last aggregation (C_{t+1},
        drawn from its count, is not released: a run that ends there has not used it)."""
        a = self.adaptive
        return {"target_quantile": a.target, "lr": a.lr, "count_std": a.count_std, "update_multiplier": a.z_update,
                "last_clipping_bound": self.used}

    def state(self) -> dict:
        return {"inclusions": dict(self.inclusions), "clipped": self.clipped, "zeroed": self.zeroed,
                **({"key_fingerprint": fingerprint(self.key)} if self.key is not None else {}),
                **({"adaptive_clip": {**self.adaptive.state(), "used": self.used}} if self.adaptive is not None else {})}

    def load(self, state: dict | None) -> None:
        if state is None:
            raise ValueError("the checkpoint has no privacy ledger, and this run has privacy.enabled: true")
        self.inclusions = Counter({int(k): int(v) for k, v in state["inclusions"].items()})
        self.clipped, self.zeroed = int(state["clipped"]), int(state["zeroed"])
        if self.adaptive is not None:
            self.adaptive.load(state["adaptive_clip"])
            self.used = float(state["adaptive_clip"]["used"])


def mechanism_of(exp, layout) -> NoPrivacy | Mechanism:
    """What a run's server aggregates with: :class:`Mechanism` under ``privacy.enabled``, else :class:`NoPrivacy`."""
    return Mechanism(exp.cfg, exp.flat_parts(), layout) if exp.cfg.privacy.enabled else NoPrivacy()
