"""The conformance table: one job of each LightningModule form and hook, trained three ways, agrees.

(1) the plain loop (``train.loop: plain``, train/loop.py), (2) ``train.loop: lightning``
(train/lightning_loop.py), (3) a bare ``lightning.Trainer.fit`` written here with none of our
training code, on the same batches (the job's StepPlan, drawn here), the same start weights and the
same random stream. On a CPU with one thread the weights must be equal bit for bit, no tolerance;
the hooks each module saw (names, order, epoch, batch index, global step), the learning rate and the
callback metrics at every epoch's end must be equal; and what the two loops record of ``self.log``
for the update must be equal.
"""
import lightning as L
import pytest
import torch

import lightning_modules as lm
from seafl_dist.data import load_dataset
from seafl_dist.train import flatten, load_flat, train_job
from seafl_dist.train.local import job_random_state
from seafl_dist.train.plan import StepPlan

EPOCHS, BATCH, SEED, TORCH_SEED = 3, 16, 11, 12
IDX = torch.arange(200, 290)  # 90 samples: 5 batches of 16 and one of 10 per epoch
CLIP = {"form_optimizer": (0.5, "norm"), "form_list": (0.01, "value"), "every_hook": (0.3, None)}
CASES = sorted(set(lm.MODULES) - set(lm.LIGHTNING_ONLY))  # the plain loop trains each of them


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: bits compared on one thread


def start_weights(name):
    torch.manual_seed(0)
    return lm.build(name), flatten(lm.build(name))


class Epochs:
    """A sized iterable giving the next epoch's list of batches each time it is iterated (lazily: Lightning
    calls ``iter`` once more to check that it can)."""

    def __init__(self, epochs):
        self.epochs, self.n = iter(epochs), len(epochs[0])

    def __len__(self):
        return self.n

    def __iter__(self):
        yield from next(self.epochs)


def bare_fit(name, digits, clip):
    module, start = start_weights(name)
    load_flat(module, start)
    module.train()
    plan = StepPlan(IDX, EPOCHS, BATCH, SEED)
    batches = [digits.batch(idx) for _, idx, _ in plan.batches()]
    per = len(plan.bounds)
    epochs = [batches[e * per:(e + 1) * per] for e in range(EPOCHS)]
    trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=clip[0],
                        gradient_clip_algorithm=clip[1])
    with job_random_state(TORCH_SEED, torch.device("cpu")):
        trainer.fit(module, train_dataloaders=Epochs(epochs))
    return flatten(module), module


def ours(name, digits, clip, loop):
    module, start = start_weights(name)
    logged = {}
    flat = train_job(module, start, digits, IDX, epochs=EPOCHS, batch_size=BATCH, seed=SEED, torch_seed=TORCH_SEED,
                     loop=loop, clip=clip, logged=logged)
    return flat, module, logged


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")
@pytest.mark.parametrize("name", CASES)
def test_the_plain_loop_the_lightning_loop_and_a_bare_trainer_agree(name, digits):
    clip = CLIP.get(name, (None, None))
    bare, bare_module = bare_fit(name, digits, clip)
    plain, plain_module, plain_logged = ours(name, digits, clip, "plain")
    light, light_module, light_logged = ours(name, digits, clip, "lightning")
    start = start_weights(name)[1]
    assert not torch.equal(bare, start), "the job trained nothing"
    assert torch.equal(plain, bare), f"{name}: plain loop weights differ from Trainer.fit's"
    assert torch.equal(light, bare), f"{name}: train.loop: lightning weights differ from Trainer.fit's"
    assert plain_module.calls == bare_module.calls == light_module.calls
    assert plain_module.seen == bare_module.seen == light_module.seen
    assert len(bare_module.seen) == EPOCHS
    assert plain_logged == light_logged


def test_the_table_covers_the_cases_the_issue_names():
    for must in ("form_optimizer", "form_list", "form_tuple", "form_lists", "form_list_and_scheduler", "form_dict",
                 "form_dict_scheduler", "form_dict_scheduler_dict", "form_list_of_dicts", "form_tuple_of_dicts",
                 "form_outer_monitor", "onecycle_per_step", "plateau_on_step_value", "step_returns_dict",
                 "step_returns_none", "step_without_batch_idx", "every_hook", "clip_by_own_hook",
                 "warmup_optimizer_step", "log_reduce_fx", "adam", "custom_scheduler", "zero_grad_to_zeros",
                 "torchmetrics_logged", "skip_rest_epoch_scheduler"):
        assert must in CASES
    assert {"norm", "value"} <= {c[1] or "norm" for c in CLIP.values()}


@pytest.mark.parametrize("loop", ["plain", "lightning"])
@pytest.mark.parametrize("model", [("lenet5", 1.0), ("resnet18", 0.25)], ids=["lenet5", "resnet18"])
def test_a_built_in_model_trains_to_a_bare_loops_bits(model, loop, digits):
    """The built-in models override no hook: both loops give what a hand-written loop gives (forward,
    zero_grad, backward, SGD step over the job's batches, the model and images channels-last as
    numerics version 2 lays them out on a CPU), so the two loops' traces are the same bytes.
    Lightning's Trainer keeps the layout train_job gave the module (it moves it with ``.to``)."""
    from seafl_dist.models import build_model
    from seafl_dist.settings import TrainConfig
    name, width = model
    optim = TrainConfig(lr=0.05, momentum=0.9, weight_decay=1e-4)
    torch.manual_seed(0)
    net = build_model(name, 10, 1, width=width, image_size=28, optim=optim, lightning=loop == "lightning")
    start = flatten(net)
    got = train_job(net, start, digits, IDX, epochs=2, batch_size=BATCH, seed=SEED, loop=loop)
    net = build_model(name, 10, 1, width=width, image_size=28, optim=optim, lightning=False)
    net.to(memory_format=torch.channels_last)
    load_flat(net, start)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    for _, idx, _ in StepPlan(IDX, 2, BATCH, SEED).batches():
        x, y = digits.batch(idx)
        loss = torch.nn.functional.cross_entropy(net(x.contiguous(memory_format=torch.channels_last)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.equal(got, flatten(net))
