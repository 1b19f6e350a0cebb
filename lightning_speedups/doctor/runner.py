"""``python -m lightning_speedups doctor``: build a config as ``fit`` would, run a few steps, report.

With ``--verify``, each finding whose fix bench can time is then timed on this setup
(:mod:`lightning_speedups.doctor.verify`): the measured gain is shown beside it, and advice that does
not pay here is demoted with the figure.

The doctor builds the model, data and Trainer of the config with
:func:`lightning_speedups.session.build` (so presets, the ``speedups:`` section and the embedded default
behave exactly as in ``fit``), overrides only what keeps the run short and silent (``max_steps``,
no logger, no checkpoints, no progress bar, two validation batches in the sanity check, one device),
attaches a :class:`~lightning_speedups.advisor.SpeedAdvisor`, runs ``--steps`` training
steps (and three more that time the fixed cost per op), and prints one result per tip T01-T24.

Exit codes: ``0`` no finding at or above ``--fail-on`` (default ``high``: a finding that costs a
large share of step time, such as debugging tools left on, an input-bound run or fp32 on a
tensor-core GPU); ``1`` at least one such finding; ``2`` an error (a config that does not build, a
config path that does not exist, training steps that fail, a ``--verify`` that could not time the
fixes), printed as one message, no traceback
(set ``LIGHTNING_SPEEDUPS_TRACEBACK=1`` to see it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning.pytorch.callbacks import Callback

from lightning_speedups.advisor import LINT_SEVERITY, SpeedAdvisor, run_checks
from lightning_speedups.bench import BenchError
from lightning_speedups.doctor.verify import VerifyOptions, VerifyReport, verify_findings
from lightning_speedups.errors import SettingError
from lightning_speedups.inspection import Facts, Finding, print_report, to_json
from lightning_speedups.inspection.html import write_html
from lightning_speedups.inspection.report import to_dict
from lightning_speedups.session import UsageError, build, resolve_config_args
from lightning_speedups.trainer.namespace import is_lightning

__all__ = [
    "DOCTOR_TRAINER_OVERRIDES",
    "FAIL_ON",
    "LINT_SEVERITY",
    "DoctorResult",
    "diagnose",
    "exit_code_for",
    "main",
    "run_checks",
]

FAIL_ON = ("high", "medium", "low", "never")

#: Trainer settings the doctor overrides to keep its run short and silent (``max_steps`` comes from ``--steps``).
DOCTOR_TRAINER_OVERRIDES: dict[str, Any] = {
    "logger": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 2,
    "limit_val_batches": 2,
    "max_time": None,
}


def exit_code_for(findings: Sequence[Finding], fail_on: str = "high") -> int:
    """``1`` when a finding is at or above ``fail_on`` (``"never"``: never), else ``0``."""
    if fail_on not in FAIL_ON:
        raise SettingError(f"`fail_on` must be one of {', '.join(FAIL_ON)}, got {fail_on!r}.")
    if fail_on == "never":
        return 0
    return 1 if any(f.at_least(fail_on) for f in findings) else 0


@dataclass
class DoctorResult:
    """What :func:`diagnose` found."""

    findings: list[Finding] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    configs: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # the other command-line options
    steps: int = 0
    seconds: float = 0.0
    error: str | None = None  # a config that did not build: no findings then
    run_error: str | None = None  # training steps that failed: static findings only
    verify: VerifyReport | None = None  # what --verify timed (None: not asked)

    def exit_code(self, fail_on: str = "high") -> int:
        if self.error or self.run_error or (self.verify is not None and self.verify.error):
            return 2  # an error, or a --verify that could not time the fixes: no clean bill of health
        return exit_code_for(self.findings, fail_on)


@contextlib.contextmanager
def _silenced() -> Iterator[list[warnings.WarningMessage]]:
    """Lightning's info logs off, warnings recorded (not shown), stray prints to stderr."""
    names = ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_speedups")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("always")
            yield caught
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


def _error_line(err: BaseException) -> str:
    """One line for an exception; for jsonargparse's "Union subtypes" wrapper, the class's own message."""
    import re

    text = str(err).strip()
    if "Does not validate against any of the Union subtypes" in text:
        reasons = [
            line.strip()[2:].strip()
            for line in text.splitlines()
            if line.strip().startswith("- ") and "Expected a <class 'NoneType'>" not in line
        ]
        where = re.search(r"class_path='([^']+)'", text)
        if reasons:
            return (f"{where.group(1).rsplit('.', 1)[-1]}: " if where else "") + reasons[0]
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first}"


def _build(args: Sequence[str], advisor: Any, overrides: dict[str, Any]) -> Any:
    return build(list(args), callbacks=[advisor], trainer_overrides=overrides)


class _StopAfterBatches(Callback):
    """Ends the doctor's run after ``batches`` training batches.

    ``max_steps`` counts optimizer steps: two a batch for a GAN that steps two optimizers in manual
    optimization, fewer than the batches under accumulation. The doctor watches batches.
    """

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.seen = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen += 1
        if self.seen >= self.batches:
            trainer.should_stop = True


def _prepare_trainer(trainer: Any, advisor: Any, batches: int | None = None) -> None:
    """No checkpoint files, no saved config; the advisor last, so it sees every other part's changes.

    With ``batches``, the run ends after that many training batches (not optimizer steps)."""
    # either Lightning package's checkpoint and save-config callbacks (a pytorch_lightning model runs on its own)
    kept = [
        cb for cb in trainer.callbacks if not is_lightning(cb, "Checkpoint", "SaveConfigCallback") and cb is not advisor
    ]
    trainer.callbacks = kept + [advisor]
    if batches is not None:
        trainer.callbacks.append(_StopAfterBatches(batches))
        trainer.fit_loop.epoch_loop.max_steps = -1


def diagnose(
    args: Sequence[str] = (),
    steps: int = 5,
    lint: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    verify: VerifyOptions | bool | None = None,
) -> DoctorResult:
    """Build the config given by ``args`` as ``fit`` would, run ``steps`` training steps, check every tip.

    Args:
        args: CLI arguments as after ``fit`` (``--config`` values may be preset names; other
            ``--model.*`` / ``--data.*`` / ``--trainer.*`` / ``--speedups.*`` options pass through).
        steps: training steps to watch (>= 1).
        lint: lint the source files of the model and data classes.
        clock: the seconds counter of every timing (the run, the data wait); tests pass a fake one.
        verify: time each finding's fix with bench on this setup and demote what does not pay
            (``True``: :class:`~lightning_speedups.doctor.verify.VerifyOptions` defaults). Not done when
            the training steps failed.

    Returns:
        A :class:`DoctorResult`; ``error`` is set (and ``findings`` empty) when the config does not build.

    Raises:
        SystemExit: the config does not parse (the message was printed to stderr).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise SettingError(f"`steps` must be an int >= 1 (e.g. 5), got {steps!r}.")
    t0 = clock()
    try:
        argv = resolve_config_args(list(args))
    except UsageError as err:
        return DoctorResult(error=str(err), steps=steps)
    configs, options = _configs_and_options(argv)
    overrides = {**DOCTOR_TRAINER_OVERRIDES, "max_steps": steps}
    result = DoctorResult(configs=configs, options=options, steps=steps)
    with _silenced():
        new_advisor = functools.partial(SpeedAdvisor, check_steps=steps, print_report=False, lint=lint, clock=clock)
        advisor = new_advisor()
        try:
            run = _build_on_one_device(argv, overrides, advisor, new_advisor)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as err:
            _print_traceback_if_asked()
            result.error = f"the config does not build: {_error_line(err)}"
            result.seconds = clock() - t0
            return result
        _fit_and_check(run, steps, result)
        advisor = run.advisor
    result.findings = advisor.findings
    result.facts = advisor.facts
    if verify and result.run_error is None:
        result.verify = verify_findings(
            result.findings, argv, verify if isinstance(verify, VerifyOptions) else VerifyOptions()
        )
    result.seconds = clock() - t0
    result.facts.seconds = result.seconds
    return result


def _configs_and_options(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``--config`` values of ``argv``, and every other option."""
    configs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--config", "-c")]
    configs += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    options = [
        a
        for i, a in enumerate(argv)
        if a not in ("--config", "-c")
        and not a.startswith("--config=")
        and not (i > 0 and argv[i - 1] in ("--config", "-c"))
    ]
    return configs, options


@dataclass
class _Run:
    """The doctor's built setup: the CLI object (model, data, Trainer) and the advisor attached to it."""

    cli: Any
    trainer: Any
    advisor: Any
    configured: str | None  # the devices the config asked for when more than one ("4", "8 x 2 nodes")


def _build_on_one_device(
    argv: Sequence[str], overrides: dict[str, Any], advisor: Any, new_advisor: Callable[[], Any]
) -> _Run:
    """Build the config; one that trains on several devices or nodes is built again on one device."""
    cli = _build(argv, advisor, overrides)
    configured = None
    trainer = cli.trainer
    if trainer.num_devices > 1 or trainer.num_nodes > 1:
        configured = f"{trainer.num_devices}" + (f" x {trainer.num_nodes} nodes" if trainer.num_nodes > 1 else "")
        advisor = new_advisor()
        cli = _build(argv, advisor, {**overrides, "devices": 1, "num_nodes": 1})
        trainer = cli.trainer
    return _Run(cli=cli, trainer=trainer, advisor=advisor, configured=configured)


def _fit_and_check(run: _Run, steps: int, result: DoctorResult) -> None:
    """Train ``steps`` batches with the advisor watching (and the few after them that time the fixed cost per op),
    then check every tip (statically if the steps failed)."""
    advisor, trainer, cli = run.advisor, run.trainer, run.cli
    advisor.speedups = getattr(getattr(cli, "config_init", None), "speedups", None)
    _prepare_trainer(trainer, advisor, batches=steps + advisor.tail_steps)  # and the batches timing the cost per op
    try:
        trainer.fit(cli.model, datamodule=cli.datamodule)
    except (SystemExit, KeyboardInterrupt):
        raise
    except Exception as err:
        _print_traceback_if_asked()
        result.run_error = f"the training steps failed: {_error_line(err)}"
        advisor.facts.run_error = advisor.facts.run_error or _error_line(err)
        advisor.finish(trainer, cli.model)
    if not advisor.findings:
        advisor.finish(trainer, cli.model)
    facts = advisor.facts
    facts.configured_devices = run.configured
    if run.configured is not None:
        advisor.findings = run_checks(facts)


def _print_traceback_if_asked() -> None:
    if os.environ.get("LIGHTNING_SPEEDUPS_TRACEBACK"):
        traceback.print_exc()


HELP_EPILOG = """\
Any other option is passed to the config as in `fit` (e.g. --model.init_args.channels=16,
--trainer.accelerator=cpu). Exit codes: 0 no finding at or above --fail-on; 1 such findings;
2 an error (config does not build, path does not exist, training steps fail, --verify could not time).

Severities: high = costs a large share of step time (debugging tools left on, input-bound,
fp32 on a tensor-core GPU, nn.DataParallel); medium = a clear, measurable gain; low = small or
hardware-dependent gains. Statuses: finding / ok (checked, fine) / not-checked (cannot run here,
with the reason).
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lightning_speedups doctor",
        description="Build a config as `fit` would, run a few training steps with monitors attached, and say"
        " which of the tips T01-T24 apply, each with its evidence and the exact fix.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="CONFIG",
        help="a config file or a packaged preset name (repeatable; later ones win key by key)."
        " Default: the embedded demo (DigitsCNN on the scikit-learn digits).",
    )
    p.add_argument("--steps", type=int, default=5, help="training steps to watch (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument(
        "--html", metavar="FILE", default=None, help="also write the report as one self-contained HTML file (no JS)"
    )
    p.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="high",
        help="exit 1 when a finding has this severity or higher (default: high)",
    )
    p.add_argument("--no-lint", action="store_true", help="do not lint the source files of the model and data classes")
    p.add_argument("--hide-ok", action="store_true", help="do not list the tips that were checked and found fine")
    v = p.add_argument_group(
        "verify (time each finding's fix on this setup with bench, show the gain, demote what does not pay)"
    )
    v.add_argument(
        "--verify",
        action="store_true",
        help="after the checks, time every fix bench can time (each in its own process, paired repeats, an"
        " A/A noise floor); a fix that is slower or within the noise here drops to low, with the figure",
    )
    v.add_argument("--verify-steps", type=int, default=20, metavar="N", help="timed batches per run (default 20)")
    v.add_argument("--verify-repeats", type=int, default=3, metavar="N", help="paired repeats (default 3)")
    v.add_argument(
        "--verify-budget", type=float, default=None, metavar="SECONDS", help="time for the whole verification"
    )
    v.add_argument(
        "--min-gain",
        type=float,
        default=0.02,
        help="relative gain a fix must bring to count as paying (default 0.02)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lightning_speedups doctor``; returns the exit code."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        ns, rest = parser.parse_known_args(args_in)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if ns.steps < 1:
        print(f"error: --steps must be at least 1, got {ns.steps}", file=sys.stderr)
        return 2
    verify: VerifyOptions | None = None
    if ns.verify:
        if ns.verify_steps < 1 or ns.verify_repeats < 1:
            print(
                f"error: --verify-steps and --verify-repeats must be at least 1, got {ns.verify_steps} and"
                f" {ns.verify_repeats} (--verify-repeats 2 or more gives an interval)",
                file=sys.stderr,
            )
            return 2
        if ns.min_gain < 0:
            print(f"error: --min-gain must be >= 0, got {ns.min_gain}", file=sys.stderr)
            return 2
        verify = VerifyOptions(
            steps=ns.verify_steps,
            repeats=ns.verify_repeats,
            budget=ns.verify_budget,
            min_gain=ns.min_gain,
            progress=not ns.json and sys.stderr.isatty(),
        )
        try:  # bench's own checks of these numbers, before the doctor's work
            verify.bench_options([], []).validate()
        except BenchError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    build_args: list[str] = []
    for c in ns.config:
        build_args += ["--config", c]
    build_args += rest
    try:
        result = diagnose(build_args, steps=ns.steps, lint=not ns.no_lint, verify=verify)
    except SystemExit as exc:  # jsonargparse printed why the config does not parse (or its --help)
        if exc.code in (0, None):
            return 0
        if ns.json:
            bad = DoctorResult(error="the config does not parse (the reason is on stderr)", steps=ns.steps)
            print(to_json(bad, fail_on=ns.fail_on))
        return 2
    except KeyboardInterrupt:
        return 130
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
        if ns.json:
            print(to_json(result, fail_on=ns.fail_on))
        return 2
    code = result.exit_code(ns.fail_on)
    if ns.html:
        write_html(ns.html, to_dict(result, fail_on=ns.fail_on))
    if ns.json:
        print(to_json(result, fail_on=ns.fail_on))
    else:
        print_report(result.findings, result.facts, show_ok=not ns.hide_ok, result=result, fail_on=ns.fail_on)
    if result.run_error:
        print(f"error: {result.run_error}", file=sys.stderr)
    if result.verify is not None and result.verify.error:
        print(f"error: --verify: {result.verify.error}", file=sys.stderr)
    return code
