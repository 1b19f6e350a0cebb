"""``python -m lightning_speedups``."""

import sys


def _run() -> int:
    if sys.argv[1:2] == ["lint"]:
        # lint is pure standard library: answer without importing torch and lightning (pre-commit speed)
        from lightning_speedups.lint import main as lint_main

        return lint_main(sys.argv[2:])
    from lightning_speedups.cli import main

    return main()


if __name__ == "__main__":
    sys.exit(_run())
