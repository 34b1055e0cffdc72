"""What the server computes on its own data, the server-held set (``algorithm.defense.server_samples``,
data/server_set.py), for the defenses that read it (seafl_dist/defenses/; docs/robustness.md, "The server-held set").

This module owns the server's own training on rank 0: FLTrust's server update g_0 = w′ − w_t, where w′ is the
current model w_t trained on the whole server-held set exactly as a device trains a job (``train.epochs`` epochs,
``train.batch_size``, the optimiser, loop, clipping and proximal term of ``train``, the data augmentation of
``data.augment``), its data order from the named stream ``("server_train", t)`` and its random layers from
``("server_torch", t)``, both keyed by ``run.seed`` and the version t it starts from. So g_0 is a function of
(config, w_t): identical on one process and on W ranks (rank 0 holds the set), and recomputed to the same bits after
a resume; it keeps no state. Neither stream is a device's, so the devices' jobs train to the bits they had without
a server-held set (the set itself changes the shards: it is carved before the partition).
"""
from __future__ import annotations

import torch

from seafl_dist.sim import stream_seed
from seafl_dist.train import train_job


class ServerData:
    """The server-held set of ``exp`` (an Experiment) and the model the server trains on it."""

    def __init__(self, exp):
        self.exp, self.data = exp, exp.server_held
        self._model = None

    def _module(self):
        if self._model is None:
            self._model = self.exp.new_model(lightning=self.exp.cfg.train.loop == "lightning")
        return self._model

    @torch.no_grad()
    def update(self, version: int, global_flat: torch.Tensor) -> torch.Tensor:
        """g_0 = w′ − w_t (w_t's dtype and device, every entry; the defense masks what it reads), w′ the server's
        job from w_t = ``global_flat`` at version t = ``version`` (module doc)."""
        cfg, t = self.exp.cfg, self.exp.cfg.train
        device = self.exp.device
        with torch.enable_grad():
            trained = train_job(self._module(), global_flat, self.data.to(device),
                                torch.arange(len(self.data), dtype=torch.long), epochs=t.epochs,
                                batch_size=t.batch_size, seed=stream_seed(cfg.run.seed, "server_train", version),
                                torch_seed=stream_seed(cfg.run.seed, "server_torch", version),
                                augment=cfg.data.augment, device=device, precision=cfg.runtime.precision,
                                result_device=global_flat.device, loop=t.loop,
                                clip=(t.grad_clip_val, t.grad_clip_algorithm), prox_mu=t.prox_mu)
        return trained.to(global_flat.dtype) - global_flat
