"""What the server computes on its own data, the server-held set (``algorithm.defense.server_samples``,
data/server_set.py), for the defenses that read it (seafl_dist/defenses/; docs/robustness.md, "The server-held set").

This module owns the server's own training on rank 0: FLTrust's server update g_0 = w′ − w_t, where w′ is the
current model w_t trained on the whole server-held set exactly as a device trains a job (``train.epochs`` epochs,
``train.batch_size``, the optimiser, loop, clipping and proximal term of ``train``, the data augmentation of
``data.augment``), its data order from the named stream ``("server_train", t)`` and its random layers from
``("server_torch", t)``, both keyed by ``run.seed`` and the version t it starts from. So g_0 is a function of
(config, w_t): identical on one process and on W ranks (rank 0 holds the set), and recomputed to the same bits after
a resume; it keeps no state.

And Zeno++'s v = ∇ℓ(w_t), the gradient of the loss on the whole server-held set at w_t over the trainable
parameters (0 elsewhere): the model's own ``training_step`` loss (cross-entropy for the built-in models) on
consecutive batches of ``train.batch_size`` rows in the set's order, the model in training mode (batch norm on each
batch's statistics), weighted by each batch's share of the rows, so the mean loss over the set. It draws nothing at
random and is a function of (config, w_t); Zeno++ caches it between refreshes (the defense's state). Neither stream is a device's, so the devices' jobs train to the bits they had without
a server-held set (the set itself changes the shards: it is carved before the partition).
"""
from __future__ import annotations

import torch

from seafl_dist.sim import stream_seed
from seafl_dist.train import load_flat, train_job
from seafl_dist.train.loop import step_output


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

    def gradient(self, version: int, global_flat: torch.Tensor) -> torch.Tensor:
        """Zeno++'s v at w_t = ``global_flat`` (module doc): w_t's length, dtype and device, 0 but for the trainable
        parameters. ``version`` is the t it is taken at (nothing here is drawn from it)."""
        module, device, n = self._module(), self.exp.device, len(self.data)
        data, size = self.data.to(device), self.exp.cfg.train.batch_size
        module.to(device)
        load_flat(module, global_flat.to(device))
        module.train()
        module.zero_grad(set_to_none=True)
        with torch.random.fork_rng(devices=[]):  # a random layer's draws move no generator of the run
            torch.manual_seed(stream_seed(self.exp.cfg.run.seed, "server_grad", version))
            for lo in range(0, n, size):
                idx = torch.arange(lo, min(lo + size, n), dtype=torch.long)
                loss, _ = step_output(module.training_step(data.batch(idx, device=device), 0))
                (loss * (len(idx) / n)).backward()
        params = dict(module.named_parameters())
        pieces = [params[k].grad.detach().flatten() if k in params and params[k].grad is not None
                  else torch.zeros(t.numel(), dtype=torch.float32, device=device)
                  for k, t in module.state_dict().items()]
        module.zero_grad(set_to_none=True)
        return torch.cat([p.to(torch.float32) for p in pieces]).to(global_flat.device, global_flat.dtype)
