"""SCAFFOLD (algorithm.name: scaffold; Karimireddy et al. 2020, Algorithm 1, option II) outside a run: the local step
and the control delta against a hand loop of the paper's lines written here, the server step of w and c against the
paper's formulas, the device state's controls part (kept only when accepted, as each job found it), and every
refusal in one line."""
from types import MappingProxyType, SimpleNamespace

import pytest
import torch

from one_line import one_line_message
from seafl_dist.algo import BufferedUpdate, FlatParts, aggregate
from seafl_dist.algo.scaffold import scaffold
from seafl_dist.codecs import ErrorFeedback
from seafl_dist.runtime.controls import JobControls, ServerControls, extra_bytes
from seafl_dist.settings import ConfigError, config_from_dict
from seafl_dist.train import FlatLayout, StepPlan
from seafl_dist.train.controls import ControlStep, check_plain_sgd
from seafl_dist.train.local import train_job
from seafl_dist.train.optim_config import ModuleContractError
from tiny_data import Rows

BASE = {"algorithm": {"name": "scaffold", "buffer_size": 2}, "devices": {"num": 4, "concurrency": 4}}
LR = 0.1


def scaffold_config(**sections):
    tree = {k: dict(v) for k, v in BASE.items()}
    for name, keys in sections.items():
        tree[name] = {**tree.get(name, {}), **keys}
    return config_from_dict(tree)


# ---- the server step ----------------------------------------------------------------------------

def test_the_server_steps_w_as_fedbuff_and_c_by_one_nth_of_the_accepted_control_deltas():
    """w_{t+1} = w_t + η_g (1/|B|) Σ Δy_k and c_{t+1} = c_t + (|S|/N) · (1/|S|) Σ Δc_k (Algorithm 1, lines 16-17),
    η_g = 0.5, N = 4, |B| = 2 accepted of 3 (one with a non-finite Δc takes no part in either); counters carried."""
    alg = scaffold_config(algorithm={"server_lr": 0.5}).algorithm
    g = torch.Generator().manual_seed(5)
    parts = FlatParts(torch.tensor([True, True, True, False]), torch.zeros(4, dtype=torch.bool),
                      torch.tensor([False, False, False, True]))
    bases = {v: torch.cat([torch.randn(3, generator=g), torch.tensor([7.0])]) for v in (2, 3)}
    w_t = torch.cat([torch.randn(3, generator=g), torch.tensor([9.0])])
    c_t = torch.randn(3, generator=g)
    y = [bases[2] + torch.cat([torch.randn(3, generator=g), torch.tensor([4.0])]),
         bases[3] + torch.cat([torch.randn(3, generator=g), torch.tensor([1.0])]), bases[3].clone()]
    dc = [torch.randn(3, generator=g), torch.randn(3, generator=g), torch.tensor([1.0, float("inf"), 0.0])]
    ups = [BufferedUpdate(device=k, job=k, flat=y[k], n_samples=5, base_version=(2, 3, 3)[k], epochs=1,
                          control=dc[k]) for k in range(3)]
    state = MappingProxyType({"c": {1: torch.zeros(3), 3: c_t}})
    res = scaffold(alg, 3, w_t, ups, lambda v: bases[v], parts, state=state)
    step = w_t[:3] + 0.5 * ((y[0] - bases[2])[:3] + (y[1] - bases[3])[:3]) / 2
    torch.testing.assert_close(res.new_global[:3], step, rtol=0, atol=1e-6)
    assert float(res.new_global[3]) == 11.0  # max(w_t's 9, 7 + 4, 7 + 1): carried, not averaged
    torch.testing.assert_close(res.state["c"][4], c_t + (dc[0] + dc[1]) / 4, rtol=0, atol=1e-6)
    assert [d["weight"] for d in res.info] == pytest.approx([0.25, 0.25, 0.0])
    assert res.info[2]["rejected"] and res.info[2]["reason"] == "control variate: non-finite"
    assert res.state["c"][3] is c_t and res.state["c"][1] is state["c"][1]  # the kept versions' c shared, not copied
    assert 4 not in state["c"]  # the state handed in is not written


def test_with_no_update_accepted_w_and_c_stay_and_c_at_version_0_is_zero():
    """The rule's two edges: nothing accepted (w_{t+1} = w_t, c_{t+1} = c_t, the same tensor), and the first
    aggregation (no c yet: c_0 = 0, so c_1 = (1/N) Σ Δc_k)."""
    alg = scaffold_config().algorithm
    w = torch.arange(3.0)
    bad = BufferedUpdate(device=0, job=0, flat=torch.full((3,), float("nan")), n_samples=1, base_version=0, epochs=1,
                         control=torch.ones(3))
    c_t = torch.tensor([1.0, 2.0, 3.0])
    res = scaffold(alg, 5, w, [bad], lambda v: w, state=MappingProxyType({"c": {5: c_t}}))
    assert torch.equal(res.new_global, w) and res.state["c"][6] is c_t and res.info[0]["rejected"]
    good = BufferedUpdate(device=1, job=1, flat=w + 1, n_samples=1, base_version=0, epochs=1,
                          control=torch.tensor([4.0, 8.0, -4.0]))
    first = scaffold(alg, 0, w, [good], lambda v: w, state=MappingProxyType({}))
    torch.testing.assert_close(first.state["c"][1], torch.tensor([1.0, 2.0, -1.0]), rtol=0, atol=0)


def test_an_update_without_its_control_delta_or_of_the_wrong_size_is_rejected_and_the_guard_rejects_before():
    alg = scaffold_config().algorithm
    w = torch.zeros(3)
    ups = [BufferedUpdate(device=0, job=0, flat=w + 1, n_samples=1, base_version=0, epochs=1, control=None),
           BufferedUpdate(device=1, job=1, flat=w + 1, n_samples=1, base_version=0, epochs=1, control=torch.ones(2))]
    res = aggregate(alg, 0, w, ups, lambda v: w)
    assert [d["reason"] for d in res.info] == ["control variate: not a tensor: got NoneType",
                                               "control variate: wrong size: got 2, expected 3"]
    assert torch.equal(res.new_global, w) and torch.equal(res.state["c"][1], torch.zeros(3))


def test_the_download_carries_c_of_the_jobs_version_and_prunes_the_versions_the_server_dropped():
    alg = scaffold_config()
    parts = FlatParts.all_params(2)
    memory = SimpleNamespace(state=MappingProxyType({"c": {1: torch.tensor([1.0, 1.0]), 2: torch.tensor([2.0, 3.0])}}))
    down = ServerControls(alg, parts, memory)
    versions = {2: torch.tensor([5.0, 6.0]), 3: torch.tensor([7.0, 8.0])}
    assert torch.equal(down.download(2, versions), torch.tensor([5.0, 6.0, 2.0, 3.0]))
    assert sorted(memory.state["c"]) == [2]  # version 1's model is gone, so is its c
    assert torch.equal(down.download(3, versions), torch.tensor([7.0, 8.0, 0.0, 0.0]))  # no c at 3 yet: zero
    upload = torch.tensor([1.0, 2.0, 3.0, 4.0])
    u = down.buffered({"device": 1, "job": 4, "n_samples": 3, "epochs": 1, "base_version": 2}, upload, versions,
                      lambda w, base: w)
    assert torch.equal(u.flat, torch.tensor([1.0, 2.0])) and torch.equal(u.control, torch.tensor([3.0, 4.0]))


# ---- the local step ------------------------------------------------------------------------------

_Data = Rows  # tests/tiny_data.py


class _Linear(torch.nn.Module):
    def __init__(self, optimizer=None):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.optimizer = optimizer or (lambda params: torch.optim.SGD(params, lr=LR))

    def forward(self, x):
        return self.fc(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return self.optimizer(self.parameters())


def _job(model, data, idx, epochs=2):
    return lambda spec, w, step: train_job(model, w, data, idx, epochs=epochs, batch_size=4, seed=11, control=step)


def test_a_job_takes_corrected_sgd_steps_and_uploads_option_IIs_control_delta():
    """The oracle, Algorithm 1 lines 8-12 by hand: y ← y − η_l (g_i(y) − c_i + c) over the plan's 6 batches
    (2 epochs of 3), then c_i⁺ = c_i − c + (x − y)/(K η_l) with K = 6; the upload is y followed by c_i⁺ − c_i."""
    data, idx = _Data(), torch.arange(12)
    model = _Linear()
    layout = FlatLayout.of(model)
    g = torch.Generator().manual_seed(1)
    x = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    c, c_i = torch.randn(8, generator=g), torch.randn(8, generator=g)
    state = ErrorFeedback()
    state.controls[3] = c_i
    state.started(7, 3)
    cfg = scaffold_config(train={"lr": LR})
    got = JobControls(SimpleNamespace(cfg=cfg), layout, state).train(
        _job(_Linear(), data, idx), SimpleNamespace(job=7, device=3), torch.cat([x, c]))

    y = x.clone().double()
    batches = [b for _, b, _ in StepPlan(idx, epochs=2, batch_size=4, seed=11).batches()]
    for b in batches:
        w = y.clone().requires_grad_(True)
        logits = data.x[b].double() @ w[:6].reshape(2, 3).T + w[6:]
        grad, = torch.autograd.grad(torch.nn.functional.cross_entropy(logits, data.y[b]), w)
        y = y - LR * (grad - c_i.double() + c.double())
    k = len(batches)
    c_plus = c_i.double() - c.double() + (x.double() - y) / (k * LR)
    assert k == 6 and got.numel() == 16
    torch.testing.assert_close(got[:8].double(), y, rtol=0, atol=1e-5)
    torch.testing.assert_close(got[8:].double(), c_plus - c_i.double(), rtol=0, atol=1e-4)
    assert state.controls[3] is c_i  # not kept before the server takes the job


class _Skips(_Linear):
    """Its training_step returns None (skip the step, as Lightning allows) on the second batch of every epoch."""

    def training_step(self, batch, batch_idx):
        return None if batch_idx == 1 else super().training_step(batch, batch_idx)


def test_a_step_whose_training_step_returns_none_moves_nothing_and_is_not_counted_in_K():
    """Option II's K is the local steps taken: a skipped step (no loss, no gradient) adds no correction and does not
    move y, so c_i⁺ = c_i − c + (x − y)/(K η_l) with K = 4 of the plan's 6 batches (2 epochs of 3, batch 1 skipped),
    against the hand loop of the paper's line 10 over the 4 steps taken."""
    data, idx = _Data(), torch.arange(12)
    model = _Skips()
    layout = FlatLayout.of(model)
    g = torch.Generator().manual_seed(1)
    x = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    c, c_i = torch.randn(8, generator=g), torch.randn(8, generator=g)
    state = ErrorFeedback()
    state.controls[3] = c_i
    state.started(7, 3)
    got = JobControls(SimpleNamespace(cfg=scaffold_config(train={"lr": LR})), layout, state).train(
        _job(model, data, idx), SimpleNamespace(job=7, device=3), torch.cat([x, c]))

    y = x.clone().double()
    taken = [b for i, b, _ in StepPlan(idx, epochs=2, batch_size=4, seed=11).batches() if i != 1]
    for b in taken:
        w = y.clone().requires_grad_(True)
        logits = data.x[b].double() @ w[:6].reshape(2, 3).T + w[6:]
        grad, = torch.autograd.grad(torch.nn.functional.cross_entropy(logits, data.y[b]), w)
        y = y - LR * (grad - c_i.double() + c.double())
    assert len(taken) == 4
    torch.testing.assert_close(got[:8].double(), y, rtol=0, atol=1e-5)
    torch.testing.assert_close(got[8:].double(), (x.double() - y) / (4 * LR) - c.double(), rtol=0, atol=1e-4)


def test_a_job_that_trains_no_step_sends_a_zero_control_delta():
    layout = FlatLayout.of(_Linear())
    state = ErrorFeedback()
    state.started(0, 0)
    cfg = scaffold_config()
    x = torch.arange(8.0)
    got = JobControls(SimpleNamespace(cfg=cfg), layout, state).train(lambda spec, w, step: w.clone(),
                                                                    SimpleNamespace(job=0, device=0),
                                                                    torch.cat([x, torch.ones(8)]))
    assert torch.equal(got, torch.cat([x, torch.zeros(8)]))


def test_the_correction_reaches_only_trainable_parameters_and_counts_its_steps():
    """c − c_i is laid out over the flat entries: a frozen parameter's gradient gets nothing."""
    model = _Linear()
    model.fc.bias.requires_grad_(False)
    layout = FlatLayout.of(model)
    assert extra_bytes(scaffold_config(), layout) == 4 * 6 and extra_bytes(config_from_dict({}), layout) == 0
    step = ControlStep(torch.arange(8.0), layout, LR).bind(model)
    model.fc.weight.grad = torch.zeros(2, 3)
    step.add()
    step.add()
    assert torch.equal(model.fc.weight.grad, 2 * torch.arange(6.0).reshape(2, 3)) and model.fc.bias.grad is None
    assert step.steps == 2


class _BN(_Linear):
    """Linear, BatchNorm1d, Linear: a model whose state holds buffers (running statistics, a counter) beside its
    parameters."""

    def __init__(self):
        super().__init__()
        self.fc, self.bn, self.out = torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.bn(self.fc(x)))


def test_a_job_on_a_model_with_batchnorm_buffers_corrects_only_its_parameters():
    """The oracle by hand: torch SGD on the plan's 6 batches, each parameter's grad += its piece of c − c_i (split over
    named_parameters here), the buffers moving only as BatchNorm moves them; the upload is every state entry of y
    followed by (x − y)/(K η_l) − c over the 34 parameter entries only."""
    data, idx = _Data(), torch.arange(12)
    torch.manual_seed(4)
    model = _BN()
    torch.manual_seed(4)
    ref = _BN()
    layout = FlatLayout.of(model)
    x = torch.cat([t.detach().reshape(-1).float() for t in model.state_dict().values()])
    is_param = torch.cat([torch.full((t.numel(),), n in dict(model.named_parameters()))
                          for n, t in model.state_dict().items()])
    assert x.numel() == 43 and int(is_param.sum()) == 34  # 9 buffer entries: running mean, var (4 each), a counter
    g = torch.Generator().manual_seed(6)
    c, c_i = torch.randn(34, generator=g), torch.randn(34, generator=g)
    state = ErrorFeedback()
    state.controls[0] = c_i
    state.started(1, 0)
    got = JobControls(SimpleNamespace(cfg=scaffold_config(train={"lr": LR})), layout, state).train(
        _job(model, data, idx), SimpleNamespace(job=1, device=0), torch.cat([x, c]))

    pieces, at = [], 0
    for p in ref.parameters():
        pieces.append((c - c_i)[at:at + p.numel()].reshape(p.shape))
        at += p.numel()
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    ref.train()
    batches = [b for _, b, _ in StepPlan(idx, epochs=2, batch_size=4, seed=11).batches()]
    for b in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(data.x[b]), data.y[b]).backward()
        for p, piece in zip(ref.parameters(), pieces):
            p.grad += piece
        opt.step()
    y = torch.cat([t.detach().reshape(-1).float() for t in ref.state_dict().values()])
    assert len(batches) == 6 and got.numel() == 43 + 34
    torch.testing.assert_close(got[:43], y, rtol=0, atol=1e-5)
    assert float(got[32]) == 6.0  # entry 32, bn.num_batches_tracked: 6 steps, moved by BatchNorm only
    torch.testing.assert_close(got[43:], (x - y)[is_param] / (6 * LR) - c, rtol=0, atol=1e-4)


class _OwnSGD(torch.optim.SGD):
    """A subclass of torch.optim.SGD: its step may be anything, so option II's c_i⁺ does not hold for it."""


@pytest.mark.parametrize("optimizer, fragment", [
    (lambda p: torch.optim.Adam(p, lr=LR), "returns Adam, not torch.optim.SGD"),
    (lambda p: torch.optim.SGD(p, lr=LR, momentum=0.9), "momentum=0.9"),
    (lambda p: torch.optim.SGD(p, lr=LR, weight_decay=0.01), "weight_decay=0.01"),
    (lambda p: torch.optim.SGD(p, lr=0.5), "lr=0.5"),
    (lambda p: torch.optim.SGD(p, lr=0.01), "lr=0.01"),  # below train.lr too: (x − y)/(K·η_l) is wrong either way
    (lambda p: _OwnSGD(p, lr=LR), "returns _OwnSGD, not torch.optim.SGD"),  # a subclass may step otherwise
])
def test_a_modules_own_optimizer_that_is_not_plain_sgd_at_train_lr_is_refused_in_one_line(optimizer, fragment):
    model = _Linear(optimizer)
    before = [p.detach().clone() for p in model.parameters()]
    step = ControlStep(torch.zeros(8), FlatLayout.of(model), LR)
    with pytest.raises(ModuleContractError) as err:
        train_job(model, torch.cat([b.reshape(-1) for b in before]), _Data(), torch.arange(12), epochs=1,
                  batch_size=4, seed=0, control=step)
    one_line_message(str(err.value), "algorithm.name=scaffold", fragment)
    assert step.steps == 0


def test_a_modules_scheduler_is_refused_in_one_line():
    """What train/loop.py hands the check for a LightningModule whose configure_optimizers returns a scheduler."""
    opt = torch.optim.SGD(_Linear().parameters(), lr=LR)
    with pytest.raises(ModuleContractError) as err:
        check_plain_sgd(opt, [torch.optim.lr_scheduler.StepLR(opt, 1)], LR)
    one_line_message(str(err.value), "algorithm.name=scaffold", "learning-rate scheduler")
    check_plain_sgd(opt, [], LR)  # plain SGD at train.lr: fine


# ---- the device state's controls part ----------------------------------------------------------

def test_a_jobs_control_delta_is_kept_only_when_the_server_accepts_it():
    state = ErrorFeedback()
    state.started(0, 2)
    state.trained(0, torch.tensor([1.0, 2.0]))
    state.taken(0, accepted=False)
    assert 2 not in state.controls
    state.started(1, 2)
    state.trained(1, torch.tensor([1.0, 2.0]))
    state.taken(1, accepted=True)
    state.started(2, 2)
    state.trained(2, torch.tensor([0.5, 0.5]))
    state.taken(2)
    assert torch.equal(state.controls[2], torch.tensor([1.5, 2.5])) and state.controls_nbytes() == 8


def test_a_job_trains_from_c_i_as_it_found_it_and_a_checkpoint_keeps_that_for_a_resume():
    """Device churn: a device's next job (5) started before its last one (4) was taken; it trains from the c_i it
    found, and c_i ends as c_i + both deltas (c_i += Δc keeps c = (1/N) Σ c_i)."""
    state = ErrorFeedback()
    state.controls[1] = torch.tensor([1.0])
    state.started(4, 1)
    state.trained(4, torch.tensor([2.0]))
    state.started(5, 1)
    state.taken(4)
    assert torch.equal(state.control_of(5), torch.tensor([1.0])) and torch.equal(state.controls[1], torch.tensor([3.0]))
    held = state.controls_state()
    assert sorted(held["seen"]) == [5] and torch.equal(held["seen"][5], torch.tensor([1.0]))
    resumed = ErrorFeedback()
    resumed.load_controls(held)
    resumed.started(5, 1)
    assert torch.equal(resumed.control_of(5), torch.tensor([1.0])) and torch.equal(resumed.controls[1],
                                                                                  torch.tensor([3.0]))
    state.trained(5, torch.tensor([-1.0]))
    state.taken(5)
    assert torch.equal(state.controls[1], torch.tensor([2.0])) and state.controls_state()["seen"] == {}


def test_a_job_trains_with_the_c_i_its_start_read_when_c_i_moved_since():
    """Churn at the trainer: job 5 of device 1 started at c_1 = a, then job 4's Δc was taken (c_1 = a + Δc); job 5's
    step is corrected by c − a, not by c − c_1 now. The correction the job's run gets is read here."""
    layout = FlatLayout.of(_Linear())
    a, dc, c = torch.arange(8.0), torch.full((8,), 100.0), torch.linspace(-1.0, 1.0, 8)
    state = ErrorFeedback()
    state.controls[1] = a
    state.started(4, 1)
    state.trained(4, dc)
    state.started(5, 1)
    state.taken(4)
    assert torch.equal(state.controls[1], a + dc)
    seen = []

    def run(spec, w, step):
        seen.append(step.correction.clone())
        return w.clone()

    x = torch.zeros(8)
    JobControls(SimpleNamespace(cfg=scaffold_config()), layout, state).train(run, SimpleNamespace(job=5, device=1),
                                                                              torch.cat([x, c]))
    torch.testing.assert_close(seen[0], c - a, rtol=0, atol=0)


def test_a_resume_loads_only_the_devices_a_worker_holds_and_a_fresh_device_reads_zero():
    state = ErrorFeedback()
    state.load_controls({"c": {0: torch.ones(2), 1: torch.ones(2), 2: torch.ones(2)}, "seen": {9: torch.zeros(0)}},
                        devices=[1])
    assert sorted(state.controls) == [1]
    state.started(9, 0)
    assert state.control_of(9) is None  # the checkpoint said: job 9 started from c_0 = 0


class _Outbox:
    """Where a worker's SAVED answers go (rank 0's inbox under torchrun): kept here to be read."""

    def __init__(self):
        self.sent = []

    def send(self, rank, header):
        self.sent.append((rank, header))


def test_a_workers_taken_keeps_a_rejected_jobs_control_delta_out_of_c_k_and_adds_an_accepted_ones(tmp_path):
    """runtime/residuals.py WorkerResiduals, in one process: TAKEN with epochs 0 (rejected) leaves c_k as it was, with
    epochs 1 (accepted) c_k += Δc_k."""
    from seafl_dist.runtime.residuals import WorkerResiduals
    worker = WorkerResiduals(ErrorFeedback(), tmp_path, 1, _Outbox(), controls=True)
    worker.started(0, 2)
    worker.feedback.trained(0, torch.tensor([1.0, 2.0]))
    worker.taken(0, accepted=False)
    assert 2 not in worker.feedback.controls  # c_2 is still zero
    worker.started(1, 2)
    worker.feedback.trained(1, torch.tensor([1.0, 2.0]))
    worker.taken(1, accepted=False)
    worker.started(2, 2)
    worker.feedback.trained(2, torch.tensor([0.5, -1.0]))
    worker.taken(2, accepted=True)
    assert torch.equal(worker.feedback.controls[2], torch.tensor([0.5, -1.0]))
    worker.started(3, 2)
    worker.feedback.trained(3, torch.tensor([4.0, 4.0]))
    worker.taken(3, accepted=False)
    assert torch.equal(worker.feedback.controls[2], torch.tensor([0.5, -1.0]))


def test_a_resumed_worker_reads_the_controls_of_its_own_devices_from_every_workers_file(tmp_path):
    """Two workers' SAVE files (rank 0: devices 0, 2; rank 1: devices 1, 3), named by a rank-0 checkpoint that holds no
    controls inline (torchrun): device_state(path, devices) is each of those devices' own c_k, and the c_k the jobs
    not yet taken started from ("seen", keyed by job), as each worker wrote them."""
    from seafl_dist.runtime.checkpoint import private_place
    from seafl_dist.runtime.residuals import WorkerResiduals, device_state
    c = {d: torch.full((2,), float(10 * (d + 1))) for d in range(4)}
    workers = {}
    for rank, devices in ((0, (0, 2)), (1, (1, 3))):
        feedback = ErrorFeedback()
        feedback.load_controls({"c": {d: c[d] for d in devices}, "seen": {}})
        worker = workers[rank] = WorkerResiduals(feedback, tmp_path, rank, _Outbox(), controls=True)
        first = devices[0]
        worker.started(100 + first, first)  # job 100+d trained and taken (accepted) while job 200+d, started before it
        worker.started(200 + first, first)  # was taken, still trains from the c_k it found
        feedback.trained(100 + first, torch.ones(2))
        worker.taken(100 + first, accepted=True)
        worker.save(3)
    names = {}
    for rank, worker in workers.items():
        (to, header), = worker.outbox.sent
        names[f"residuals-00000003-rank{rank}.pt"] = header.job
    ckpt = private_place(tmp_path) / "checkpoint-00000003.pt"
    torch.save({"version": 3, "residuals": names}, ckpt)

    want = {0: c[0] + 1, 1: c[1] + 1, 2: c[2], 3: c[3]}
    for devices in ([1, 3], [0, 2], [2], None):
        got = device_state(ckpt, devices)["controls"]
        assert sorted(got["c"]) == sorted(devices or range(4)), devices
        for d in got["c"]:
            assert torch.equal(got["c"][d], want[d]), (devices, d)
        assert sorted(got["seen"]) == [200, 201]
        assert torch.equal(got["seen"][200], c[0]) and torch.equal(got["seen"][201], c[1])
    resumed = ErrorFeedback()  # what runtime/worker.py does with it: load_controls without devices
    resumed.load_controls(device_state(ckpt, [1, 3])["controls"])
    resumed.started(201, 1)
    assert sorted(resumed.controls) == [1, 3] and torch.equal(resumed.control_of(201), c[1])


# ---- the config's refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("sections, key, value", [
    ({"train": {"momentum": 0.9}}, "train.momentum", 0.9),
    ({"train": {"weight_decay": 0.001}}, "train.weight_decay", 0.001),
    ({"compression": {"codec": "topk", "fraction": 0.1}}, "compression.codec", "topk"),
    ({"privacy": {"enabled": True, "noise_multiplier": 1.0}}, "privacy.enabled", True),
])
def test_what_scaffold_cannot_run_is_refused_in_one_line_naming_the_key(sections, key, value):
    with pytest.raises(ConfigError) as err:
        scaffold_config(**sections)
    one_line_message(str(err.value), f"config key '{key}' has value {value!r}", "allowed", "algorithm.name=scaffold")


def test_scaffold_resolves_fedbuffs_infinite_beta_and_runs_at_plain_sgd():
    cfg = scaffold_config()
    assert cfg.algorithm.staleness_limit is None and cfg.algorithm.rule == "scaffold"
    assert cfg.algorithm.num_devices == 4


def test_c_k_of_every_device_that_does_not_fit_in_memory_or_on_disk_is_refused_before_anything_runs(tmp_path):
    """4 bytes a trainable parameter a device: ResNet-18's 11,173,962 at 100 devices take 4.47 GB; on disk KEEP + 1 = 3
    checkpoints of them (runtime/residuals.py). At the limit it runs; a byte less is one line naming algorithm.name."""
    from seafl_dist.runtime.model_checks import COPIES, check_model_size
    from seafl_dist.runtime.residuals import check_disk
    cfg = scaffold_config(model={"name": "resnet18"}, devices={"num": 100, "concurrency": 4})
    params = 11_173_962
    fits = COPIES * 4 * params + 100 * 4 * params
    check_model_size(cfg, 10, 3, 32, memory=fits, num_devices=100)
    with pytest.raises(ConfigError) as err:
        check_model_size(cfg, 10, 3, 32, memory=fits - 1, num_devices=100)
    one_line_message(str(err.value), "config key 'algorithm.name' has value 'scaffold'", "100 devices' control "
                     "variates", "4.47 GB", "44.7 MB a device")
    exp = SimpleNamespace(num_devices=100, new_model=_Linear)  # 8 trainable parameters: 3 · 4 · 8 · 100 bytes
    check_disk(cfg, exp, tmp_path, free=3 * 4 * 8 * 100)
    with pytest.raises(ConfigError) as err:
        check_disk(cfg, exp, tmp_path, free=3 * 4 * 8 * 100 - 1)
    one_line_message(str(err.value), "config key 'algorithm.name' has value 'scaffold'", "control variates c_k")


def test_a_scaffold_job_in_lightnings_loop_is_the_plain_loops_to_the_bit():
    """train.loop: lightning (a lightning.Trainer, its callback adding c − c_i before the step) against the plain loop,
    LeNet-5 as a LightningModule on 64 random 28x28 images, 2 epochs of 2 steps: the same y and K."""
    from seafl_dist.data import ArrayDataset
    from seafl_dist.models import build_model
    from seafl_dist.train import flatten
    g = torch.Generator().manual_seed(2)
    data = ArrayDataset(torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8, generator=g),
                        torch.randint(0, 10, (64,), generator=g), 10, "random", (0.5,), (0.25,))
    nets = [build_model("lenet5", 10, 1, image_size=28, lightning=True, optim=scaffold_config().train)
            for _ in range(2)]
    start = flatten(nets[0])
    layout = FlatLayout.of(nets[0])
    correction = 1e-2 * torch.randn(start.numel(), generator=g)
    steps, outs = [], []
    for net, loop in zip(nets, ("plain", "lightning")):
        step = ControlStep(correction, layout, scaffold_config().train.lr)
        outs.append(train_job(net, start, data, torch.arange(64), epochs=2, batch_size=32, seed=3, loop=loop,
                              control=step))
        steps.append(step.steps)
    assert steps == [4, 4] and torch.equal(outs[0], outs[1])
    plain = train_job(nets[0], start, data, torch.arange(64), epochs=2, batch_size=32, seed=3)
    assert not torch.equal(plain, outs[0])  # the correction did act
