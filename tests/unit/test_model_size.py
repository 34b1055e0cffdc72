"""runtime/model_checks.py ``check_model_size``: a built-in model is refused exactly when its float32 weights,
gradients and flat vector (three copies) exceed the machine's memory, counted on the meta device as a
real build counts them, for every built-in model."""
import pytest
import torch

from seafl_dist.models import MODELS, build_model
from seafl_dist.runtime.model_checks import COPIES, check_model_size, physical_memory
from seafl_dist.settings import ConfigError, config_from_dict

SHAPES = {"lenet5": (10, 1, 28), "resnet18": (10, 3, 32), "vgg16": (10, 3, 32), "lstm": (80, 80, 80)}  # lstm: vocab, length
DATA = {"lstm": ["data.name=shakespeare"]}  # a model of character ids is refused on the default digits


def test_every_built_in_model_has_a_shape_here():
    assert set(SHAPES) == set(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_refused_exactly_above_the_memory(name):
    classes, channels, size = SHAPES[name]
    cfg = config_from_dict({}, [f"model.name={name}", "model.width=0.25", *DATA.get(name, [])])
    real = sum(p.numel() for p in build_model(name, classes, channels, width=0.25, image_size=size,
                                              lightning=False).parameters())
    needed = COPIES * 4 * real
    check_model_size(cfg, classes, channels, size, memory=needed)  # fits exactly: accepted
    with pytest.raises(ConfigError) as err:
        check_model_size(cfg, classes, channels, size, memory=needed - 1)
    assert f"{name} at that width has {real:,} parameters" in str(err.value)
    assert "\n" not in str(err.value) and "model.width" in str(err.value)


def test_counting_allocates_nothing_and_keeps_the_generator():
    cfg = config_from_dict({}, ["model.name=vgg16", "model.width=256"])  # about 1e12 parameters: 12 TB
    state = torch.random.get_rng_state()
    with pytest.raises(ConfigError, match="vgg16 at that width"):
        check_model_size(cfg, 10, 3, 32, memory=10**12)
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.skipif(not __import__("os").path.exists("/proc/meminfo"), reason="Linux's /proc/meminfo")
def test_the_machines_memory_is_its_physical_memory():
    total_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    assert abs(physical_memory() - 1024 * total_kb) < 64 * 2**20  # MemTotal leaves out the kernel's own reserve
