"""``python -m seafl_dist ...`` is the ``seafl`` command."""
from seafl_dist.cli import entry

if __name__ == "__main__":
    entry()
