"""Shared test setup: make tests/ importable (fake_datasets) and keep torch threads predictable."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The property tests' budget (issue 51: all of them together add at most ~3 minutes on the 2-core VM): a fixed
# number of examples each, no per-example deadline (a loaded CI machine is slow, not wrong), derandomized so a run
# is the same on every machine; HYPOTHESIS_PROFILE=deep runs ten times as many locally.
settings.register_profile("seafl", max_examples=40, deadline=None, derandomize=True, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("deep", max_examples=400, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "seafl"))


@pytest.fixture
def one_thread():
    """One torch thread for the test (bit-for-bit comparisons), the caller's count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# With pytest-xdist, the files go to the workers in collection order (one file a worker at a time, --dist
# loadfile), so the heaviest go first and the many quick unit files fill the end: the tiers' order below, not
# xdist's default of the files with the most tests first, which left the few-test, minutes-long torchrun, Slurm and
# README files for last and one worker alone with them at the end.
TIER_ORDER = ("dist", "slurm", "integration", "gpu", "unit")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's option (its --no-loadscope-reorder)
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    def tier(item) -> int:
        parts = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts
        return TIER_ORDER.index(parts[0]) if len(parts) > 1 and parts[0] in TIER_ORDER else len(TIER_ORDER)
    items.sort(key=tier)  # stable: the order inside a tier is pytest's
