"""CUDA-graph slots (train/graphed.py) on the CPU, where a slot has no stream and no graph and
steps eagerly through the same code: every job gives train_job's bits exactly (the first step of a
job from zeroed momentum buffers, the batches built a chunk of an epoch at a time, trailing
batches, more jobs than slots), what cannot be captured is named, and running out of GPU memory
halves the slots with one line. tests/gpu checks the graphs themselves, byte for byte."""
import pytest
import torch
from torch import nn

from seafl_dist.models import build_model
from seafl_dist.runtime import executor as ex
from seafl_dist.settings import TrainConfig, config_from_dict
from seafl_dist.train import graphed, train_job
from seafl_dist.train.graphed import Slot, graph_blocker, train_slots

from test_batched_train import fake_images, starts_for

SHARDS = [48, 45, 33, 7, 20]  # full batches, a trailing batch of 13, a trailing single sample, tiny, 16 + 4
EPOCHS = [2, 1, 3, 2, 2]
OPTIM = TrainConfig(lr=0.05, momentum=0.9, weight_decay=5e-4)


@pytest.mark.parametrize("name,channels,size,augment,width", [("lenet5", 1, 28, False, 1.0),
                                                               ("resnet18", 3, 32, True, 0.125)])
def test_slots_give_each_job_train_jobs_bits(monkeypatch, name, channels, size, augment, width):
    monkeypatch.setattr(graphed, "PREP_BATCHES", 2)  # epochs prepared in chunks, a chunk cut mid-epoch
    data = fake_images(sum(SHARDS), channels, size)
    model = (name, 10, channels)
    net = build_model(*model, width=width, image_size=size, lightning=False, optim=OPTIM)
    starts = starts_for(model, len(SHARDS), width=width, image_size=size)
    shards = list(torch.arange(sum(SHARDS)).split(SHARDS))
    slots = [Slot(net, data, 16, torch.device("cpu"), "32") for _ in range(3)]  # fewer slots than jobs
    for _ in range(2):  # a second group on the same slots: nothing of the first one is left behind
        got = train_slots(slots, starts, data, shards, epochs=EPOCHS, batch_size=16, seeds=[5, 6, 7, 8, 9],
                          augment=augment)
        for j in range(len(SHARDS)):
            alone = train_job(net, starts[j], data, shards[j], epochs=EPOCHS[j], batch_size=16, seed=5 + j,
                              augment=augment)
            assert torch.equal(got[j], alone), f"job {j} differs from train_job"


def test_on_step_is_called_once_per_optimiser_step():
    data = fake_images(60, 1, 28)
    net = build_model("lenet5", 10, 1, lightning=False, optim=OPTIM)
    slots = [Slot(net, data, 16, torch.device("cpu"), "32") for _ in range(2)]
    steps = []
    train_slots(slots, starts_for(("lenet5", 10, 1), 2), data, [torch.arange(33), torch.arange(33, 60)],
                epochs=[1, 2], batch_size=16, seeds=[0, 1], on_step=lambda: steps.append(1))
    assert len(steps) == 2 + 2 * 2  # 33 samples: 16 + 17 (a trailing 1 is skipped, so 16 + 16); 27: 16 + 11


class OwnLoss(nn.Module):
    pass


@pytest.mark.parametrize("layers,why", [
    ([nn.Flatten(), nn.Linear(64, 10), nn.Dropout(0.2)], "draws random numbers"),
    ([nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16, momentum=None), nn.Linear(16, 10)], "momentum=None"),
])
def test_what_a_graph_cannot_hold_is_named(layers, why):
    from seafl_dist.models.base import FLNet

    class Net(FLNet):
        def __init__(self):
            super().__init__(num_classes=10, in_channels=1, width=1.0, image_size=8, optim=OPTIM)
            self.body = nn.Sequential(*layers)

        def forward(self, x):
            return self.body(x)
    assert why in graph_blocker(Net())
    assert graph_blocker(build_model("resnet18", 10, 3, width=0.125, image_size=32, lightning=False)) is None

    class Nesterov(Net):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    assert "own training_step or configure_optimizers" in graph_blocker(Nesterov())


def test_a_recurrent_model_is_not_captured_until_one_has_run_on_a_gpu():
    lstm = build_model("lstm", 80, 80, image_size=80, lightning=False)  # LEAF's Shakespeare LSTM
    assert graph_blocker(lstm) == ("its layer lstm (LSTM) is recurrent, and a recurrent layer's graph has not been "
                                   "run on a GPU yet")


def test_out_of_memory_is_found_through_a_capture_error():
    try:
        try:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        except torch.cuda.OutOfMemoryError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
    except RuntimeError as err:
        assert ex.out_of_memory(err)
    assert not ex.out_of_memory(RuntimeError("CUDA error: operation not permitted when stream is capturing"))


def digits_trainer(g):
    from seafl_dist.runtime.setup import prepare
    cfg = config_from_dict({"data": {"name": "digits"}, "devices": {"num": 8, "concurrency": 8},
                            "algorithm": {"buffer_size": 8}, "runtime": {"batch_jobs": g, "device": "cpu"},
                            "train": {"epochs": 1}})
    exp = prepare(cfg)
    return exp, ex.GroupTrainer(exp)


def test_graphs_are_for_gpus_only():
    _, trainer = digits_trainer(4)
    assert trainer.graphs is False and trainer.slots is None


def test_out_of_gpu_memory_while_making_slots_halves_them_and_names_the_key(monkeypatch, capsys):
    """The slots' own code on the CPU (graphs forced on), with a GPU that holds two of them."""
    exp, trainer = digits_trainer(8)
    trainer.graphs = True
    made = []

    class SmallGpu(Slot):
        def __init__(self, *a, **kw):
            if len(made) >= 2:
                made.clear()
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            super().__init__(*a, **kw)
            made.append(self)
    monkeypatch.setattr(ex, "Slot", SmallGpu)
    specs = [ex.JobSpec(j, j, 0, 1, float(j)) for j in range(8)]
    start = exp.initial_flat()
    out = trainer.train(specs, [start] * 8)
    assert trainer.limit == 2 and len(trainer.slots) == 2 and len(out) == 8
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("seafl: out of GPU memory training 8 jobs at once; set runtime.batch_jobs=4")
    assert "runtime.batch_jobs=2" in err[-1] and len(err) == 2
    for spec, flat in zip(specs, out):
        assert torch.equal(flat, ex.run_job(exp, trainer.model, spec, start))


def test_evaluation_out_of_gpu_memory_halves_its_batches_once_and_says_so(monkeypatch, capsys):
    """train/local.py evaluate: the batch halves until it fits, stays so for the model, one line each
    time; the figures are those of evaluating at the smaller batch from the start."""
    from seafl_dist.train import local
    data = fake_images(100, 1, 28)
    net = build_model("lenet5", 10, 1, lightning=False)
    flat = starts_for(("lenet5", 10, 1), 1)[0]
    real = local._evaluate

    def small_gpu(module, data, batch_size, *a):
        if batch_size > 25:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(module, data, batch_size, *a)
    monkeypatch.setattr(local, "_evaluate", small_gpu)
    got = local.evaluate(net, flat, data, batch_size=100)
    with torch.no_grad():
        assert got == real(net, data, 25, torch.device("cpu"), "32", torch.channels_last)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["seafl: out of GPU memory evaluating; evaluating in batches of 50 from now on",
                     "seafl: out of GPU memory evaluating; evaluating in batches of 25 from now on"]
    assert local.evaluate(net, flat, data, batch_size=100) == got and capsys.readouterr().err == ""
