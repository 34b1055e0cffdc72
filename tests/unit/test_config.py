"""Config: defaults from SPEC, YAML + dotted overrides, errors that name key, value and fix."""
import math
from pathlib import Path

import pytest
import yaml

from seafl_dist.settings import Config, ConfigError, config_from_dict, dump_config, load_config
from seafl_dist.settings.domains import interval

REPO = Path(__file__).resolve().parents[2]


def test_spec_defaults():
    c = Config()
    a = c.algorithm
    assert (a.name, a.buffer_size, a.staleness_limit, a.alpha, a.mu, a.theta) == ("seafl", 10, 10, 3.0, 1.0, 0.8)
    assert a.similarity == "delta_vs_global" and a.server_lr == 1.0 and a.staleness_scaling == "none"
    assert (a.mixing, a.staleness_fn, a.poly_a, a.hinge_a, a.hinge_b) == (0.6, "polynomial", 0.5, 10, 4)
    assert (c.devices.num, c.devices.concurrency) == (100, 20)
    t = c.train
    assert (t.epochs, t.batch_size, t.lr, t.momentum, t.weight_decay) == (5, 32, 0.01, 0.0, 0.0)
    k = c.clock
    assert (k.sec_per_sample, k.download_s, k.upload_s) == (0.001, 0, 0)
    assert (k.idle.distribution, k.idle.s, k.idle.a, k.idle.max, k.idle.resample) == ("zipf", 1.7, 1.0, 60, "per_device")
    d = c.data
    assert (d.name, d.root, d.download, d.partition, d.concentration, d.samples_per_device) == (
        "digits", "data", False, "dirichlet", 0.3, None)
    assert (c.model.name, c.model.width) == ("lenet5", 1.0)
    r = c.run
    assert (r.seed, r.max_aggregations, r.max_time, r.target_accuracy, r.eval_every) == (0, 200, None, None, 1)
    assert (c.runtime.device, c.runtime.backend, c.runtime.timeout_s) == ("auto", "auto", 600)
    w = c.logging.wandb
    assert (w.enabled, w.mode, w.project) == (False, "offline", "seafl")


def test_overrides_parse_yaml_values_and_nested_keys():
    c = config_from_dict({"algorithm": {"name": "seafl2"}},
                         ["algorithm.buffer_size=4", "algorithm.staleness_limit=null", "clock.idle.distribution=pareto",
                          "train.lr=0.1", "run.targets=[0.5,0.6]"])
    assert c.algorithm.buffer_size == 4 and c.algorithm.staleness_limit is None
    assert c.clock.idle.distribution == "pareto" and c.train.lr == 0.1 and c.run.targets == [0.5, 0.6]
    assert c.algorithm.partial_training and c.algorithm.rule == "seafl"


def test_special_cases_of_the_server_loop():
    fedavg = config_from_dict({"algorithm": {"name": "fedavg", "buffer_size": 3}, "devices": {"concurrency": 7}})
    assert (fedavg.algorithm.buffer_size, fedavg.algorithm.staleness_limit) == (7, 0)
    fedasync = config_from_dict({"algorithm": {"name": "fedasync"}})
    assert (fedasync.algorithm.buffer_size, fedasync.algorithm.staleness_limit) == (1, None)
    assert config_from_dict({"algorithm": {"name": "fedbuff"}}).algorithm.staleness_limit is None
    assert config_from_dict({"algorithm": {"name": "seafl"}}).algorithm.staleness_limit == 10


def test_fedbuff_and_fedasync_keep_a_staleness_limit_that_is_given():
    """PLATO's setup: a finite beta given in the file or an override is kept (the server then waits)."""
    fb = config_from_dict({"algorithm": {"name": "fedbuff", "staleness_limit": 10}})
    assert fb.algorithm.staleness_limit == 10
    fa = config_from_dict({"algorithm": {"name": "fedasync", "buffer_size": 5}}, ["algorithm.staleness_limit=3"])
    assert (fa.algorithm.buffer_size, fa.algorithm.staleness_limit) == (1, 3)
    assert config_from_dict({"algorithm": {"name": "fedbuff", "staleness_limit": None}}).algorithm.staleness_limit is None
    # the resolved value survives a dump and reload
    again = config_from_dict(yaml.safe_load(dump_config(fb)))
    assert again.algorithm.staleness_limit == 10 and "unset" not in dump_config(fb)


def test_data_seed_defaults_to_run_seed():
    assert config_from_dict({"run": {"seed": 4}}).data_seed == 4
    assert config_from_dict({"run": {"seed": 4}, "data": {"seed": 9}}).data_seed == 9


@pytest.mark.parametrize("override, key, allowed", [
    ("algorithm.buffer_sise=3", "algorithm.buffer_sise", "known keys"),
    ("algorithm.buffer_size=0", "algorithm.buffer_size", ">= 1"),
    ("algorithm.staleness_limit=-1", "algorithm.staleness_limit", ">= 0"),
    ("algorithm.theta=1.5", "algorithm.theta", "(0, 1]"),
    ("algorithm.theta=0", "algorithm.theta", "(0, 1]"),
    ("algorithm.name=fedprox", "algorithm.name", "seafl, seafl2"),
    ("train.lr=-0.1", "train.lr", "> 0"),
    ("train.epochs=two", "train.epochs", "an integer"),
    ("algorithm.similarity_over=buffers", "algorithm.similarity_over", "parameters, parameters_and_stats"),
    ("data.seed=1.5", "data.seed", "an integer"),
    ("data.seed=abc", "data.seed", "an integer"),
    ("data.seed=-1", "data.seed", "an integer in [0, 4294967295]"),
    ("run.seed=-1", "run.seed", "an integer in [0, 4294967295]"),
    ("devices.concurrency=200", "devices.concurrency", "at most devices.num"),
    ("algorithm.buffer_size=30", "algorithm.buffer_size", "at most devices.concurrency"),
    ("clock.idle.distribution=lognormal", "clock.idle.distribution", "zipf"),
    ("data.download=maybe", "data.download", "true or false"),
    ("bogus=1", "bogus", "known keys"),
    ("algorithm.server_opt.lr=0", "algorithm.server_opt.lr", "a finite number > 0"),  # the server optimizer (issue 40)
    ("algorithm.server_opt.lr=-1", "algorithm.server_opt.lr", "a finite number > 0"),
    ("algorithm.server_opt.beta1=1", "algorithm.server_opt.beta1", "a number in [0, 1)"),
    ("algorithm.server_opt.beta2=-0.1", "algorithm.server_opt.beta2", "a number in [0, 1)"),
    ("algorithm.server_opt.tau=0", "algorithm.server_opt.tau", "a finite number > 0"),
    ("algorithm.server_opt.name=sgd", "algorithm.server_opt.name", "one of none, momentum, adam, yogi, adagrad"),
    ("compression.codec=gzip", "compression.codec", "one of none, fp16, bf16, int8, qsgd, topk"),  # issue 41
    ("compression.fraction=0", "compression.fraction", "a number in (0, 1]"),  # top-k sends at least one entry
    ("compression.fraction=1.5", "compression.fraction", "a number in (0, 1]"),
    ("compression.levels=0", "compression.levels", "an integer in [1, 32767]"),  # QSGD: s >= 1
    ("compression.bucket=0", "compression.bucket", "an integer >= 1"),
])
def test_bad_values_name_key_value_and_allowed(override, key, allowed):
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, [override])
    msg = str(err.value)
    assert f"'{key}'" in msg and allowed in msg
    assert repr(yaml.safe_load(override.split("=", 1)[1])) in msg


@pytest.mark.parametrize("model", ["resnet18", "vgg16"])
def test_batch_norm_models_refuse_batches_of_one(model):
    with pytest.raises(ConfigError, match=r"'train.batch_size' has value 1; allowed: at least 2 for model.name=" + model):
        config_from_dict({}, [f"model.name={model}", "train.batch_size=1"])
    assert config_from_dict({}, ["model.name=lenet5", "train.batch_size=1"]).train.batch_size == 1


def test_override_without_equals_is_an_error():
    with pytest.raises(ConfigError, match="key.sub=value"):
        config_from_dict({}, ["algorithm.buffer_size"])


def test_dump_roundtrips(tmp_path):
    c = config_from_dict({"algorithm": {"name": "fedbuff", "buffer_size": 3}, "name": "x"})
    p = tmp_path / "c.yaml"
    p.write_text(dump_config(c))
    assert load_config(p) == c


def test_every_shipped_config_parses():
    files = sorted((REPO / "configs").rglob("*.yaml"))
    assert files
    for f in files:
        data = yaml.safe_load(f.read_text())
        if "grid" in data or "base" in data:  # sweep files are checked by the sweep tests
            continue
        load_config(f)



def test_the_guard_and_the_divergence_stop_are_left_out_of_config_yaml_at_their_defaults():
    """config.yaml of a run without them is byte for byte what it was before they existed."""
    text = dump_config(Config())
    assert "update_norm_factor" not in text and "stop_on_divergence" not in text
    on = config_from_dict({}, ["algorithm.update_norm_factor=10", "run.stop_on_divergence=true"])
    assert "update_norm_factor: 10.0" in dump_config(on) and "stop_on_divergence: true" in dump_config(on)
    assert config_from_dict(yaml.safe_load(dump_config(on))) == on


def _read(section: str, name: str, value, *extra):
    """The key ``section.name`` read from a config tree (not an override: the value as YAML left it)."""
    return getattr(getattr(config_from_dict({section: {name: value}}, list(extra)), section), name)


def test_a_value_is_read_as_its_keys_type_or_refused_in_one_line():
    """What a YAML file or an override may write for each kind of key."""
    for inf in (math.inf, "inf", "+inf", "Infinity", ".inf", "INF"):  # "no limit" where the key declares one
        assert _read("run", "max_time", inf) is None
    for null in (None, "null", "None", "none"):
        assert _read("run", "max_time", null) is None and _read("devices", "profile", null) is None
    for text in ("inf", ".inf", "Infinity"):  # a name or a path, not a number: "no limit" is a number's
        assert config_from_dict({"logging": {"wandb": {"entity": text}}}).logging.wandb.entity == text
    assert _read("run", "max_aggregations", 3.0) == 3 and type(_read("run", "max_aggregations", 3.0)) is int
    assert _read("train", "lr", 2) == 2.0 and type(_read("train", "lr", 2)) is float
    assert _read("runtime", "precision", 32) == "32" and _read("run", "targets", 0.5) == [0.5]
    assert _read("run", "targets", (0.5, 0.7)) == [0.5, 0.7]
    for section, name, value, allowed in (
            ("run", "max_aggregations", 3.5, "an integer >= 1, or null or .inf (no limit)"),
            ("run", "max_aggregations", True, "an integer >= 1, or null or .inf (no limit)"),
            ("train", "lr", "inf", "a finite number > 0"), ("train", "lr", math.inf, "a finite number > 0"),
            ("train", "lr", True, "a finite number > 0"), ("train", "lr", "0.1", "a finite number > 0"),
            ("runtime", "precision", True, "one of 32, bf16"),
            ("runtime", "precision", math.nan, "one of 32, bf16"),
            ("run", "stop_on_divergence", 1, "true or false"), ("run", "stop_on_divergence", "true", "true or false"),
            ("run", "targets", {"a": 1}, "a list, each item a finite number"),
            ("run", "targets", [0.5, "x"], "a list, each item a finite number"),
            ("run", "max_time", -math.inf, "a number > 0, or null or .inf (no limit)")):
        with pytest.raises(ConfigError) as err:
            _read(section, name, value)
        assert str(err.value) == f"config key '{section}.{name}' has value {value!r}; allowed: {allowed}", value


def test_a_run_stops_somewhere():
    with pytest.raises(ConfigError) as err:
        config_from_dict({}, ["run.max_aggregations=null"])
    assert str(err.value) == ("config key 'run.max_aggregations' has value None; allowed: a number, unless "
                              "run.max_time or run.target_accuracy is set")
    for stop in ("run.max_time=10", "run.target_accuracy=0.5"):
        assert config_from_dict({}, ["run.max_aggregations=null", stop]).run.max_aggregations is None


def test_an_intervals_ends_and_infinities():
    unit, half_open, no_limit, line = interval("(0, 1]"), interval("[0, 1)"), interval("(0, inf]"), \
        interval("(-inf, inf)")
    assert [unit.contains(v) for v in (0.0, 1e-12, 1.0, 1.0 + 1e-12, math.nan, math.inf)] == [
        False, True, True, False, False, False]
    assert [half_open.contains(v) for v in (0.0, -1e-12, 1.0, 1.0 - 1e-12)] == [True, False, False, True]
    assert [no_limit.contains(v) for v in (math.inf, -math.inf, 0.0, 1e300)] == [True, False, False, True]
    assert [line.contains(v) for v in (math.inf, -math.inf, math.nan, -1e300)] == [False, False, False, True]
    assert no_limit.no_limit and not line.no_limit and not unit.no_limit
    closed = interval("[-inf, inf]")  # no key declares it, but the rule holds there too: -inf and NaN never
    assert [closed.contains(v) for v in (-math.inf, math.inf, math.nan, 0.0)] == [False, True, False, True]


def test_a_section_built_in_python_checks_each_value_itself():
    """Built directly (the API, the tests), a section gets no coercion: check_fields refuses what the YAML path's
    _coerce would have refused, in the same words."""
    from seafl_dist.settings import RunConfig, TrainConfig
    for make, message in (
            (lambda: RunConfig(seed=None), "config key 'run.seed' has value None; allowed: an integer in [0, 4294967295]"),
            (lambda: RunConfig(seed=2.0), "config key 'run.seed' has value 2.0; allowed: an integer in [0, 4294967295]"),
            (lambda: RunConfig(stop_on_divergence=1), "config key 'run.stop_on_divergence' has value 1; allowed: true or "
                                                      "false"),
            (lambda: TrainConfig(lr=True), "config key 'train.lr' has value True; allowed: a finite number > 0"),
            (lambda: RunConfig(targets=(0.5,)), "config key 'run.targets' has value (0.5,); allowed: a list, each item a "
                                                "finite number"),
            (lambda: RunConfig(targets=[0.5, None]), "config key 'run.targets' has value [0.5, None]; allowed: a list, "
                                                     "each item a finite number"),
            (lambda: RunConfig(target_metric=""), "config key 'run.target_metric' has value ''; allowed: a non-empty "
                                                  "string"),
            (lambda: RunConfig(target_mode="up"), "config key 'run.target_mode' has value 'up'; allowed: one of max, min")):
        with pytest.raises(ConfigError) as err:
            make()
        assert str(err.value) == message
    assert TrainConfig(lr=1).lr == 1 and RunConfig(targets=[]).targets == []  # an int is a number; no targets at all


@pytest.mark.parametrize("metric, low, high", [(["run.target_metric=accuracy"], "0", "1]"),
                                               (["run.target_metric=loss", "run.target_mode=min"], "0", "inf]")],
                         ids=["accuracy", "loss-min"])
def test_a_target_of_accuracy_or_loss_lies_in_the_metrics_range(metric, low, high):
    """Not declared per key (the range is the metric's): 0 is never reached by a target of either (an
    accuracy of 0 is no goal, nor a loss of exactly 0), 1.0 is a perfect accuracy, and a loss has no top."""
    allowed = f"values of {metric[0]} in ({low}, {high}"
    for key, text, shown in (("run.target_accuracy", "0", "0.0"), ("run.targets", "[0]", "[0]"),
                             ("run.targets", "[0.5, 0]", "[0.5, 0]"), ("run.target_accuracy", "-1.0e-9", "-1e-09")):
        with pytest.raises(ConfigError) as refused:
            config_from_dict({}, [*metric, f"{key}={text}"])
        assert str(refused.value) == f"config key '{key}' has value {shown}; allowed: {allowed}"
    run = config_from_dict({}, [*metric, "run.target_accuracy=1.0", "run.targets=[1.0e-9, 1.0]"]).run
    assert (run.target_accuracy, run.targets) == (1.0, [1e-9, 1.0])
    if high == "1]":
        for key, text in (("run.target_accuracy", "1.000001"), ("run.targets", "[0.5, 1.000001]")):
            with pytest.raises(ConfigError, match=r"allowed: values of run.target_metric=accuracy in \(0, 1\]$"):
                config_from_dict({}, [*metric, f"{key}={text}"])
    else:
        assert config_from_dict({}, [*metric, "run.target_accuracy=1.0e+6"]).run.target_accuracy == 1e6


def test_a_section_given_a_value_is_refused_and_the_domains_no_key_uses_yet_hold():
    """A section written as a value; list domains beside the one key of each kind (targets: numbers, tags:
    strings): a list that may not be empty, an Optional list, a list of import paths."""
    from typing import Optional

    from seafl_dist.settings.domains import ListOf, Text, check_value, plugin_or
    with pytest.raises(ConfigError) as err:
        config_from_dict({"train": 5})
    assert str(err.value) == "config key 'train' has value 5; allowed: a mapping of the keys of section 'train'"
    assert config_from_dict({}, ["logging.wandb.tags=[a, b]"]).logging.wandb.tags == ["a", "b"]
    some = ListOf(Text(), empty=False)
    check_value("k", ["a"], some, list)
    for value, tp, domain, allowed in (
            ([], list, some, "a list, each item a non-empty string (at least one)"),
            ("a", Optional[list], ListOf(Text()), "a list, each item a non-empty string, or null"),
            ([""], Optional[list], ListOf(Text()), "a list, each item a non-empty string, or null"),
            ([math.nan], list, ListOf(interval("(-inf, inf)")), "a list, each item a finite number")):
        with pytest.raises(ConfigError) as err:
            check_value("k", value, domain, tp)
        assert str(err.value) == f"config key 'k' has value {value!r}; allowed: {allowed}"
    with pytest.raises(ConfigError, match="^config key 'model.name' has value 'no_such_module_zz:f'"):
        check_value("model.name", ["no_such_module_zz:f"], ListOf(plugin_or(("lenet5",))), list)



@pytest.mark.parametrize("text, key, want", [
    ("1e-3", "train.lr", 0.001), ("1E-3", "train.lr", 0.001), ("+2.5e-2", "train.lr", 0.025), (".5e1", "train.lr", 5.0),
    ("1e-6", "privacy.delta", 1e-6), ("1e2", "devices.num", 100), ("3E1", "run.max_aggregations", 30)])
def test_a_number_in_scientific_notation_without_a_dot_is_a_number(text, key, want):
    """YAML 1.1 (PyYAML) reads ``1e-3`` as a string: only ``1.0e-3`` is a float there. Both forms are numbers here,
    on the command line and in a config file alike."""
    got = config_from_dict({}, [f"{key}={text}"])
    section, leaf = key.split(".")
    value = getattr(getattr(got, section), leaf)
    assert value == want and type(value) is type(want)
    from_file = config_from_dict(yaml.safe_load(f"{section}: {{{leaf}: {text}}}"))
    assert getattr(getattr(from_file, section), leaf) == want


@pytest.mark.parametrize("text, key", [("1e", "train.lr"), ("e5", "train.lr"), ("1e-3x", "train.lr"),
                                       ("1.5e0", "devices.num"), ("1e-3", "name")])
def test_what_only_looks_like_scientific_notation_is_not_taken_for_a_number(text, key):
    if key == "name":  # a string key keeps the text as written
        assert config_from_dict({}, [f"{key}={text}"]).name == text
        return
    with pytest.raises(ConfigError, match=f"config key '{key}' has value"):
        config_from_dict({}, [f"{key}={text}"])


def _refusal(call) -> str:
    with pytest.raises(ConfigError) as err:
        call()
    assert "\n" not in str(err.value), err.value
    return str(err.value)


def test_a_refusal_of_a_value_from_a_yaml_file_names_the_file_and_one_from_an_override_does_not(tmp_path):
    """issue 63, 7: the file is named when the refused key's value came from it, not when an override set it."""
    path = tmp_path / "mine.yaml"
    path.write_text("algorithm: {theta: 2}\n")
    assert _refusal(lambda: load_config(path)) == (
        f"{path}: config key 'algorithm.theta' has value 2.0; allowed: a number in (0, 1]")
    assert _refusal(lambda: load_config(path, ["algorithm.theta=3"])).startswith(
        "config key 'algorithm.theta' has value 3.0; allowed:")
    path.write_text("trian: {lr: 3}\n")
    assert _refusal(lambda: load_config(path)).startswith(f"{path}: config key 'trian.lr' has value 3")


@pytest.mark.parametrize("key, typo, fix", [("algorithm.name", "fedbuf", "fedbuff"), ("model.name", "lenet", "lenet5")])
def test_an_unknown_built_in_name_gets_a_did_you_mean(key, typo, fix):
    message = _refusal(lambda: config_from_dict({}, [f"{key}={typo}"]))
    assert message.startswith(f"config key '{key}' has value '{typo}'; allowed: did you mean '{fix}'? one of "), message
    assert "did you mean" not in _refusal(lambda: config_from_dict({}, [f"{key}=zzzzzz"]))
