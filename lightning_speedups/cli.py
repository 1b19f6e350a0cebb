"""``python -m lightning_speedups``: LightningCLI with the ``speedups:`` section, plus the pack's own commands.

Commands:
    fit / validate / test / predict   LightningCLI, with presets by name and the embedded default
    presets                           list the packaged presets
    tips                              the tip registry (T01-T24) and the status of each
    doctor                            which tips apply to a config, with evidence
    lint PATH...                      static rules for the habits no callback can fix
    bench                             measure each tip on the user's own setup
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Optional

from lightning_speedups.presets import PresetError, list_presets
from lightning_speedups.session import (
    PACKAGE_DIR,
    TRAINER_COMMANDS,
    SpeedupsCLI,
    UsageError,
    resolve_config_args,
)

PACK_COMMANDS = ("presets", "tips", "doctor", "lint", "bench")


def _print_presets() -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lightning_speedups presets", show_lines=False)
    table.add_column("preset", style="bold")
    table.add_column("what it turns on and why")
    for name, description in list_presets().items():
        table.add_row(name, description)
    Console().print(table)
    print("Use: python -m lightning_speedups fit --config NAME.yaml [--config OTHER.yaml ...]")
    return 0


def _print_tips() -> int:
    from lightning_speedups.tips import print_tips

    print_tips()
    return 0


HELP = """usage: python -m lightning_speedups COMMAND [options]

Training commands (LightningCLI; --config takes a file or a packaged preset name):
  fit        train:              python -m lightning_speedups fit --config fast.yaml
  validate   validate a model
  test       test a model
  predict    predict with a model

The pack's commands:
  presets    list the packaged presets
  tips       the tip registry (T01-T24), what implements each and its status
  doctor     inspect a config's model, data and trainer and say which tips apply
  lint       static rules for the code habits no callback can fix: lint PATH...
  bench      time each tip on your own setup and pick the fastest preset

`python -m lightning_speedups COMMAND --help` describes each one.
"""


def _user_error(err: BaseException) -> bool:
    """Whether an exception was raised by the pack's own validation (so it is the user's input)."""
    if not isinstance(err, (ValueError, TypeError, PresetError)):
        return False
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and os.path.abspath(last).startswith(PACKAGE_DIR + os.sep)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m lightning_speedups``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(HELP)
        return 0 if args else 2
    command = args[0]
    try:
        if command == "presets":
            return _print_presets()
        if command == "tips":
            return _print_tips()
        if command == "lint":
            from lightning_speedups.lint import main as lint_main

            return lint_main(args[1:])
        if command == "doctor":
            from lightning_speedups.doctor import main as doctor_main

            return doctor_main(resolve_config_args(args[1:]))
        if command == "bench":
            from lightning_speedups.bench import main as bench_main

            return bench_main(resolve_config_args(args[1:]))
        if command not in TRAINER_COMMANDS and not command.startswith("-"):
            raise UsageError(f"unknown command {command!r}; commands: {', '.join(TRAINER_COMMANDS + PACK_COMMANDS)}")
        resolved = resolve_config_args(args)
        saved_argv = sys.argv
        # LightningCLI reads sys.argv (and its DDP launcher re-runs it): give it the resolved paths.
        sys.argv = [saved_argv[0] if saved_argv else "lightning_speedups", *resolved]
        try:
            SpeedupsCLI(args=None)
        finally:
            sys.argv = saved_argv
        return 0
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse / jsonargparse already printed the message
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        if _user_error(err):
            print(f"error: {err}", file=sys.stderr)
            if os.environ.get("LIGHTNING_SPEEDUPS_TRACEBACK"):
                traceback.print_exc()
            return 2
        raise
