"""Shared test setup: make tests/ importable (fake_datasets) and keep torch threads predictable."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def one_thread():
    """One torch thread for the test (bit-for-bit comparisons), the caller's count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
