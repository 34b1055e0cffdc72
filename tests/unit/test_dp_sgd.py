"""``train.dp_sgd``: record-level DP-SGD with Opacus (train/dp_sgd.py), against an oracle written here from Abadi et
al. (CCS 2016, Algorithm 1) and Opacus's documented step: per step, a Poisson batch (each of the n shard rows in
with probability q = B/n, one uniform draw each from the job's data-order generator), each sample's gradient by a
loop of one-sample backward passes, clipped by min(1, C / (‖g_i‖ + 1e-6)), summed, N(0, (σC)²) added to every
parameter in order from a generator seeded with the job's noise seed (drawn here independently), divided by
B_exp = min(B, n), then plain SGD (and FedProx's μ(w − w_base) after the noise). Both loops, the empty batch, σ = 0,
the step count an accountant reads, the model refusals and the fix, and the config's refusals.
"""
import sys

import pytest
import torch

from seafl_dist.settings import ConfigError, config_from_dict
from seafl_dist.train import flatten, load_flat, train_job
from seafl_dist.train.dp_sgd import DPSteps, blocker, fix_model, job_steps, require_opacus
from seafl_dist.train.optim_config import ModuleContractError
from seafl_dist.settings.dp_sgd import DPSGDConfig
from tiny_data import Rows

LR, C, SIGMA = 0.1, 0.5, 0.7


class Tiny(torch.nn.Module):
    """Two linear layers (3 → 4 → 2), a ReLU in place between them (DP-SGD turns it off for the job)."""

    def __init__(self):
        super().__init__()
        self.a, self.act, self.b = torch.nn.Linear(3, 4), torch.nn.ReLU(inplace=True), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.b(self.act(self.a(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


def tiny_lightning():
    import lightning as L

    class TinyL(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Tiny()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.log("train_loss", loss, batch_size=len(y))
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)
    return TinyL()


def dp(sigma=SIGMA, clip=C, mode="hooks"):
    return DPSGDConfig(enabled=True, clip=clip, noise_multiplier=sigma, grad_sample_mode=mode)


def oracle(net, start, data, idx, *, epochs, batch_size, seed, dp_seed, sigma=SIGMA, clip=C, mu=0.0):
    """DP-SGD by hand (module doc). Steps per epoch: ceil(n / B), less a trailing one-sample batch (the plain plan's)."""
    load_flat(net, start)
    params = [p for p in net.parameters() if p.requires_grad]
    base = [p.detach().clone() for p in params]
    n = len(idx)
    q = min(1.0, batch_size / n)
    per_epoch = -(-n // batch_size) - (1 if n % batch_size == 1 and n > 1 and batch_size > 1 else 0)
    order = torch.Generator().manual_seed(seed)
    noise = torch.Generator().manual_seed(dp_seed)
    for _ in range(epochs * per_epoch):
        rows = idx[torch.rand(n, generator=order) < q]
        summed = [torch.zeros_like(p) for p in params]
        for r in rows:
            x, y = data.batch(r.reshape(1))
            grads = torch.autograd.grad(torch.nn.functional.cross_entropy(net(x), y), params)
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).float()
            factor = min(1.0, clip / (float(norm) + 1e-6))
            summed = [s + g * factor for s, g in zip(summed, grads)]
        with torch.no_grad():
            for p, s, w0 in zip(params, summed, base):
                z = torch.normal(0.0, sigma * clip, size=p.shape, generator=noise) if sigma else 0.0
                g = (s + z) / min(batch_size, n) + mu * (p - w0)
                p -= LR * g
    return flatten(net)


def job(module, *, loop="plain", sigma=SIGMA, mode="hooks", epochs=2, batch_size=4, seed=3, dp_seed=11,
        prox_mu=0.0, start=None, data=None):
    data = data or Rows()
    torch.manual_seed(5)
    start = flatten(Tiny()) if start is None else start
    return start, train_job(module, start, data, torch.arange(12), epochs=epochs, batch_size=batch_size, seed=seed,
                            loop=loop, prox_mu=prox_mu, dp_sgd=dp(sigma, mode=mode), dp_seed=dp_seed)


def test_a_plain_loop_job_is_the_per_sample_loop_clipped_and_noised_from_its_own_stream():
    start, got = job(Tiny())
    want = oracle(Tiny(), start, Rows(), torch.arange(12), epochs=2, batch_size=4, seed=3, dp_seed=11)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
    assert not torch.equal(got, start)
    _, again = job(Tiny())
    assert torch.equal(got, again)  # the same job, the same bits
    _, other = job(Tiny(), dp_seed=12)
    assert (other - want).abs().max() > 1e-3  # the noise is the stream's: another seed, other noise


def test_the_proximal_term_is_added_after_the_noise():
    start, got = job(Tiny(), prox_mu=0.3)
    want = oracle(Tiny(), start, Rows(), torch.arange(12), epochs=2, batch_size=4, seed=3, dp_seed=11, mu=0.3)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)


def test_functorch_mode_gives_the_oracle_too():
    start, got = job(Tiny(), mode="functorch")
    want = oracle(Tiny(), start, Rows(), torch.arange(12), epochs=2, batch_size=4, seed=3, dp_seed=11)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)


def test_at_sigma_0_the_step_is_clipping_alone():
    start, got = job(Tiny(), sigma=0.0)
    want = oracle(Tiny(), start, Rows(), torch.arange(12), epochs=2, batch_size=4, seed=3, dp_seed=11, sigma=0.0)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)


def test_empty_batches_are_steps_of_noise_only():
    """B = 1 on 12 rows: q = 1/12, so about a third of the 12 steps draw no row; the oracle steps on noise alone there."""
    order = torch.Generator().manual_seed(3)
    empty = sum(int((torch.rand(12, generator=order) < 1 / 12).sum() == 0) for _ in range(12))
    assert empty >= 1  # this seed's plan holds empty batches
    start, got = job(Tiny(), epochs=1, batch_size=1)
    want = oracle(Tiny(), start, Rows(), torch.arange(12), epochs=1, batch_size=1, seed=3, dp_seed=11)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)


def test_a_lightning_trainer_job_is_the_same_oracle_and_a_users_module_in_the_plain_loop_too():
    for loop in ("lightning", "plain"):
        m = tiny_lightning()
        torch.manual_seed(5)
        start = flatten(m)
        _, got = job(m, loop=loop, start=start)
        want = oracle(tiny_lightning(), start, Rows(), torch.arange(12), epochs=2, batch_size=4, seed=3, dp_seed=11)
        torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
        assert not any(hasattr(p, "grad_sample") for p in m.parameters())  # Opacus's attributes taken off
        assert m.net.act.inplace  # and the in-place activation given back


def test_the_steps_an_accountant_reads():
    assert job_steps(12, 4, 2, 0.7) == DPSteps(6, 1 / 3, 0.7)
    assert job_steps(33, 32, 1, 1.0) == DPSteps(1, 32 / 33, 1.0)  # the trailing one-sample batch is no step
    assert job_steps(34, 32, 1, 1.0) == DPSteps(2, 32 / 34, 1.0)
    assert job_steps(10, 32, 3, 1.0) == DPSteps(3, 1.0, 1.0)  # B > n: q = 1
    assert job_steps(12, 4, 5, 1.0, max_steps=7).steps == 7  # a step-counted job (FedCompass)


def test_a_step_without_a_loss_is_skipped_and_releases_nothing():
    class NoLoss(Tiny):
        def training_step(self, batch, batch_idx):
            return None
    torch.manual_seed(5)
    start = flatten(Tiny())
    got = train_job(NoLoss(), start, Rows(), torch.arange(12), epochs=1, batch_size=4, seed=3, dp_sgd=dp(), dp_seed=1)
    assert torch.equal(got, start)


def test_manual_optimization_is_refused_under_the_lightning_loop():
    m = tiny_lightning()
    m.automatic_optimization = False
    with pytest.raises(ModuleContractError, match="manual optimization"):
        job(m, loop="lightning", start=flatten(m))


def test_a_model_opacus_cannot_train_is_refused_naming_the_layer_and_the_fix_replaces_batch_norm():
    from seafl_dist.models import build_model
    net = build_model("resnet18", 10, 3, width=0.125, image_size=32, lightning=False)
    why = blocker(net)
    assert "'stem.1' (BatchNorm2d)" in why
    replaced = fix_model(net)
    assert replaced[0].startswith("stem.1: BatchNorm2d -> GroupNorm(")
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    assert blocker(net) is None
    assert blocker(build_model("lenet5", 10, 1, lightning=False)) is None


def test_a_missing_opacus_is_refused_in_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "opacus", None)
    with pytest.raises(ConfigError, match=r'seafl_dist\[dp\]') as err:
        require_opacus()
    assert "\n" not in str(err.value)


def config(**train):
    return config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"buffer_size": 2},
                             "train": {"dp_sgd": {"enabled": True}, **train}})


def test_the_config_refuses_what_dp_sgd_cannot_compose_with_in_one_line():
    assert config().train.dp_sgd.enabled and config(grad_clip_val=None).train.grad_clip_val is None
    with pytest.raises(ConfigError, match=r"'train.grad_clip_val' has value 1.0; allowed: null with train.dp_sgd"):
        config(grad_clip_val=1.0)
    with pytest.raises(ConfigError, match=r"'train.dp_sgd.enabled' has value True; allowed: false with "
                                          r"algorithm.name=scaffold"):
        config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"name": "scaffold", "buffer_size": 2},
                          "train": {"dp_sgd": {"enabled": True}}})
    for bad in ({"clip": 0.0}, {"noise_multiplier": -0.1}, {"grad_sample_mode": "ew"}):
        with pytest.raises(ConfigError, match="train.dp_sgd."):
            config_from_dict({"train": {"dp_sgd": bad}})
    assert config_from_dict({"train": {"dp_sgd": {"noise_multiplier": 0.0}}}).train.dp_sgd.noise_multiplier == 0.0


def test_target_epsilon_needs_a_null_sigma_and_a_schedule_that_ends():
    def dp_config(dp, run=None):
        return config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"buffer_size": 2},
                                 "run": {"max_aggregations": 6, **(run or {})}, "train": {"dp_sgd": {"enabled": True, **dp}}})
    ok = dp_config({"target_epsilon": 4.0, "noise_multiplier": None})
    assert ok.train.dp_sgd.target_epsilon == 4.0 and ok.train.dp_sgd.noise_multiplier is None
    assert dp_config({"target_epsilon": 4.0, "noise_multiplier": None}, {"max_aggregations": None, "max_time": 500})
    with pytest.raises(ConfigError, match=r"^config key 'train.dp_sgd.noise_multiplier' has value 1.0; allowed: null "
                                          r"with train.dp_sgd.target_epsilon=4 "):
        dp_config({"target_epsilon": 4.0})  # σ at its default 1.0 beside a target: one of them must go
    with pytest.raises(ConfigError, match=r"^config key 'train.dp_sgd.noise_multiplier' has value None; allowed: a "
                                          r"number >= 0 \(σ\), or null with train.dp_sgd.target_epsilon set"):
        dp_config({"noise_multiplier": None})
    with pytest.raises(ConfigError, match=r"^config key 'train.dp_sgd.target_epsilon' has value 4.0; allowed: null "
                                          r"unless run.max_aggregations or run.max_time ends the schedule"):
        dp_config({"target_epsilon": 4.0, "noise_multiplier": None}, {"max_aggregations": None, "max_time": None,
                                                                      "target_accuracy": 0.9})  # it may never end
    assert config_from_dict({"train": {"dp_sgd": {"noise_multiplier": None}}}).train.dp_sgd.noise_multiplier is None


def test_the_fused_and_graphed_paths_say_in_one_line_why_a_dp_job_trains_alone():
    from seafl_dist.runtime.executor import loop_blocker
    why = loop_blocker(config().train)
    assert why.startswith("train.dp_sgd.enabled is true") and "\n" not in why
    assert loop_blocker(config_from_dict({}).train) is None


def test_what_a_module_logs_stays_on_the_device():
    """Its logged values are computed from the records without noise: under DP-SGD the job hands none back."""
    for loop in ("plain", "lightning"):
        m, logged = tiny_lightning(), {}
        train_job(m, flatten(m), Rows(), torch.arange(12), epochs=1, batch_size=4, seed=3, loop=loop, logged=logged,
                  dp_sgd=dp(), dp_seed=1)
        assert logged == {}, loop
        train_job(m, flatten(m), Rows(), torch.arange(12), epochs=1, batch_size=4, seed=3, loop=loop, logged=logged)
        assert "train_loss" in logged  # without DP-SGD the same module's job hands it back



def test_a_jobs_batches_and_noise_are_keyed_by_the_devices_key_its_device_and_job_never_run_seed(tmp_path):
    """Two jobs of one device at the same epochs draw different batches and noise; one job draws the same however many
    epochs a SEAFL² notification leaves it (its seeds name the job, not its length); another run.seed changes
    neither, another key both; the section is the Experiment's (σ as calibrated under target_epsilon)."""
    from types import SimpleNamespace
    from seafl_dist.privacy.device_key import DeviceKey
    from seafl_dist.runtime.executor import JobSpec, dp_sgd_of, job_seeds
    cfg = config()
    calibrated = SimpleNamespace(noise_multiplier=0.7)

    def exp(key_file, c=cfg):
        private = tmp_path / "runs" / key_file.name / str(c.run.seed)
        return SimpleNamespace(cfg=c, dp_sgd=calibrated, dp_key=DeviceKey(private, str(key_file), say=False))

    k1, k2 = tmp_path / "k1", tmp_path / "k2"
    k1.write_text("a" * 32)
    k2.write_text("b" * 32)
    e = exp(k1)
    a, b = (dp_sgd_of(e, JobSpec(job, 0, 0, 2, 1.0)) for job in (1, 2))
    assert a["dp_seed"] != b["dp_seed"] and a["seed"] != b["seed"] and a["dp_sgd"] is calibrated
    assert a["seed"] != a["dp_seed"] and a["seed"] != job_seeds(cfg, JobSpec(1, 0, 0, 2, 1.0))["seed"]
    assert dp_sgd_of(e, JobSpec(1, 0, 0, 1, 1.0)) == a  # notified after one epoch: the same streams
    assert dp_sgd_of(e, JobSpec(1, 3, 0, 2, 1.0))["dp_seed"] != a["dp_seed"]  # another device's job 1
    reseeded = config_from_dict({"devices": {"num": 6, "concurrency": 3}, "algorithm": {"buffer_size": 2},
                                 "run": {"seed": cfg.run.seed + 7}, "train": {"dp_sgd": {"enabled": True}}})
    assert {k: v for k, v in dp_sgd_of(exp(k1, reseeded), JobSpec(1, 0, 0, 2, 1.0)).items() if k != "dp_sgd"} == \
        {k: v for k, v in a.items() if k != "dp_sgd"}  # run.seed, which config.yaml releases, changes nothing
    c = dp_sgd_of(exp(k2), JobSpec(1, 0, 0, 2, 1.0))
    assert c["seed"] != a["seed"] and c["dp_seed"] != a["dp_seed"]
    assert dp_sgd_of(SimpleNamespace(cfg=config_from_dict({}), dp_sgd=calibrated, dp_key=None),
                     JobSpec(1, 0, 0, 2, 1.0)) == {}
    with pytest.raises(RuntimeError, match="devices' key"):  # a trainer without the key never falls back to run.seed
        dp_sgd_of(SimpleNamespace(cfg=cfg, dp_sgd=calibrated, dp_key=None), JobSpec(1, 0, 0, 2, 1.0))
