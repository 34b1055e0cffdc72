"""``algorithm.params`` and ``model.params``: hyperparameters of a user's own rule and model builder, passed as
keyword arguments, checked against the callable's signature when the config loads, recorded in config.yaml
(so a changed one does not resume a run) and varied by sweeps as ``algorithm.params.beta``."""
import importlib

import pytest
import torch
import yaml

from one_line import one_line_message
from seafl_dist.algo import BufferedUpdate, aggregate
from seafl_dist.experiments.sweep import load_sweep
from seafl_dist.runtime.rundir import config_diff, config_tree
from seafl_dist.runtime.setup import prepare
from seafl_dist.settings import ConfigError, config_from_dict, dump_config
from small_runs import SMALL
from user_extensions import SOURCE, write

OWN = SOURCE + '''

calls = []


def weighted(cfg, version, global_flat, updates, base_model, beta=1.0, floor=0.0):
    calls.append({"beta": beta, "floor": floor})
    return uniform_mean(cfg, version, global_flat, updates, base_model)


def needs_depth(num_classes, in_channels, image_size, width, depth, act="relu"):
    calls.append({"depth": depth, "act": act})
    return tiny_mlp(num_classes, in_channels, image_size, width)
'''


@pytest.fixture
def own(tmp_path, monkeypatch):
    """The module's name, importable from tmp_path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return write(tmp_path, OWN, "own_params")


def config(*overrides, tree=None):
    return config_from_dict({"name": "t", **(tree or {})}, [*SMALL, *overrides])


def refused(*overrides, tree=None) -> str:
    with pytest.raises(ConfigError) as err:
        config(*overrides, tree=tree)
    return str(err.value)


def test_params_reach_the_rule_as_keyword_arguments(own):
    alg = config(f"algorithm.name={own}:weighted", "algorithm.params.beta=2", "algorithm.params.floor=0.25").algorithm
    w = torch.zeros(3)
    ups = [BufferedUpdate(device=0, job=0, flat=torch.ones(3), n_samples=3, base_version=0, epochs=1)]
    aggregate(alg, 0, w, ups, lambda v: w)
    assert importlib.import_module(own).calls == [{"beta": 2, "floor": 0.25}]


def test_params_reach_the_model_builder_as_the_run_builds_it(own):
    exp = prepare(config(f"model.name={own}:needs_depth", "model.params.depth=3", f"data.name={own}:bands"))
    calls = importlib.import_module(own).calls
    calls.clear()
    exp.new_model()
    assert calls == [{"depth": 3, "act": "relu"}]


def test_a_dotted_override_sets_one_entry_of_the_files_mapping(own):
    tree = {"algorithm": {"name": f"{own}:weighted", "params": {"beta": 1.5, "floor": 0.5}}}
    assert config("algorithm.params.beta=2", tree=tree).algorithm.params == {"beta": 2, "floor": 0.5}


def test_an_unknown_name_is_refused_naming_the_callables_parameters(own):
    msg = refused(f"algorithm.name={own}:weighted", "algorithm.params.betta=2")
    one_line_message(msg, "config key 'algorithm.params' has value {'betta': 2}", f"{own}:weighted has no "
                     "parameter 'betta'", "takes beta, floor (after cfg, version, global_flat, updates, base_model)")
    msg = refused(f"algorithm.name={own}:weighted", "algorithm.params.version=2")  # one the run passes itself
    one_line_message(msg, "has no parameter 'version'", "takes beta, floor")
    msg = refused(f"model.name={own}:needs_depth", "model.params.depht=3")
    one_line_message(msg, "config key 'model.params'", "has no parameter 'depht'",
                     "takes depth, act (after num_classes, in_channels, image_size, width)")


def test_a_builders_parameter_without_default_must_be_given(own):
    one_line_message(refused(f"model.name={own}:needs_depth"), "config key 'model.params' has value null",
                     "needs depth (no default); give model.params.depth")


@pytest.mark.parametrize("key, name", [("algorithm", "fedbuff"), ("algorithm", "seafl"), ("model", "lenet5")])
def test_params_of_a_built_in_are_refused(key, name):
    msg = refused(f"{key}.name={name}", f"{key}.params.beta=2")
    one_line_message(msg, f"config key '{key}.params' has value {{'beta': 2}}", f"null for {key}.name={name}")
    assert config(f"{key}.name={name}", f"{key}.params={{}}") is not None  # an empty mapping is none


def test_params_are_recorded_and_a_changed_one_does_not_resume(own):
    ours = config(f"algorithm.name={own}:weighted", "algorithm.params.beta=2")
    assert yaml.safe_load(dump_config(ours))["algorithm"]["params"] == {"beta": 2}
    other = config(f"algorithm.name={own}:weighted", "algorithm.params.beta=3")
    assert config_diff(config_tree(ours), config_tree(other)) == ["algorithm.params.beta"]
    assert "params" not in yaml.safe_load(dump_config(config()))["algorithm"]  # older run dirs still compare equal


def test_a_sweep_varies_one_entry(own, tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "algorithm": {"name": f"{own}:weighted", "params": {"floor": 0.5}}, "overrides": SMALL,
        "grid": {"algorithm.params.beta": [1, 4]}}))
    runs = load_sweep(tmp_path / "s.yaml").expand()
    assert [(r.name, r.config.algorithm.params) for r in runs] == [
        ("beta=1,seed=0", {"floor": 0.5, "beta": 1}), ("beta=4,seed=0", {"floor": 0.5, "beta": 4})]
