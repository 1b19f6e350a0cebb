"""``python -m lightning_speedups``."""

import sys

from lightning_speedups.cli import main

if __name__ == "__main__":
    sys.exit(main())
