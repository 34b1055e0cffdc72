"""``python -m seafl_dist ...`` is the ``seafl`` command."""
import sys

from seafl_dist.cli import main

if __name__ == "__main__":
    sys.exit(main())
