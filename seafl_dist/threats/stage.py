"""What the runtime calls, at one place each (docs/robustness.md):

    threats = Threats(cfg, num_devices, params_mask)
    flat = threats.upload(flat, start, device, job)      # GroupTrainer.train: a local attack, before encoding
    updates = threats.landed(event, updates, base_model)  # the server, after stage 1: marks, and omniscient attacks
    train = threats.poison(train, shards)                  # setup, on the training set: the data attacks
    row.update(threats.scores(evaluate, model, flat, test, **kw))  # each evaluation: the backdoor's success rate
    summary.update(threats.summary(rows))                  # summary.json: the malicious devices, the attack

With no malicious device each returns its input, and nothing is marked.
"""
from __future__ import annotations

import dataclasses

import torch

from seafl_dist.settings.threats import LOCAL_ATTACKS
from seafl_dist.threats.data import poisoned, triggered_test
from seafl_dist.threats.local import attacked_upload
from seafl_dist.threats.omniscient import crafted_delta
from seafl_dist.threats.select import malicious_devices


class Threats:
    """The run's malicious devices (``malicious``, ascending) and their attack (``cfg``: the whole Config)."""

    def __init__(self, cfg, num_devices: int, params=None):
        """``params``: the trainable parameters' mask over a flat model, or a callable giving the model's
        FlatParts (called once, when first needed); None: every entry."""
        self.cfg, self.run_seed, self.params = cfg.threats, cfg.run.seed, params
        self.malicious = malicious_devices(cfg.threats, num_devices, cfg.run.seed) if cfg.threats.active else ()
        self._set = frozenset(self.malicious)
        self._triggered = None  # the backdoor's test set, made at the first evaluation

    @property
    def columns(self) -> list[str]:
        """metrics.csv's columns of the attack: ``backdoor_asr`` under a backdoor, else none."""
        return ["backdoor_asr"] if self.malicious and self.cfg.attack == "backdoor" else []

    def scores(self, evaluate, model, flat: torch.Tensor, test, **kw) -> dict:
        """The attack's own metrics of the global model ``flat``: under a backdoor, ``backdoor_asr``, the accuracy
        that ``evaluate(model, flat, data, **kw)`` (the run's evaluation) gives on the triggered test set
        (:func:`~.data.triggered_test`); else {}."""
        if not self.columns:
            return {}
        if self._triggered is None:
            self._triggered = triggered_test(test, self.cfg)
        return {"backdoor_asr": evaluate(model, flat, self._triggered, **kw)[0]}

    def summary(self, rows: list[dict]) -> dict:
        """summary.json's entry ``threats`` (the malicious devices, the attack, fast or not; under a backdoor its
        final and best success rate), or {} without malicious devices, so the file stays what it was."""
        if not self.malicious:
            return {}
        out = {"malicious": list(self.malicious), "attack": self.cfg.attack, "fast": self.cfg.fast}
        if self.columns:
            rates = [r["backdoor_asr"] for r in rows if r.get("backdoor_asr") is not None]
            out.update(final_backdoor_asr=rates[-1] if rates else None, best_backdoor_asr=max(rates, default=None))
        return {"threats": out}

    def is_malicious(self, device: int) -> bool:
        return device in self._set

    def upload(self, flat: torch.Tensor, start: torch.Tensor, device: int, job: int) -> torch.Tensor:
        """A job's trained model, with a malicious device's local attack made on its delta from ``start``."""
        if self.cfg.attack not in LOCAL_ATTACKS or device not in self._set:
            return flat
        return attacked_upload(self.cfg.attack, flat, start, self._mask(flat), self.cfg, self.run_seed, device, job)

    def poison(self, train, shards: list):
        """The training set with the malicious shards attacked (a data attack), else ``train`` itself."""
        return poisoned(train, shards, self.malicious, self.cfg, self.run_seed)

    def landed(self, event: dict, updates: list, base_model) -> list:
        """The buffer as the rule sees it: each malicious update marked in ``event`` (``"malicious": true``), and
        under an omniscient attack its model replaced by its base plus the crafted delta
        (:mod:`.omniscient`). ``updates``: BufferedUpdates in ``event["updates"]``'s order; ``base_model(v)``: w_v."""
        bad = [i for i, u in enumerate(updates) if u.device in self._set]
        for i in bad:
            event["updates"][i]["malicious"] = True
        if not bad or not self.cfg.omniscient:
            return updates
        mask = self._mask(updates[0].flat)
        size = mask.numel()

        def delta(u):
            return u.flat[mask] - base_model(u.base_version)[mask].to(u.flat.dtype)

        usable = [i for i, u in enumerate(updates) if u.flat.numel() == size and bool(torch.isfinite(u.flat).all())]
        honest = [delta(updates[i]) for i in usable if i not in bad]
        own = [delta(updates[i]) for i in bad if i in usable]
        if not own:  # every malicious upload is non-finite or misshapen: the screen rejects them as they are
            return updates
        ref = torch.stack(honest) if honest else own[0].new_zeros((0, own[0].numel()))
        crafted = crafted_delta(self.cfg.attack, ref, torch.stack(own), self.cfg)
        out = list(updates)
        for i in bad:
            u = updates[i]
            if i not in usable:
                continue
            flat = u.flat.clone()
            flat[mask] = base_model(u.base_version)[mask].to(flat.dtype) + crafted.to(flat.dtype)
            out[i] = dataclasses.replace(u, flat=flat)
        return out

    def _mask(self, flat: torch.Tensor) -> torch.Tensor:
        if self.params is None:
            return torch.ones(flat.numel(), dtype=torch.bool, device=flat.device)
        if callable(self.params):
            self.params = self.params().params
        return self.params.to(flat.device)
