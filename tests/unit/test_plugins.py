"""Import paths as names (seafl_dist.settings.plugins): every malformed path or callable is one ConfigError line
naming the key and value, at config load (import, attribute, signature) or when the run is prepared
(what the callable returns), before any job trains."""
import numpy as np
import pytest
import torch

from one_line import one_error_line, one_line_message
from seafl_dist.algo import AggregationResult, BufferedUpdate, aggregate
from seafl_dist.settings import ConfigError, config_from_dict
from seafl_dist.data import ArrayDataset, clear_cache, load_dataset
from seafl_dist.data.samples import SampleDataset
from seafl_dist.cli import main as seafl_main
from seafl_dist.runtime.setup import prepare
from seafl_dist.train import flatten, train_job

from small_runs import QUICKSTART, SMALL
from user_extensions import EXTENDED, write

BAD = '''
import numpy as np
import torch
from torch import nn
import lightning as L

def a_list(num_classes, in_channels, image_size, width):
    return [nn.Linear(2, 2)]

def wrong_logits(num_classes, in_channels, image_size, width):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * image_size ** 2, num_classes + 1))

class NoOptimiser(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 4)
    def forward(self, x):
        return self.lin(x.flatten(1))
    def training_step(self, batch, i):
        return self.lin(batch[0].flatten(1)).sum()

def lightning_without_optimiser(num_classes, in_channels, image_size, width):
    return NoOptimiser()

def a_number(root, train):
    return 5

class Items(torch.utils.data.Dataset):
    classes = ["a", "b", "c", "d"]
    def __init__(self, train, odd=None):
        self.train, self.odd = train, odd
    def __len__(self):
        return 6
    def __getitem__(self, i):
        if self.odd == "shape" and i == 3:
            return torch.zeros(1, 8, 7), 0
        if self.odd == "label" and i == 4 and not self.train:
            return torch.zeros(1, 8, 8, dtype=torch.uint8), 9
        if self.odd == "last_label" and i == 4 and not self.train:
            return torch.zeros(1, 8, 8, dtype=torch.uint8), 4
        if self.odd == "negative" and i == 4:
            return torch.zeros(1, 8, 8, dtype=torch.uint8), -1
        if self.odd == "wide":
            return torch.full((8, 6), i, dtype=torch.uint8), i % 4
        return torch.full((8, 8), i, dtype=torch.uint8), i % 4

def mixed_shapes(root, train):
    return Items(train, "shape")

def test_label_out_of_range(root, train):
    return Items(train, "label")

def good_items(root, train):
    return Items(train)

def test_label_at_the_bound(root, train):
    return Items(train, "last_label")

def items_negative_label(root, train):
    return Items(train, "negative")

def wide_items(root, train):
    return Items(train, "wide")

def wide_pair(root, train):
    return torch.arange(6 * 48, dtype=torch.float32).reshape(6, 1, 8, 6), torch.arange(6) % 4

def negative_label(root, train):
    return torch.zeros(5, 8, 8), torch.tensor([0, 1, -2, 1, 0])

def overlapping(labels, num_devices, seed):
    return [np.arange(0, 10)] + [np.arange(9 + 5 * k, 14 + 5 * k) for k in range(num_devices - 1)]

def one_empty(labels, num_devices, seed):
    return [np.arange(5 * k, 5 * k + 5) if k != 2 else [] for k in range(num_devices)]

def too_few(labels, num_devices, seed):
    return [np.arange(5)]

def out_of_range(labels, num_devices, seed):
    return [np.arange(5 * k, 5 * k + 5) for k in range(num_devices - 1)] + [np.array([100, len(labels) + 3])]

def one_past_the_end(labels, num_devices, seed):
    return [np.arange(5 * k, 5 * k + 5) for k in range(num_devices - 1)] + [np.array([100, len(labels)])]

def repeated(labels, num_devices, seed):
    return [np.array([5 * k, 5 * k + 1, 5 * k]) for k in range(num_devices)]

def rule_returning_none(cfg, version, global_flat, updates, base_model):
    return None

def rule_of_wrong_size(cfg, version, global_flat, updates, base_model):
    return AggregationResult(torch.zeros(3), [{"weight": 1.0} for _ in updates])

from seafl_dist.algo import AggregationResult

def takes_two(a, b):
    return None
'''
BROKEN = "raise RuntimeError('this module does not import')\n"


@pytest.fixture
def mods(tmp_path, monkeypatch):
    """(good, bad, broken): module names written to tmp_path, which is put on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    clear_cache()
    yield write(tmp_path), write(tmp_path, BAD, "bad_ext"), write(tmp_path, BROKEN, "broken_ext")
    clear_cache()


def config(*overrides):
    return config_from_dict({"name": "t"}, [*SMALL, *overrides])


def one_line_error(excinfo, key, value):
    return one_line_message(str(excinfo.value), f"config key '{key}' has value {value!r}")


@pytest.mark.parametrize("key, attr, fragment", [
    ("model.name", "no_such_module_q:f", "module 'no_such_module_q' not found"),
    ("model.name", "{good}:missing", "has no attribute 'missing'"),
    ("model.name", "{good}:NUMBER", "is a int, not callable"),
    ("data.name", "{good}:tiny_mlp", "cannot be called with the 2 arguments (root, train)"),
    ("data.partition", "{bad}:takes_two", "cannot be called with the 3 arguments (labels, num_devices, seed)"),
    ("algorithm.name", "{good}:bands", "cannot be called with the 5 arguments"),
    ("algorithm.name", "{good}:1st", "not of the form package.module:callable"),
    ("data.name", "{broken}:f", "importing broken_ext"),
])
def test_a_bad_import_path_is_refused_when_the_config_loads(mods, key, attr, fragment):
    good, bad, broken = mods
    value = attr.format(good=good, bad=bad, broken=broken)
    with pytest.raises(ConfigError) as err:
        config(f"{key}={value}")
    msg = one_line_error(err, key, value)
    assert fragment in msg and "expected package.module:callable, called as f(" in msg


def test_a_built_in_name_that_is_neither_lists_both_forms():
    with pytest.raises(ConfigError, match=r"one of lenet5, resnet18, vgg16, lstm, or package.module:callable"):
        config("model.name=lenet")


@pytest.mark.parametrize("key, attr, fragment", [
    ("model.name", "a_list", "it returned list, not a torch.nn.Module"),
    ("model.name", "wrong_logits", "not logits of shape (2, 4)"),
    ("model.name", "lightning_without_optimiser", "without configure_optimizers"),
    ("data.name", "a_number", "it returned int for the train split"),
    ("data.name", "mixed_shapes", "item 3 of its train split is an image of shape (1, 8, 7)"),
    ("data.name", "test_label_out_of_range", "item 4 of its test split has label 9, outside the 4 classes"),
    ("data.name", "test_label_at_the_bound", "item 4 of its test split has label 4, outside the 4 classes [0, 4)"),
    ("data.name", "negative_label", "item 2 of its train split has label -2 < 0"),
    ("data.name", "items_negative_label", "item 4 of its train split has label -1; expected an int >= 0"),
    ("data.partition", "overlapping", "index 9 is in shards 0 and 1"),
    ("data.partition", "one_empty", "shard 2 is empty"),
    ("data.partition", "too_few", "it returned 1 shards for devices.num=10"),
    ("data.partition", "out_of_range", "shard 9 holds index 403, outside the 400 training samples"),
    ("data.partition", "one_past_the_end", "shard 9 holds index 400, outside the 400 training samples"),
    ("data.partition", "repeated", "shard 0 holds index 0 twice"),
])
def test_what_a_callable_returns_is_checked_before_training(mods, key, attr, fragment):
    good, bad, _ = mods
    value = f"{bad}:{attr}"
    extra = {"model.name": [f"data.name={good}:bands"], "data.name": [f"model.name={good}:tiny_mlp"],
             "data.partition": [f"data.name={good}:bands"]}[key]
    cfg = config(f"{key}={value}", *extra)  # loads: the callable exists and takes the right arguments
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert fragment in one_line_error(err, key, value)


def test_overlapping_shards_are_allowed_when_declared(mods):
    good, bad, _ = mods
    exp = prepare(config(f"data.name={good}:bands", f"data.partition={bad}:overlapping", "data.shards_overlap=true"))
    assert np.intersect1d(exp.shards[0], exp.shards[1]).tolist() == [9]


def test_a_rules_result_is_checked_before_it_touches_the_model(mods):
    good, bad, _ = mods
    w = torch.zeros(5)
    ups = [BufferedUpdate(device=0, job=0, flat=torch.ones(5), n_samples=3, base_version=0, epochs=1)]
    for attr, fragment in [("rule_returning_none", "it returned NoneType"),
                           ("rule_of_wrong_size", "not a 1-D float tensor of 5 entries")]:
        alg = config(f"algorithm.name={bad}:{attr}").algorithm
        with pytest.raises(ConfigError) as err:
            aggregate(alg, 0, w, ups, lambda v: w)
        assert fragment in one_line_error(err, "algorithm.name", f"{bad}:{attr}")
    alg = config(f"algorithm.name={good}:uniform_mean", "algorithm.buffer_size=3").algorithm
    assert (alg.buffer_size, alg.staleness_limit, alg.partial_training) == (3, 10, False)
    result = aggregate(alg, 2, w, ups + [BufferedUpdate(device=1, job=1, flat=torch.full((5,), 3.0), n_samples=1,
                                                        base_version=1, epochs=1)], lambda v: w)
    assert torch.equal(result.new_global, torch.full((5,), 2.0))
    assert [(i["weight"], i["staleness"], i["rejected"]) for i in result.info] == [(0.5, 2, False), (0.5, 1, False)]


def test_a_custom_rule_can_use_partial_training(mods):
    good, _, _ = mods
    assert config(f"algorithm.name={good}:uniform_mean", "algorithm.partial=true").algorithm.partial_training
    with pytest.raises(ConfigError, match="algorithm.partial"):
        config("algorithm.name=seafl2", "algorithm.partial=false")


def test_a_user_dataset_is_held_like_the_built_ins(mods):
    good, bad, _ = mods
    floats = load_dataset(f"{good}:bands", root="data", train=True)
    assert isinstance(floats, ArrayDataset) and floats.images.dtype == torch.float32
    assert (len(floats), floats.num_classes, floats.in_channels, floats.image_size) == (400, 4, 1, 8)
    x, y = floats.batch(torch.tensor([0, 1]))
    assert torch.equal(x, floats.images[:2]) and torch.equal(y, floats.labels[:2])  # floats used as they are
    items = load_dataset(f"{bad}:good_items", root="data", train=True)
    assert items.images.dtype == torch.uint8 and items.images.shape == (6, 1, 8, 8)
    assert items.classes == ["a", "b", "c", "d"] and items.labels.tolist() == [0, 1, 2, 3, 0, 1]
    assert torch.allclose(items.batch(torch.tensor([5]))[0], torch.full((1, 1, 8, 8), 5 / 255))


def test_images_that_are_not_square_are_held_as_samples_not_on_the_image_fast_path(mods):
    _, bad, _ = mods
    items = load_dataset(f"{bad}:wide_items", root="data", train=True)  # (image (8, 6), label) items
    assert isinstance(items, SampleDataset) and items.labels.tolist() == [0, 1, 2, 3, 0, 1]
    x, y = items.batch(torch.tensor([5, 2]))
    assert torch.equal(x, torch.stack([torch.full((8, 6), 5), torch.full((8, 6), 2)]).to(torch.uint8))
    assert y.tolist() == [1, 2]
    pair = load_dataset(f"{bad}:wide_pair", root="data", train=True)  # (N, 1, 8, 6) and labels
    assert isinstance(pair, SampleDataset)
    assert torch.equal(pair.batch(torch.tensor([1]))[0], torch.arange(48, 96, dtype=torch.float32).reshape(1, 1, 8, 6))


def test_a_plain_module_is_wrapped_and_trains(mods):
    good, _, _ = mods
    exp = prepare(config(*EXTENDED(good)))
    model = exp.new_model()
    assert hasattr(model, "configure_optimizers") and model.train_config.lr == exp.cfg.train.lr
    start = exp.initial_flat()
    assert torch.equal(start, exp.initial_flat())  # seeded from the run's init stream
    trained = train_job(model, start, exp.train, exp.shard(0), epochs=1, batch_size=8, seed=0)
    assert trained.shape == start.shape and not torch.equal(trained, start)
    assert flatten(model).shape == start.shape
    assert [len(s) for s in exp.shards] == [40] * 10


@pytest.mark.parametrize("attr, fragment", [("out_of_range", "shard 9 holds index 403, outside the 400"),
                                            ("repeated", "shard 0 holds index 0 twice")])
def test_a_bad_partition_ends_in_one_line_naming_its_file_before_a_run_dir_is_made(mods, attr, fragment, tmp_path,
                                                                                   capsys):
    """seafl run with and without --dry-run, as a user meets it (issue 30)."""
    good, bad, _ = mods
    out = tmp_path / "run"
    for dry in ([], ["--dry-run"]):
        code = seafl_main(["run", str(QUICKSTART), *SMALL, f"data.name={good}:bands", f"model.name={good}:tiny_mlp",
                           f"data.partition={bad}:{attr}",
                           "--out", str(out), *dry])
        err = capsys.readouterr().err
        assert code == 2 and not out.exists(), err
        one_error_line(err, f"config key 'data.partition' has value '{bad}:{attr}'", fragment,
                       f"in what {attr} in {tmp_path / (bad + '.py')} returned")


def _beta_line(name, beta=10):
    """What a user's rule that did not choose β is told at start-up (issue 63, 4): the oracle, written out."""
    return (f"seafl: algorithm.name={name} runs under β = {beta} (algorithm.staleness_limit not given: SEAFL's "
            f"default; the server waits rather than let an update grow staler than {beta}); set "
            f"algorithm.staleness_limit to choose, null for none (β = ∞, as fedbuff)")


def test_a_users_rule_that_does_not_choose_beta_is_told_the_one_it_runs_under(mods, tmp_path, monkeypatch, capsys):
    """At the start of a run (the run itself stopped before it trains) and of a sweep (once a rule, not once a
    run); nothing when the config gives β, even SEAFL's 10, nor for a built-in rule."""
    good, _, _ = mods
    rule = f"{good}:uniform_mean"
    assert config(f"algorithm.name={rule}").algorithm.limit_line() == _beta_line(rule)
    for given in ("algorithm.staleness_limit=10", "algorithm.staleness_limit=null"):
        assert config(f"algorithm.name={rule}", given).algorithm.limit_line() is None
    assert config("algorithm.name=seafl").algorithm.limit_line() is None

    def before_training(cfg, out, **_):
        raise ConfigError("stopped before training")
    monkeypatch.setattr("seafl_dist.runtime.inprocess.run_inprocess", before_training)
    for given, told in [([], True), (["algorithm.staleness_limit=10"], False)]:
        seafl_main(["run", str(QUICKSTART), *SMALL, f"algorithm.name={rule}", *given, "--out", str(tmp_path / "r")])
        lines = capsys.readouterr().err.splitlines()
        assert (_beta_line(rule) in lines) is told and sum("runs under β" in ln for ln in lines) == int(told), lines

    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"base: {QUICKSTART}\nseeds: [0, 1]\npoints:\n  - {{algorithm.name: fedbuff}}\n"
                          f"  - {{label: mine, algorithm.name: '{rule}'}}\n"
                          f"  - {{label: mine-beta, algorithm.name: '{rule}', algorithm.staleness_limit: 3}}\n")
    assert seafl_main(["sweep", str(sweep_file), "--list"]) == 0
    assert capsys.readouterr().err.splitlines().count(_beta_line(rule)) == 1
