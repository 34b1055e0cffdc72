"""Every key's declared domain, read from the settings (issue 30): values outside it are refused by `seafl run`
and `seafl run --dry-run` in one line naming key, value and what is allowed, exit 2, no run dir; its edge
values are accepted. The keys are enumerated from the dataclasses, so a key added later is covered by its
declaration alone; a numeric key without a declared range fails here."""
import dataclasses
import math
import subprocess
import sys
import typing

import pytest
import yaml

from one_line import one_line_message
from seafl_dist.cli import main as seafl_main
from seafl_dist.settings import Config, load_config
from seafl_dist.settings.domains import Interval, ListOf, OneOf, Text, base_type, domain_of, optional
from small_runs import QUICKSTART

# A bad value must be refused whatever else the config says, but an edge value may need a companion
# to satisfy a rule between keys (devices.num = 1 needs M = K = 1; null needs FEMNIST's writers).
COMPANIONS = {"devices.num": ["devices.concurrency=1", "algorithm.buffer_size=1", "data.name=femnist",
                              "data.partition=natural"],
              "devices.concurrency": ["algorithm.buffer_size=1"],
              "run.max_aggregations": ["run.max_time=100"],
              "data.partition": ["data.name=femnist"],
              "algorithm.server_opt.pseudo_gradient": ["algorithm.server_opt.name=momentum"],  # delta: an optimizer
              "algorithm.server_opt.delay_adaptive": ["algorithm.server_opt.name=momentum"],  # true: a step to scale
              "data.device_test": ["data.name=femnist", "data.partition=natural"],  # writers' own test data
              "data.partition_by": ["data.name=fake_datasets:random_images"],  # a key: for a user's data (any callable)
              "run.device_eval_every": ["data.device_holdout=0.2"],  # evaluation needs held-out data
              "compression.error_feedback": ["compression.codec=topk", "runtime.placement=device"],  # true: both
              "privacy.enabled": ["algorithm.name=fedbuff", "privacy.noise_multiplier=1"],  # true: a rule and a z
              "privacy.adaptive_clip.enabled": ["algorithm.name=fedbuff", "privacy.enabled=true",  # true: central
                                                "privacy.noise_multiplier=1",  # DP to adapt, with σ_b > z
                                                "privacy.adaptive_clip.count_std=2"],
              "data.files": ["data.name=hf:x"], "data.columns": ["data.name=hf:x"],  # a mapping: for hf:<path>
              "data.splits": ["data.name=hf:x"], "data.partition_args": ["data.partition=flwr:IidPartitioner"],
              "algorithm.params": ["algorithm.name=user_extensions:mean_of_any"],  # a mapping: for a rule of one's
              "model.params": ["model.name=user_extensions:mlp_of_any"],  # own, a builder of one's own
              "threats.attack": ["threats.malicious=0.2"], "threats.fast": ["threats.malicious=0.2"]}  # a device to do it
# a value that only pairs with another key's (a model and a dataset of one kind of input: settings/core.py)
VALUE_COMPANIONS = {("data.name", "shakespeare"): ["model.name=lstm"], ("model.name", "lstm"): ["data.name=shakespeare"],
                    ("algorithm.name", "fedcompass"): ["devices.concurrency=30"],  # M = N: the quickstart's 30
                    ("algorithm.name", "scaffold"): ["train.momentum=0"],  # plain SGD (the quickstart's has 0.9)
                    ("algorithm.fedcompass.q_max", "1"): ["algorithm.fedcompass.q_min=1"],
                    **{("algorithm.defense.name", est): ["algorithm.name=fedbuff"]  # an estimator: a mean of deltas
                       for est in ("median", "trimmed_mean", "centered_clipping")},
                    ("algorithm.defense.name", "bulyan"): ["algorithm.name=fedbuff", "algorithm.buffer_size=7"],  # 4f+3
                    ("algorithm.defense.name", "fltrust"): ["algorithm.name=fedbuff",  # a mean of deltas, and
                                                            "algorithm.defense.server_samples=10"],  # its root set
                    ("algorithm.defense.name", "zenopp"): ["algorithm.defense.server_samples=10"]}  # its validation set
TINY = ["run.max_aggregations=1", "logging.progress=none"]  # were a bad value taken, the run would be short


def declared(cls=Config, prefix=""):
    """(dotted key, type, domain) of every key of a run config, nested sections included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from declared(tp, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, tp, domain_of(f, tp)


KEYS = list(declared())


def number(x: float, kind) -> str:
    """A number as a YAML override writes it (YAML 1.1 reads 1e-06 as a string: spell it out)."""
    if kind is int:
        return str(int(x))
    return repr(float(x)) if "e" not in repr(float(x)) else f"{x:.12f}"


def outside(iv: Interval, kind) -> list[str]:
    step = 1 if kind is int else 1e-6
    out = [".nan", "-.inf"] + ([] if iv.no_limit else [".inf"])
    if math.isfinite(iv.low):
        out += [number(iv.low - step, kind)] + ([number(iv.low, kind)] if iv.low_open else [])
    if math.isfinite(iv.high):
        out += [number(iv.high + step, kind)] + ([number(iv.high, kind)] if iv.high_open else [])
    return out + (["1.5"] if kind is int else [])


def edges(iv: Interval, kind) -> list[str]:
    step = 1 if kind is int else 1e-6
    out = [] if not math.isfinite(iv.low) else [number(iv.low + step if iv.low_open else iv.low, kind)]
    if math.isfinite(iv.high):
        out.append(number(iv.high - step if iv.high_open else iv.high, kind))
    return out + ([".inf"] if iv.no_limit else [])


NOT_FINITE = [".nan", ".inf", "-.inf"]


def bad_values(tp, domain) -> list[str]:
    kind, wrong = base_type(tp), ["{a: 1}", "[[1]]"]
    nulls = [] if optional(tp) else ["null"]
    if kind is dict:  # a mapping: anything else is refused
        return ["abc", "1", "true", "[1]", ""] + nulls
    if kind in (int, float):
        return outside(domain, kind) + ["abc", "true", "[1]", ""] + wrong + nulls
    if kind is bool:
        return ["maybe", "2", "[]", ""] + wrong + nulls
    if kind is str:  # YAML's .nan and ±.inf are numbers, never the words "nan" and "inf"
        return ["", "true", "[a]", *NOT_FINITE] + (["zzz_not_allowed"] if isinstance(domain, OneOf) else []) + \
            wrong + nulls
    item = domain.item
    items = outside(item, float) + ["abc", "true"] if isinstance(item, Interval) else ["1", "true", "''", *NOT_FINITE]
    return [f"[{i}]" for i in items] + ["{a: 1}", "''"] + ([] if domain.empty else ["[]"]) + nulls


def edge_values(tp, domain) -> list[str]:
    kind = base_type(tp)
    nulls = ["null"] if optional(tp) else []
    if kind is dict:
        return ["{a: 1}"] + nulls
    if kind in (int, float):
        return edges(domain, kind) + nulls
    if kind is bool:
        return ["true", "false"] + nulls
    if kind is str:
        return (list(domain.choices) if isinstance(domain, OneOf) else ["x"]) + nulls
    item = domain.item
    items = edges(item, float) if isinstance(item, Interval) else ["a"]
    return [f"[{', '.join(items)}]"] + (["[]"] if domain.empty else []) + nulls


def test_every_key_declares_its_domain():
    for key, tp, domain in KEYS:
        kind = base_type(tp)
        if kind in (int, float):
            assert isinstance(domain, Interval), f"{key}: a number declares its range: key(1, 'help', '[1, inf)')"
            assert not domain.no_limit or optional(tp), f"{key}: .inf reads as null, so the key must be Optional"
        elif kind is list:
            assert isinstance(domain, ListOf), f"{key}: a list key declares its items, e.g. list_of('(0, 1]')"
        elif kind is str:
            assert isinstance(domain, (OneOf, Text)), key
        elif kind is dict:  # a mapping handed on: what reads it checks its entries
            assert domain is None, key
        else:
            assert kind is bool and domain is None, key


@pytest.mark.parametrize("key, tp, domain", KEYS, ids=[k for k, _, _ in KEYS])
def test_values_outside_a_keys_domain_are_refused_in_one_line_before_anything_is_written(key, tp, domain, capsys,
                                                                                          tmp_path):
    out = tmp_path / "run"
    for text in bad_values(tp, domain):
        value = yaml.safe_load(text) if text else ""
        for dry in ([], ["--dry-run"]):
            code = seafl_main(["run", str(QUICKSTART), *TINY, f"{key}={text}", "--out", str(out), *dry])
            err = capsys.readouterr().err
            assert code == 2, f"{key}={text!r} {dry}: exit {code}; {err}"
            line = one_line_message(err.strip(), "seafl: error: ", f"config key '{key}'", "allowed")
            assert repr(value) in line or repr([value]) in line, line
            assert not out.exists(), f"{key}={text!r} {dry}: the run dir was made"


@pytest.mark.parametrize("key, tp, domain", KEYS, ids=[k for k, _, _ in KEYS])
def test_a_keys_declared_edge_values_are_accepted(key, tp, domain):
    for text in edge_values(tp, domain):
        cfg = load_config(QUICKSTART, [*COMPANIONS.get(key, []), *VALUE_COMPANIONS.get((key, text), []),
                                       f"{key}={text}"]).to_dict()
        for part in key.split("."):
            cfg = cfg[part]
        value, kind = yaml.safe_load(text), base_type(tp)
        if value is None or value == math.inf:  # null, or .inf where the key allows "no limit"
            expected = None
        elif kind is str:  # a choice written as a number (runtime.precision=32) is its text
            expected = str(value)
        else:
            expected = value
        assert cfg == expected, f"{key}={text}: read as {cfg!r}"


def test_the_command_itself_refuses_with_one_line_and_exit_2(tmp_path):
    """The installed `seafl` end to end, as a user meets it (NaN, and -inf on a key where inf means no limit)."""
    for bad, dry in (("train.lr=.nan", []), ("run.max_time=-.inf", ["--dry-run"])):
        out = tmp_path / "run"
        proc = subprocess.run([sys.executable, "-m", "seafl_dist", "run", "quickstart", bad, "--out", str(out), *dry],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and not out.exists(), proc.stderr
        key = bad.split("=")[0]
        one_line_message(proc.stderr.strip(), f"seafl: error: config key '{key}' has value", "allowed: a")
