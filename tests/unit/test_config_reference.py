"""The configuration reference is generated from the code: docs/configuration.md must be what the
dataclasses' help says today, and every key must have help."""
import dataclasses
from typing import Optional

import pytest
import yaml

from seafl_dist import cli
from seafl_dist.settings import Config, RunConfig, WandbConfig, config_from_dict
from seafl_dist.settings.keys import key, missing_help, section
from seafl_dist.settings.reference import COMMAND, PAGE, keys, main, markdown


def _leaves(tree: dict, prefix: str = "") -> dict:
    out = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            out.update(_leaves(value, prefix + name + "."))
        else:
            out[prefix + name] = value
    return out


def test_page_is_current():
    assert PAGE.is_file(), f"{PAGE} is missing; generate it with `{COMMAND}`"
    assert PAGE.read_text(encoding="utf-8") == markdown(), (
        f"{PAGE.name} is stale (a config key or its help changed); regenerate it with `{COMMAND}` and commit it")


def test_every_key_and_section_has_help():
    assert missing_help(Config) == [], ("config keys without help; declare them as key(default, \"help\") "
                                        "(seafl_dist/settings/keys.py)")
    assert all(k.help and k.type and k.default for k in keys())


def test_missing_help_names_a_key_declared_without_it():
    @dataclasses.dataclass(kw_only=True)
    class Inner:
        good: int = key(1, "has help")
        bare: int = 2

    @dataclasses.dataclass(kw_only=True)
    class Outer:
        inner: Inner = section(Inner, "a section")
        plain: Inner = dataclasses.field(default_factory=Inner)
        blank: Optional[str] = key(None, "  ")

    assert missing_help(Outer) == ["inner.bare", "plain", "plain.bare", "blank"]


def test_the_reference_lists_every_key_of_a_config_once():
    listed = [k.name for k in keys()]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(_leaves(Config().to_dict()))
    page = markdown()
    for name in listed:
        assert f"| `{name}` |" in page


def test_every_listed_key_is_accepted_with_its_default_value():
    default = Config().to_dict()
    resolved = _leaves(default)
    for k in keys():
        value = yaml.safe_dump(resolved[k.name], default_flow_style=True).removesuffix("...\n").strip()
        override = f"{k.name}={value}"
        assert config_from_dict({}, [override]).to_dict() == default, override


def test_defaults_shown_are_the_code_defaults():
    rows = {k.name: k.default for k in keys()}
    assert rows["algorithm.buffer_size"] == "`10`" and rows["clock.sec_per_sample"] == "`0.001`"
    assert rows["data.samples_per_device"] == "`null`" and rows["data.download"] == "`false`"
    assert rows["run.targets"] == "`[0.5, 0.7, 0.9]`" and rows["logging.wandb.tags"] == "`[]`"
    assert "fedbuff" in rows["algorithm.staleness_limit"]  # a default that depends on algorithm.name says so


def test_a_list_default_is_copied_for_every_config():
    a, b = RunConfig(), RunConfig()
    a.targets.append(0.95)
    assert b.targets == [0.5, 0.7, 0.9] and RunConfig().targets == [0.5, 0.7, 0.9]
    assert WandbConfig().tags is not WandbConfig().tags


def test_check_fails_on_a_stale_page_and_names_the_command(tmp_path, capsys):
    page = tmp_path / "docs" / "configuration.md"
    assert main(["--check", "--out", str(page)]) == 1  # missing
    assert main(["--out", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == markdown()
    assert main(["--check", "--out", str(page)]) == 0
    page.write_text(markdown().replace("`algorithm.mu`", "`algorithm.nu`"), encoding="utf-8")
    capsys.readouterr()
    assert main(["--check", "--out", str(page)]) == 1
    assert COMMAND in capsys.readouterr().err


def test_seafl_configs_keys_prints_every_key(capsys):
    assert cli.main(["configs", "--keys"]) == 0
    out = capsys.readouterr().out
    for k in keys():
        assert f"  {k.name} = " in out
    assert ("algorithm.staleness_limit = 10; fedbuff, fedasync, ca2fl, fadas, asyncsgd, fedstaleweight: null; "
            "fedavg: 0  (int or null)") in out


@pytest.mark.parametrize("name,help_word", [("algorithm.mu", "μ"), ("algorithm.hinge_a", "hinge"),
                                            ("clock.idle.s", "Zipf"), ("runtime.placement", "balanced")])
def test_help_names_the_key_in_full(name, help_word):
    """The README's table abbreviated these (`.mu`, `.hinge_a`); the reference gives each its own row."""
    row = next(line for line in markdown().splitlines() if line.startswith(f"| `{name}` |"))
    assert help_word in row
