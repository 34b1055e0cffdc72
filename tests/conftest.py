"""Shared test setup: make tests/ importable (fake_datasets) and keep torch threads predictable."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
