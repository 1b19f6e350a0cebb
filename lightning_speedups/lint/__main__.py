"""``python -m lightning_speedups.lint PATH...``."""

import sys

from lightning_speedups.lint.command import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m lightning_speedups.lint"))
