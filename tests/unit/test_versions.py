"""The versions a run dir records (seafl_dist/versions.py) and the comparer's rule over them
(runtime/rundir.py): only the numerics version decides; a missing one is version 1."""
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


SAME = [None, {}, {"seafl_version": "0.1.0"}, {"numerics": 1}, {"numerics": 1, "seafl_version": "0.9.0"}]
OTHER = [{"numerics": 2}, {"numerics": 2, "seafl_version": "0.2.0"}, {"numerics": "1"}, {"numerics": None}]


@pytest.mark.parametrize("record", SAME)
def test_records_of_numerics_version_1_or_none_compare_equal_to_version_1(record):
    assert versions.NUMERICS == 1 and numerics_mismatch(record) is None


@pytest.mark.parametrize("record", OTHER)
def test_any_other_numerics_value_is_a_mismatch_naming_both_versions(record):
    why = numerics_mismatch(record)
    by = f"seafl {record['seafl_version']}" if "seafl_version" in record else "a seafl that recorded no version"
    assert why == (f"by {by} with numerics version {record['numerics']}, and this seafl {versions.__version__} "
                   f"trains numerics version 1 (other bits)")
    fix = numerics_fix(record, "--overwrite")
    assert fix.startswith(f"use {'seafl 0.2.0' if 'seafl_version' in record else 'the seafl that wrote it'} for it")
    assert fix.endswith("or --overwrite to run it afresh with this one")


@pytest.mark.parametrize("record", SAME)
def test_after_a_bump_every_old_record_is_a_mismatch(monkeypatch, record):
    monkeypatch.setattr(versions, "NUMERICS", 2)
    assert "with numerics version 1, and this seafl" in numerics_mismatch(record)
