"""The contract's declarations against Lightning and the docs: every hook Lightning defines has a row
(models/contract.py HOOKS), docs/extending.md's hook table says for each what the code does, and the
stand-in Trainer offers every attribute the page lists (and only those)."""
import fnmatch
import inspect
import re
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

from seafl_dist.models.contract import EVALUATION, HONOURED, HOOKS, NOT_CALLED, PLAIN, REFUSED
from seafl_dist.train.standin import SURFACE, Recorder, StandInTrainer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
OWN = ("training_step", "validation_step", "test_step", "predict_step", "configure_optimizers", "configure_callbacks",
       "backward", "optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "configure_gradient_clipping")
STATUS = {HONOURED: ("honoured", "honoured"), NOT_CALLED: ("not called", "not called"),
          EVALUATION: ("at evaluation", "at evaluation"),
          REFUSED: ("refused", "refused"), PLAIN: ("refused", "honoured")}


def lightning_hooks() -> set[str]:
    found = {n for cls in (ModelHooks, DataHooks, CheckpointHooks) for n in vars(cls) if not n.startswith("_")}
    return found | set(OWN)


def test_every_hook_lightning_defines_has_a_row():
    missing = lightning_hooks() - set(HOOKS)
    assert not missing, f"hooks of Lightning without a row in models/contract.py HOOKS: {sorted(missing)}"
    for name in HOOKS:
        assert callable(getattr(L.LightningModule, name, None)), name


def page_table() -> dict[str, tuple[str, str]]:
    """{hook: (plain loop, train.loop: lightning)} from the page's table, patterns expanded."""
    rows, inside = {}, False
    for line in PAGE.read_text().splitlines():
        if line.startswith("| hooks | plain loop |"):
            inside = True
        elif inside and not line.startswith("|"):
            break
        elif inside and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            for pattern in re.findall(r"`([^`]+)`", cells[0]):
                for hook in fnmatch.filter(HOOKS, pattern):
                    rows[hook] = (cells[1], cells[2])
    return rows


def test_the_pages_hook_table_says_what_the_code_does():
    table = page_table()
    assert set(table) == set(HOOKS), sorted(set(HOOKS) ^ set(table))
    wrong = {h: (table[h], STATUS[HOOKS[h][0]]) for h in HOOKS if table[h] != STATUS[HOOKS[h][0]]}
    assert not wrong, wrong


def test_the_stand_in_offers_what_the_page_lists_and_nothing_else():
    text = " ".join(PAGE.read_text().split("**The stand-in Trainer.**")[1].split("\n\n")[0].split())
    listed = set(re.findall(r"`([a-z_]+)`", text))
    assert set(SURFACE) <= listed, sorted(set(SURFACE) - listed)
    module = L.LightningModule()
    trainer = StandInTrainer(module, Recorder(), epochs=2, steps_per_epoch=3, clip_val=None, clip_algorithm=None,
                             device=torch.device("cpu"), precision="32")
    for name in SURFACE:
        getattr(trainer, name)
    assert trainer.estimated_stepping_batches == 6 and trainer.max_epochs == 2 and trainer.callback_metrics == {}
    with pytest.raises(AttributeError, match="'check_val_every_n_epoch'.*train.loop: lightning"):
        trainer.check_val_every_n_epoch
    with pytest.raises(AttributeError, match="read-only"):
        trainer.should_stop = True
    assert not [n for n, _ in inspect.getmembers(type(trainer)) if not n.startswith("_") and n not in SURFACE]


def test_a_plateau_monitor_not_logged_with_strict_false_is_skipped_with_one_warning():
    import warnings

    import lightning_modules as lm
    from seafl_dist.data import load_dataset
    from seafl_dist.train import flatten, train_job
    module = lm.build("plateau_not_strict")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        train_job(module, flatten(module), load_dataset("digits"), torch.arange(64), epochs=3, batch_size=16, seed=0)
    skipped = [w for w in seen if "strict is set to `False`" in str(w.message)]
    assert len(skipped) == 1 and module.seen[-1]["lr"] == module.lr  # never stepped


# ---- configure_optimizers read as Lightning reads it (train/optim_config.py), entry by entry ------------------

def _sgd():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)


def _contract_error(conf, **kw) -> str:
    from seafl_dist.train.optim_config import ModuleContractError, parse_optimizers
    with pytest.raises(ModuleContractError) as err:
        parse_optimizers(conf, **kw)
    return str(err.value)


def test_a_scheduler_dicts_keys_become_lightnings_config():
    import warnings

    from torch.optim.lr_scheduler import OneCycleLR, ReduceLROnPlateau, StepLR

    from seafl_dist.train.optim_config import SchedulerConfig, parse_optimizers
    opt = _sgd()
    step = StepLR(opt, 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": step, "interval": "step",
                                                                   "frequency": 3, "name": "n", "strict": False,
                                                                   "bogus": 1}})
    assert got == (opt, [SchedulerConfig(step, "n", "step", 3, False, None, False)])
    assert [(w.category, str(w.message)) for w in seen] == [
        (RuntimeWarning, "Found unsupported keys in the lr scheduler dict: {'bogus'}")]
    assert parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": step}})[1] == [SchedulerConfig(step)]
    assert parse_optimizers(([opt], step))[1] == [SchedulerConfig(step, None, "epoch", 1, False, None, True)]
    plateau = ReduceLROnPlateau(opt)
    assert parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "m"}})[1] == [
        SchedulerConfig(plateau, reduce_on_plateau=True, monitor="m")]
    assert parse_optimizers({"optimizer": opt, "lr_scheduler": plateau, "monitor": "m"})[1] == [
        SchedulerConfig(plateau, reduce_on_plateau=True, monitor="m")]
    cycle = OneCycleLR(opt, max_lr=0.1, total_steps=10)
    for entry in ({"scheduler": cycle}, {"scheduler": cycle, "interval": "epoch"}):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            parse_optimizers({"optimizer": opt, "lr_scheduler": entry})
        assert [(w.category, str(w.message)) for w in seen] == [
            (RuntimeWarning, "A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean "
                             "'interval': 'step'?")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": cycle, "interval": "step"}})


def test_a_scheduler_entry_lightning_refuses_is_one_line():
    from torch.optim.lr_scheduler import ReduceLROnPlateau, StepLR
    opt = _sgd()
    assert _contract_error({"optimizer": opt, "lr_scheduler": {"interval": "step"}}) == (
        "configure_optimizers: a lr_scheduler dict needs the key 'scheduler'")
    assert _contract_error({"optimizer": opt, "lr_scheduler": {"scheduler": StepLR(opt, 1), "interval": "batch"}}) == (
        "configure_optimizers: lr_scheduler 'interval' is 'batch'; allowed: 'step' or 'epoch'")
    for frequency in (0, -1, True, 1.0, "2"):
        assert _contract_error({"optimizer": opt, "lr_scheduler": {"scheduler": StepLR(opt, 1),
                                                                   "frequency": frequency}}) == (
            f"configure_optimizers: lr_scheduler 'frequency' is {frequency!r}; allowed: an integer >= 1")
    assert _contract_error({"optimizer": opt, "lr_scheduler": {"scheduler": ReduceLROnPlateau(opt)}}) == (
        "configure_optimizers: a ReduceLROnPlateau scheduler needs a 'monitor' (the name of a value the module logs)")
    assert _contract_error(([opt], [ReduceLROnPlateau(opt)])) == (
        "configure_optimizers: a ReduceLROnPlateau scheduler needs a 'monitor' (return {'optimizer': ..., "
        "'lr_scheduler': ..., 'monitor': 'name'})")


def test_schedulers_step_at_their_interval_and_frequency_plateaus_with_their_value():
    import warnings

    from seafl_dist.train.optim_config import ModuleContractError, SchedulerConfig, step_schedulers
    configs = [SchedulerConfig("every-step", interval="step"), SchedulerConfig("third-step", interval="step", frequency=3),
               SchedulerConfig("epoch"), SchedulerConfig("second-epoch", frequency=2),
               SchedulerConfig("plateau", reduce_on_plateau=True, monitor="loss"),
               SchedulerConfig("plateau-step", interval="step", reduce_on_plateau=True, monitor="acc", strict=False),
               SchedulerConfig("plateau-step-loss", interval="step", reduce_on_plateau=True, monitor="loss")]
    stepped = []

    def step(scheduler, value):
        stepped.append((scheduler, value))

    def run(interval, index, plateau, metrics):
        stepped.clear()
        step_schedulers(configs, interval, index=index, plateau=plateau, metrics=metrics, step=step)
        return list(stepped)

    assert run("step", 1, False, {}) == [("every-step", None)]
    assert run("step", 3, False, {}) == [("every-step", None), ("third-step", None)]
    assert run("epoch", 1, False, {}) == [("epoch", None)]
    assert run("epoch", 4, False, {}) == [("epoch", None), ("second-epoch", None)]
    assert run("epoch", 1, True, {"loss": 0.5, "acc": 0.1}) == [("plateau", 0.5)]
    assert run("step", 2, True, {"loss": 0.5, "acc": 0.25}) == [("plateau-step", 0.25), ("plateau-step-loss", 0.5)]
    with pytest.raises(ModuleContractError) as err:
        run("epoch", 1, True, {"acc": 0.1, "b": 1.0})
    assert str(err.value) == "ReduceLROnPlateau monitors 'loss', which the module did not log; it logged: acc, b"
    with pytest.raises(ModuleContractError, match="it logged: nothing$"):
        run("epoch", 1, True, {})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert run("step", 1, True, {"loss": 0.5}) == [("plateau-step-loss", 0.5)]  # the next one still steps
    assert [(w.category, str(w.message)) for w in seen] == [
        (RuntimeWarning, "ReduceLROnPlateau conditioned on metric acc which is not available but strict is set to "
                         "`False`. Skipping learning rate update.")]
