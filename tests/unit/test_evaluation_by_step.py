"""Evaluation by a module's own step (train/evaluation.py) gives what ``trainer.test`` (or, for a module
with only ``validation_step``, ``trainer.validate``) returns on the same batches: the same names, the
same values, on a CPU with one thread; the module's mode and weights are left as they were."""
import dataclasses

import lightning as L
import pytest
import torch

import lightning_modules as lm
from seafl_dist.data import load_dataset
from seafl_dist.train import flatten
from seafl_dist.train.evaluation import evaluate_by_step, evaluation_step


@pytest.fixture(scope="module")
def test_set():
    return load_dataset("digits", train=False)


class Batches:
    def __init__(self, data, size):
        self.data, self.size = data, size

    def __len__(self):
        return -(-len(self.data) // self.size)

    def __iter__(self):
        for lo in range(0, len(self.data), self.size):
            yield self.data.batch(torch.arange(lo, min(lo + self.size, len(self.data))))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,run", [("evaluates_itself", "test"), ("validates_itself", "validate"),
                                      ("evaluates_with_metrics", "test")])
def test_the_modules_own_step_evaluates_it_as_lightning_does(name, run, test_set):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = lm.build(name)
    flat = flatten(module)
    module.train()
    ours = evaluate_by_step(module, flat, test_set, batch_size=100)
    assert module.training and torch.equal(flatten(module), flat)
    # what an evaluation logged (torchmetrics' states too) is reset after it: one on other rows first
    # changes nothing of the next one
    first_rows = dataclasses.replace(test_set, images=test_set.images[:37], labels=test_set.labels[:37])
    assert evaluate_by_step(module, flat, first_rows, batch_size=100) != ours
    assert evaluate_by_step(module, flat, test_set, batch_size=100) == ours
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    theirs = getattr(trainer, run)(module, dataloaders=Batches(test_set, 100), verbose=False)[0]
    assert ours == {k: float(v) for k, v in theirs.items()}
    if name == "evaluates_itself":
        assert set(ours) == {"test_loss", "test_acc", "worst", "both_epoch", "batches"} and ours["batches"] == 4.0
    if name == "evaluates_with_metrics":  # torchmetrics values; reset after, so a second evaluation is the first
        assert set(ours) == {"test_acc", "test_loss", "mc_acc", "mc_f1"}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_module_is_evaluated_in_eval_mode(test_set):
    """Dropout and batch norm evaluate as trainer.test has them (``eval()``: no dropout, running
    statistics), though the module arrives in training mode, and it leaves in training mode."""
    from torch import nn

    class WithDropoutAndNorm(lm.MODULES["evaluates_itself"]):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(1, 4, 5, stride=2), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                                     nn.Dropout(0.5), nn.Linear(4 * 12 * 12, 10))

    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = WithDropoutAndNorm()
    module.net[1].running_mean.uniform_(-1, 1)  # running statistics unlike any one batch's
    module.train()
    ours = evaluate_by_step(module, flatten(module), test_set, batch_size=100)
    assert module.training
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    theirs = trainer.test(module, dataloaders=Batches(test_set, 100), verbose=False)[0]
    assert ours == {k: float(v) for k, v in theirs.items()}


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_callback_metrics_at_the_epochs_end_hold_the_epochs_reduction(test_set):
    """In on_test_epoch_end, trainer.callback_metrics holds what test_step logged reduced over the
    batches (Lightning's logger connector has left the batches there), as trainer.test has it."""

    class ReadsAtEpochEnd(lm.MODULES["evaluates_itself"]):
        def on_test_epoch_end(self):
            super().on_test_epoch_end()
            seen = self.trainer.callback_metrics
            self.log("twice_loss", 2 * seen["test_loss"])
            self.log("step_and_epoch", seen["both_epoch"] - seen["both"])
            self.log("step_values_seen", float(any(k.endswith("_step") for k in seen)))  # none in an evaluation

    torch.set_num_threads(1)
    module = ReadsAtEpochEnd()
    ours = evaluate_by_step(module, flatten(module), test_set, batch_size=100)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    theirs = trainer.test(module, dataloaders=Batches(test_set, 100), verbose=False)[0]
    assert ours == {k: float(v) for k, v in theirs.items()}
    assert ours["twice_loss"] == 2 * ours["test_loss"] and ours["step_values_seen"] == 0.0


def test_which_step_evaluates():
    assert evaluation_step(lm.build("evaluates_itself")) == "test_step"
    assert evaluation_step(lm.build("validates_itself")) == "validation_step"
    assert evaluation_step(lm.build("form_optimizer")) is None


def test_out_of_gpu_memory_the_batches_halve_once_and_say_so(test_set, capsys):
    """A test_step that runs out of GPU memory above 90 images a batch (the module raises what CUDA raises):
    the batches halve until they fit, one line each time, and stay so; the figures are those of batches of
    90 from the start."""
    import lightning_modules as lm

    class SmallGPU(lm.MODULES["evaluates_itself"]):
        def test_step(self, batch, batch_idx):
            if len(batch[1]) > 90:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return super().test_step(batch, batch_idx)

    torch.manual_seed(0)
    module = SmallGPU()
    flat = flatten(module)
    got = evaluate_by_step(module, flat, test_set, batch_size=360)
    assert capsys.readouterr().err.strip().splitlines() == [
        "seafl: out of GPU memory evaluating; evaluating in batches of 180 from now on",
        "seafl: out of GPU memory evaluating; evaluating in batches of 90 from now on"]
    assert got == evaluate_by_step(SmallGPU(), flat, test_set, batch_size=90)
    assert evaluate_by_step(module, flat, test_set, batch_size=360) == got and capsys.readouterr().err == ""


def _hooks_recording(stage: str):
    """A module whose every {stage} hook records what it was called with and what it sees of the Trainer,
    then does what Lightning's default does; its step logs its loss."""
    step_name = "test_step" if stage == "test" else "validation_step"

    class Recording(lm.Base):
        def __init__(self):
            super().__init__()
            self.calls = []

        def record(self, hook, *args):
            t = self.trainer
            self.calls.append((hook, *args, t.training, t.validating, t.testing, self.training,
                               torch.is_grad_enabled(), t.lightning_module is self, str(t.strategy.root_device),
                               t.current_epoch, t.global_step))

    def recorder(hook):
        def method(self, *args):
            shown = [(len(a[1]) if isinstance(a, (list, tuple)) else round(float(a), 6) if isinstance(a, torch.Tensor)
                      else a) for a in args]
            self.record(hook, *shown)
            return getattr(super(Recording, self), hook)(*args)
        method.__name__ = hook
        return method

    def step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.record(step_name, len(batch[1]), batch_idx)
        self.log("eval_loss", loss)
        return loss

    setattr(Recording, step_name, step)
    for when in ("start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end", "model_eval", "model_train"):
        setattr(Recording, f"on_{stage}_{when}", recorder(f"on_{stage}_{when}"))
    return Recording


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("stage", ["test", "validation"])
def test_every_evaluation_hook_is_called_as_lightning_calls_it(stage, test_set):
    """Each hook of the stage, in Lightning's order, with its arguments (the batch, its index, the step's
    output), seeing the Trainer in the stage's state, the module in eval mode, no gradients; the module's
    mode restored by on_{stage}_model_train."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cls = _hooks_recording(stage)
    ours, theirs = cls(), cls()
    theirs.load_state_dict(ours.state_dict())
    ours.train()
    got = evaluate_by_step(ours, flatten(ours), test_set, batch_size=150)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    run = trainer.test if stage == "test" else trainer.validate
    want = run(theirs, dataloaders=Batches(test_set, 150), verbose=False)[0]
    assert got == {k: float(v) for k, v in want.items()}
    assert ours.calls == theirs.calls and ours.training
    assert [c[0] for c in ours.calls[:3]] == [f"on_{stage}_model_eval", f"on_{stage}_start", f"on_{stage}_epoch_start"]
    assert [c[0] for c in ours.calls[-3:]] == [f"on_{stage}_epoch_end", f"on_{stage}_end", f"on_{stage}_model_train"]
    assert len(ours.calls) == 6 + 3 * 3  # three batches of 150, 150 and 60: start, step, end each


def test_the_step_runs_under_the_given_precision_context(test_set):
    entered = []

    class Counting:
        def __enter__(self):
            entered.append(torch.is_grad_enabled())

        def __exit__(self, *exc):
            return False

    module = lm.build("evaluates_itself")
    evaluate_by_step(module, flatten(module), test_set, batch_size=150, autocast=Counting)
    assert entered == [False] * 3  # each of the three batches' steps, under no_grad
