"""The versions a run dir records (seafl_dist/versions.py) and the comparer's rule over them
(runtime/rundir.py): only the numerics version decides; a missing one is version 1. This code is
numerics version 2 (channels-last CPU training), so every record of version 1 is another version's."""
import re

import pytest

import seafl_dist
from seafl_dist import versions
from seafl_dist.runtime.rundir import numerics_fix, numerics_mismatch
from small_runs import ROOT


def test_the_package_version_is_pyprojects():
    assert re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)[1] == \
        seafl_dist.__version__ == versions.__version__


def test_the_stamp_is_both_versions_now(monkeypatch):
    assert versions.stamp() == {"seafl_version": seafl_dist.__version__, "numerics": seafl_dist.NUMERICS}
    monkeypatch.setattr(versions, "NUMERICS", 7)  # read when called, so a bump (or a test) is seen everywhere
    assert versions.stamp()["numerics"] == 7


def test_the_bump_is_real():
    """Numerics version 2 is a new package version too, so a refusal's "use seafl X" names another one."""
    assert versions.NUMERICS == 2 and versions.UNRECORDED == 1
    assert versions.__version__ == "0.2.0"
    assert "2  seafl 0.2.0" in versions.__doc__


SAME = [{"numerics": 2}, {"numerics": 2, "seafl_version": "0.9.0"}]
BEFORE = [None, {}, {"seafl_version": "0.1.0"}, {"numerics": 1}, {"numerics": 1, "seafl_version": "0.1.0"}]
OTHER = [*BEFORE, {"numerics": 3, "seafl_version": "0.3.0"}, {"numerics": "2"}, {"numerics": None}]


@pytest.mark.parametrize("record", SAME)
def test_records_of_numerics_version_2_compare_equal(record):
    assert numerics_mismatch(record) is None


@pytest.mark.parametrize("record", OTHER)
def test_any_other_numerics_value_is_a_mismatch_naming_both_versions(record):
    why = numerics_mismatch(record)
    by = f"seafl {record['seafl_version']}" if record and "seafl_version" in record else \
        "a seafl that recorded no version"
    had = (record or {}).get("numerics", 1)
    assert why == (f"by {by} with numerics version {had}, and this seafl 0.2.0 trains numerics version 2 "
                   f"(other bits)")
    fix = numerics_fix(record, "--overwrite")
    named = f"seafl {record['seafl_version']}" if record and "seafl_version" in record else "the seafl that wrote it"
    assert fix.startswith(f"use {named} for it")
    assert fix.endswith("or --overwrite to run it afresh with this one")


@pytest.mark.parametrize("record", BEFORE)
def test_every_record_written_before_the_bump_is_version_1(record):
    assert versions.numerics_of(record) == 1
    assert "with numerics version 1, and this seafl 0.2.0 trains numerics version 2" in numerics_mismatch(record)
