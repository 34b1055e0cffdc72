"""``train.prox_mu``, FedProx's proximal term (train/proximal.py), on every training path against one oracle
written out by hand (tests/prox_oracle.py): plain torch SGD on the job's batches (its StepPlan) that adds
mu (w - w_base) to each gradient, then clips, then steps. The plain loop, ``train.loop: lightning`` (the
built-in model and a user's LightningModule) and a graph slot stepping eagerly on the CPU match it to the bit;
the fused (vmap) step to the relative L2 difference test_fused_step.py allows its grouped convolutions (1e-4).
At mu = 0 no path runs the term and a run's directory is the bytes of a run without the key; a module of manual
optimization is refused in one line. The runtime (GroupTrainer) hands the key to every path.
"""
import json

import pytest
import torch

import in_process
import lightning_modules
from prox_oracle import prox_sgd
from resuming import dir_bytes
from seafl_dist.data import load_dataset
from seafl_dist.models import build_model
from seafl_dist.settings import ConfigError, TrainConfig, config_from_dict, dump_config
from seafl_dist.train import flatten, proximal, train_job, train_jobs
from seafl_dist.train import batched
from seafl_dist.train.graphed import Slot, train_slots
from seafl_dist.train.optim_config import ModuleContractError
from seafl_dist.train.probe import check_module, probe_batches
from small_runs import QUICKSTART, SMALL
from test_fused_step import EPOCHS, SmallBN, rel
from test_fused_step import setup as fused_setup
from tiny_data import Rows

MU = 0.5  # large enough that the term moves a few steps' result far beyond rounding
LR, MOMENTUM = 0.05, 0.9


def oracle(net, start, data, idx, *, lr=LR, momentum=MOMENTUM, **kw):
    return prox_sgd(net, start, data, idx, lr=lr, momentum=momentum, **kw)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


MODELS = {  # the built-in LeNet-5 (channels-last) and a user's LightningModule (tests/lightning_modules.py: SGD
    # lr 0.05, momentum 0.9; it overrides on_train_epoch_end and self.logs, so the plain loop runs its hooks)
    "lenet5": lambda: build_model("lenet5", 10, 1, image_size=28, optim=TrainConfig(lr=LR, momentum=MOMENTUM)),
    "user": lightning_modules.Base}


@pytest.mark.parametrize("loop", ["plain", "lightning"])
@pytest.mark.parametrize("name", ["lenet5", "user"])
def test_every_loop_adds_the_term_before_clipping_to_the_bit(one_thread, digits, loop, name):
    make = MODELS[name]
    torch.manual_seed(3)
    start = flatten(make())
    idx = torch.arange(64)
    got = train_job(make(), start, digits, idx, epochs=2, batch_size=16, seed=4, loop=loop, clip=(0.5, None),
                    prox_mu=MU)
    want = oracle(make(), start, digits, idx, epochs=2, batch_size=16, seed=4, mu=MU, clip=0.5)
    assert torch.equal(got, want)
    without = oracle(make(), start, digits, idx, epochs=2, batch_size=16, seed=4, mu=0.0, clip=0.5)
    assert rel(got - start, without - start) > 1e-2  # the term is not lost in rounding: the oracle tells mu from 0


def test_the_fused_step_adds_the_term_to_each_row():
    torch.set_num_threads(1)
    data, shards, starts = fused_setup()
    net = SmallBN()
    opt = SmallBN().train_config
    fused = train_jobs(net, starts, data, shards, epochs=EPOCHS, batch_size=opt.batch_size, seeds=[5, 6, 7, 8],
                       prox_mu=MU)
    for j, seed in enumerate([5, 6, 7, 8]):
        kw = dict(epochs=EPOCHS[j], batch_size=opt.batch_size, seed=seed, lr=opt.lr, momentum=opt.momentum,
                  weight_decay=opt.weight_decay)
        want = oracle(SmallBN(), starts[j], data, shards[j], mu=MU, **kw)
        without = oracle(SmallBN(), starts[j], data, shards[j], mu=0.0, **kw)
        err = rel(fused[j] - starts[j], want - starts[j])
        assert err <= 1e-4, (j, err)  # test_fused_step.py's bound: grouped convolutions' rounding, ~1e-6
        assert rel(without - starts[j], want - starts[j]) > 1e-3, j  # the bound tells mu from 0 (job 2: 2 steps)
    alone = train_jobs(net, starts[:1], data, shards[:1], epochs=EPOCHS[:1], batch_size=opt.batch_size, seeds=[5],
                       prox_mu=MU)[0]  # one job is not fused: train_job, to the bit
    assert torch.equal(alone, oracle(SmallBN(), starts[0], data, shards[0], epochs=EPOCHS[0], batch_size=opt.batch_size,
                                     seed=5, mu=MU, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay))


def test_graph_slots_rebase_the_term_on_every_job_to_the_bit():
    """A CPU slot steps eagerly through the step the graph captures; 4 jobs on 2 slots: a slot's second job has
    the second start as its w_base, not the first one's."""
    torch.set_num_threads(1)
    data, shards, starts = fused_setup()
    opt = SmallBN().train_config
    slots = [Slot(SmallBN(), data, opt.batch_size, torch.device("cpu"), "32", prox_mu=MU) for _ in range(2)]
    got = train_slots(slots, starts, data, shards, epochs=EPOCHS, batch_size=opt.batch_size, seeds=[5, 6, 7, 8])
    for j, seed in enumerate([5, 6, 7, 8]):
        want = oracle(SmallBN(), starts[j], data, shards[j], epochs=EPOCHS[j], batch_size=opt.batch_size, seed=seed,
                      mu=MU, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
        assert torch.equal(got[j], want), j


def test_at_zero_no_path_runs_the_term(monkeypatch, digits):
    def never(*args, **kwargs):
        raise AssertionError("the proximal term ran at train.prox_mu = 0")
    monkeypatch.setattr(proximal, "add_proximal", never)
    monkeypatch.setattr(batched, "add_proximal", never)
    data, shards, starts = fused_setup()
    net = SmallBN()
    train_jobs(net, starts[:2], data, shards[:2], epochs=EPOCHS[:2], batch_size=8, seeds=[0, 1], prox_mu=0.0)
    slot = Slot(net, data, 8, torch.device("cpu"), "32", prox_mu=0.0)
    train_slots([slot], starts[:1], data, shards[:1], epochs=[1], batch_size=8, seeds=[0])
    train_job(net, starts[0], data, shards[0], epochs=1, batch_size=8, seed=0, prox_mu=0.0)
    with pytest.raises(AssertionError, match="prox_mu = 0"):  # and the patch does catch a term that runs
        train_job(net, starts[0], data, shards[0], epochs=1, batch_size=8, seed=0, prox_mu=1e-3)


def test_a_run_with_mu_zero_is_the_bytes_of_a_run_without_the_key(tmp_path):
    args = [QUICKSTART, *SMALL, "run.max_aggregations=2"]
    for name, extra in (("without", []), ("zero", ["train.prox_mu=0"])):
        proc = in_process.seafl("run", *args, *extra, "--out", tmp_path / name)
        assert proc.returncode == 0, proc.stderr[-2000:]
    left, right = dir_bytes(tmp_path / "without"), dir_bytes(tmp_path / "zero")
    assert set(left) >= {"config.yaml", "events.jsonl", "metrics.csv", "model.pt", "summary.json"}
    summaries = [json.loads(d.pop("summary.json")) for d in (left, right)]
    for summary in summaries:
        summary.pop("wall_time_s")  # the one value a rerun changes
    assert left == right and summaries[0] == summaries[1]
    assert "prox_mu" not in left["config.yaml"].decode()


def test_the_key_is_typed_bounded_and_kept_in_config_yaml_when_set():
    cfg = config_from_dict({"train": {"prox_mu": 0.01}})
    assert cfg.train.prox_mu == 0.01 and "prox_mu: 0.01" in dump_config(cfg)
    assert "prox_mu" not in dump_config(config_from_dict({}))
    for bad in (-0.1, float("inf"), "x", True):
        with pytest.raises(ConfigError) as err:
            config_from_dict({"train": {"prox_mu": bad}})
        line = str(err.value)
        assert "\n" not in line and "train.prox_mu" in line and repr(bad) in line and ">= 0" in line


def test_manual_optimization_is_refused_in_one_line_with_mu_above_zero(digits, tmp_path):
    batches = probe_batches(digits, "cpu")
    why = check_module(lightning_modules.Manual(), batches, loop="lightning", clip=(None, None), device="cpu",
                       prox_mu=0.01)
    assert why is not None and "\n" not in why and "train.prox_mu is 0.01" in why and "manual optimization" in why
    with pytest.raises(ModuleContractError, match="train.prox_mu is 0.01"):  # and so is a job that reaches a Trainer
        manual = lightning_modules.Manual()
        train_job(manual, flatten(manual), digits, torch.arange(32), epochs=1, batch_size=16, seed=0,
                  loop="lightning", prox_mu=0.01)
    run = tmp_path / "run"  # and a run is refused before it writes anything (runtime/setup.py's probe)
    proc = in_process.seafl("run", QUICKSTART, *SMALL, "model.name=lightning_modules:manual_optimization",
                            "train.loop=lightning", "train.prox_mu=0.01", "--out", run)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("seafl: error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and "train.prox_mu is 0.01" in errors[0], proc.stderr[-2000:]
    assert not run.exists()


@pytest.mark.parametrize("path", ["one", "fused", "slots", "lightning"])
def test_the_runtime_hands_train_prox_mu_to_every_path(one_thread, path):
    """GroupTrainer (what both executors train with) on a digits config with train.prox_mu: each job of a group
    against the oracle on that job's own shard and data-order seed (one job at a time and the slots: to the bit)."""
    from seafl_dist.runtime import executor as ex
    from seafl_dist.runtime.setup import prepare
    g = 1 if path in ("one", "lightning") else 3
    cfg = config_from_dict({"data": {"name": "digits"}, "devices": {"num": 6, "concurrency": 6},
                            "algorithm": {"buffer_size": 3}, "runtime": {"batch_jobs": g, "device": "cpu"},
                            "train": {"epochs": 1, "prox_mu": MU, "loop": "lightning" if path == "lightning" else
                                      "plain"}})
    assert not cfg.data.augment
    exp = prepare(cfg)
    trainer = ex.GroupTrainer(exp, graphs=path == "slots")
    assert trainer.limit == g
    specs = [ex.JobSpec(j, j, 0, 1, float(j)) for j in range(3)]
    starts = [exp.initial_flat() + 0.01 * j for j in range(3)]  # each its own w_base
    if g == 1:  # one job a call, as an executor asks for them
        got = [trainer.train([s], [w])[0] for s, w in zip(specs, starts)]
    else:
        got = trainer.train(specs, starts)
    t = cfg.train
    for spec, start, flat in zip(specs, starts, got):
        want = oracle(exp.new_model(), start, exp.train, exp.shard(spec.device), epochs=spec.epochs,
                      batch_size=t.batch_size, seed=ex.job_seeds(cfg, spec)["seed"], mu=MU, lr=t.lr,
                      momentum=t.momentum, weight_decay=t.weight_decay)
        if path == "fused":
            assert rel(flat - start, want - start) <= 1e-4, spec.job
        else:
            assert torch.equal(flat, want), spec.job


_Rows = Rows  # tests/tiny_data.py


class _Unused(torch.nn.Module):
    """A linear layer and a trainable parameter the loss never uses: its grad stays None on every step."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.spare = torch.nn.Parameter(torch.full((2,), 3.0))

    def forward(self, x):
        return self.fc(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


def test_a_parameter_without_a_gradient_gets_no_term_and_the_others_get_theirs():
    """The plain loop at mu > 0 on a module with an unused parameter: against torch SGD by hand, mu (w - w_base) added
    to the gradient of each parameter that has one; the unused one is neither handed None nor moved."""
    from seafl_dist.train import StepPlan, load_flat
    data, idx = _Rows(), torch.arange(12)
    torch.manual_seed(8)
    start = flatten(_Unused())
    got = train_job(_Unused(), start, data, idx, epochs=2, batch_size=4, seed=2, prox_mu=MU)

    ref = _Unused()
    load_flat(ref, start)
    base = [p.detach().clone() for p in ref.parameters()]
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for _, rows, _ in StepPlan(idx, 2, 4, 2).batches():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(data.x[rows]), data.y[rows]).backward()
        with torch.no_grad():
            for p, w0 in zip(ref.parameters(), base):
                if p.grad is not None:
                    p.grad += MU * (p - w0)
        opt.step()
    assert ref.spare.grad is None and torch.equal(ref.spare.detach(), torch.full((2,), 3.0))
    torch.testing.assert_close(got, flatten(ref), rtol=0, atol=1e-6)
    assert not torch.equal(got, start)
