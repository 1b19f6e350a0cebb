"""``python -m lightning_speedups``: LightningCLI with the ``speedups:`` section, plus the pack's own commands.

Commands:
    fit / validate / test / predict   LightningCLI, with presets by name and the embedded default
    presets                           list the packaged presets
    tips                              the tip registry (T01-T24): what implements each, its expected gain
    doctor                            which tips apply to a config, with evidence
    lint PATH...                      static rules for the habits no callback can fix
    bench                             measure each tip on the user's own setup
"""

from __future__ import annotations

import difflib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Optional

from lightning_speedups.commands import PACK_COMMANDS, PACKAGE_DIR, TRAINER_COMMANDS

# Nothing at module level imports torch or Lightning: `--help`, `presets`, `tips` and `lint` answer
# without them (the console script enters here); the commands that train import them when they run.


def _print_presets() -> int:
    from rich.console import Console
    from rich.table import Table

    from lightning_speedups.presets import list_presets

    table = Table(title="lightning_speedups presets", show_lines=False)
    table.add_column("preset", style="bold")
    table.add_column("what it turns on and why")
    for name, description in list_presets().items():
        table.add_row(name, description)
    Console().print(table)
    print("Use: python -m lightning_speedups fit --config NAME.yaml [--config OTHER.yaml ...]")
    return 0


def _print_tips() -> int:
    from lightning_speedups.catalog import print_tips

    try:
        print_tips()
        sys.stdout.flush()
    except BrokenPipeError:  # `tips | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


#: ``COMMAND --help`` of the commands that take no options
COMMAND_HELP = {
    "presets": "usage: python -m lightning_speedups presets\n\nList the packaged presets, each with what it turns on and why.",
    "tips": "usage: python -m lightning_speedups tips\n\nThe tip registry (T01-T24): what implements each, the speedups:"
    " keys that turn it on, and how bench times it.",
}


HELP = """usage: python -m lightning_speedups COMMAND [options]

Training commands (LightningCLI; --config takes a file or a packaged preset name):
  fit        train:              python -m lightning_speedups fit --config fast.yaml
  validate   validate a model
  test       test a model
  predict    predict with a model

The pack's commands:
  presets    list the packaged presets
  tips       the tip registry (T01-T24): what implements each and its expected gain
  doctor     inspect a config's model, data and trainer and say which tips apply
  lint       static rules for the code habits no callback can fix: lint PATH...
  bench      time each tip on your own setup and pick the fastest preset

`python -m lightning_speedups COMMAND --help` describes each one.
"""


def _raised_by_pack(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback is the pack's own code (not the user's, not a library's)."""
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
    if command in COMMAND_HELP and any(a in ("-h", "--help") for a in args[1:]):
        print(COMMAND_HELP[command])
        return 0
    if command in COMMAND_HELP and args[1:]:
        print(
            f"error: {command} takes no arguments, got {' '.join(args[1:])}\n{COMMAND_HELP[command]}", file=sys.stderr
        )
        return 2
    if command == "presets":
        return _print_presets()
    if command == "tips":
        return _print_tips()
    if command == "lint":
        from lightning_speedups.lint import main as lint_main

        return lint_main(args[1:])
    if command not in TRAINER_COMMANDS + PACK_COMMANDS and not command.startswith("-"):
        close = difflib.get_close_matches(command, TRAINER_COMMANDS + PACK_COMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(
            f"error: unknown command {command!r}{hint}; commands: {', '.join(TRAINER_COMMANDS + PACK_COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    from lightning_speedups.session import UsageError, resolve_config_args

    try:
        if command == "doctor" and "--" in args:  # the doctor on the user's own command
            from lightning_speedups.doctor.script import main as script_doctor

            cut = args.index("--")
            return script_doctor(args[1:cut], args[cut + 1 :])
        if command == "bench" and "--" in args:  # bench on the user's own command
            from lightning_speedups.bench.script import main as script_bench

            cut = args.index("--")
            return script_bench(args[1:cut], args[cut + 1 :])
        if command == "doctor":
            from lightning_speedups.doctor import main as doctor_main

            return doctor_main(resolve_config_args(args[1:]))
        if command == "bench":
            from lightning_speedups.bench import main as bench_main

            return bench_main(resolve_config_args(args[1:]))
        return _train(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse / jsonargparse already printed the message
        if exc.code == 1 and isinstance(exc.__context__, KeyboardInterrupt):
            return 130  # Lightning's graceful shutdown after Ctrl+C exits 1
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        from lightning_speedups.errors import bad_input, bug_report, refuses_the_run

        bad = bad_input(err)
        text = _instantiation_error(err) or (str(bad) if bad is not None else None)
        if text is None and refuses_the_run(err):  # Lightning refusing the user's setup: their input, said by Lightning
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if text is None:
            if _raised_by_pack(err):  # not the user's input, not the user's code: ours
                print(bug_report(err), file=sys.stderr)
                traceback.print_exc()
                return 1
            raise  # the user's own code (a model's training_step) or a library: its traceback as Python shows it
        print(f"error: {text}", file=sys.stderr)
        if os.environ.get("LIGHTNING_SPEEDUPS_TRACEBACK"):
            traceback.print_exc()
        return 2


def _train(args: list[str]) -> int:
    import signal

    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    resolved = resolve_config_args(args)
    saved_argv = sys.argv
    # Lightning's graceful shutdown after Ctrl+C ignores SIGINT from then on: restored afterwards
    saved_sigint = signal.getsignal(signal.SIGINT)
    # LightningCLI reads sys.argv (and its DDP launcher re-runs it): give it the resolved paths.
    sys.argv = [saved_argv[0] if saved_argv else "lightning_speedups", *resolved]
    try:
        SpeedupsCLI(args=None)
    finally:
        sys.argv = saved_argv
        if saved_sigint is not None:
            signal.signal(signal.SIGINT, saved_sigint)
    return 0


def _instantiation_error(err: BaseException) -> Optional[str]:
    """One line for a user's class that raised while the config was instantiated (jsonargparse wraps it
    in "Does not validate against any of the Union subtypes"): its type, message, file and line."""
    import re

    message = str(err)
    if not isinstance(err, ValueError) or "Does not validate against any of the Union subtypes" not in message:
        return None
    from lightning_speedups.arguments import user_frame

    given = re.search(r"class_path='([^']+)'", message)
    who = f"{given.group(1)}(...)" if given else "a class of the config"
    found = user_frame(err)
    if found is None:
        # jsonargparse before 4.51 keeps the class's own error only in its message ("Errors:" then "- ..."
        # per subtype), not in the exception chain: its text, without the file and line
        reasons = [
            line.strip()[2:]
            for line in message.split("Errors:", 1)[-1].splitlines()
            if line.strip().startswith("- ") and "Expected a <class 'NoneType'>" not in line
        ]
        if not reasons:
            return None
        return (
            f"{who} raised an error while the config was built: {reasons[0]}; fix it in that class"
            " (LIGHTNING_SPEEDUPS_TRACEBACK=1 shows the whole traceback)"
        )
    exc, filename, line, func = found
    return (
        f"{who} raised {type(exc).__name__}: {exc} (at {filename}:{line}, in {func}); fix it there"
        " (LIGHTNING_SPEEDUPS_TRACEBACK=1 shows the whole traceback)"
    )
