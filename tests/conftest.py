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
