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
