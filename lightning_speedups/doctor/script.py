"""The doctor on the user's own command: ``python -m lightning_speedups doctor -- python train.py ARGS``.

The command runs as the user runs it (a script, ``python -m pkg``, a library's console command), in its own
process, with ``doctor`` added to ``LIGHTNING_SPEEDUPS``. Lightning's callback entry point
(:func:`callbacks_factory`, registered for both Lightning packages beside the preset one) puts a
:class:`ScriptDoctor` into the first Trainer the command builds (``--trainer N``: the N-th): it watches that
fit's first ``--steps`` training steps with the same monitors and checks as ``doctor --config`` (and the three
batches after them that time the fixed cost per op), writes the report and its JSON, and ends that fit early
(``--full``: lets it run on). The command's own output, errors and
exit code stay its own; the report comes after it.

``LIGHTNING_SPEEDUPS=doctor`` (or ``fast+doctor``) in a run the user launches themselves (a cluster job) does the
same without the ``doctor`` command: the fit runs to its end, and the report is printed and written to
``lightning_speedups_doctor.json`` when the watched steps are over (global rank zero).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from lightning_speedups.advisor import SpeedAdvisor
from lightning_speedups.bench.script import check_command
from lightning_speedups.doctor.runner import FAIL_ON, DoctorResult
from lightning_speedups.environment import DOCTOR_OPTIONS_VAR, DOCTOR_TOKEN, ENV_VAR, asks_for_doctor
from lightning_speedups.inspection import print_report, to_json
from lightning_speedups.inspection.html import write_html

__all__ = ["ScriptDoctor", "WatchOptions", "main", "run_command"]


@dataclass
class WatchOptions:
    """What the watched process is asked (the defaults: ``LIGHTNING_SPEEDUPS=doctor`` without the command)."""

    steps: int = 20
    full: bool = True  # the user's own run goes to its end; the doctor command stops the watched fit early
    trainer: int = 1  # which Trainer the command builds is watched (1: the first)
    out: Optional[str] = None  # the folder the doctor command reads the report from (None: print it here)
    fail_on: str = "high"
    show_ok: bool = True
    lint: bool = True


#: where the report goes without the doctor command
DEFAULT_JSON = "lightning_speedups_doctor.json"


class ScriptDoctor(SpeedAdvisor):
    """A :class:`~lightning_speedups.advisor.SpeedAdvisor` for a Trainer the pack did not build: after the watched
    steps it writes the report (and ends the fit unless ``full``); a fit that ends or fails before writes what it
    has."""

    part = "doctor"

    def __init__(self, options: WatchOptions, index: int = 1) -> None:
        super().__init__(check_steps=options.steps, print_report=False, lint=options.lint, show_ok=options.show_ok)
        self.options = options
        self.index = index
        self.written = False

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if not self.written and self.watch_done:  # the watched steps, then the few that time the fixed cost per op
            self.write(trainer, pl_module)
            if not self.options.full:
                trainer.should_stop = True

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_fit_end(trainer, pl_module)
        if not self.written:
            self.write(trainer, pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)
        if not self.written:
            self.write(trainer, pl_module, error=self.facts.run_error)

    def write(self, trainer: Any, pl_module: Any, error: Optional[str] = None) -> None:
        """The report of what was watched, in the doctor command's folder (or printed, and beside the run)."""
        self.written = True
        findings = self.finish(trainer, pl_module)
        if not getattr(trainer, "is_global_zero", True):
            return
        result = DoctorResult(findings=findings, facts=self.facts, steps=self._batches, run_error=error)
        doc = json.loads(to_json(result, fail_on=self.options.fail_on))
        doc["watched"] = {
            "trainer": self.index,
            "steps": self._batches,
            "stopped_early": not self.options.full and error is None,
            "command": list(sys.argv),
            # under a launcher (torchrun, Lightning's own): every rank watched its steps, global rank zero reports
            "processes": int(getattr(trainer, "world_size", 1) or 1),
        }
        text = io.StringIO()
        from rich.console import Console

        print_report(
            findings,
            self.facts,
            show_ok=self.options.show_ok,
            result=result,
            fail_on=self.options.fail_on,
            console=Console(file=text, width=110, color_system=None),
        )
        if self.options.out is None:
            print(text.getvalue(), end="")
            Path(DEFAULT_JSON).write_text(json.dumps(doc, indent=2, default=str) + "\n")
            return
        Path(self.options.out, "report.txt").write_text(text.getvalue())
        Path(self.options.out, "report.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------------------- the doctor command
def _with_doctor(value: Optional[str]) -> str:
    if not value or not value.strip():
        return DOCTOR_TOKEN
    return value if asks_for_doctor(value) else f"{value.strip()}+{DOCTOR_TOKEN}"


def run_command(
    command: Sequence[str],
    options: WatchOptions,
    json_path: Optional[str] = None,
    html_path: Optional[str] = None,
    verify: Optional[Any] = None,
) -> int:
    """Run ``command`` with the doctor watching its ``options.trainer``-th Trainer; print the report after the
    command's own output; return the command's exit code when it failed, else the doctor's. ``verify`` (a
    :class:`~lightning_speedups.bench.script.ScriptBenchOptions`): then time the findings' fixes on the command."""
    why = check_command(command)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="lightning_speedups_doctor_") as out:
        env = dict(os.environ)
        env[ENV_VAR] = _with_doctor(env.get(ENV_VAR))
        env[DOCTOR_OPTIONS_VAR] = json.dumps({**asdict(options), "out": out})
        process = subprocess.Popen(list(command), env=env)
        try:
            code = process.wait()
        except KeyboardInterrupt:  # the command got the Ctrl+C too (one process group): it writes what it measured
            process.wait()
            _report(command, Path(out), 0, options, json_path, html_path)
            return 130
        return _report(command, Path(out), code, options, json_path, html_path, verify)


def _report(
    command: Sequence[str],
    out: Path,
    code: int,
    options: WatchOptions,
    json_path: Optional[str],
    html_path: Optional[str],
    verify: Optional[Any] = None,
) -> int:
    built = int((out / "trainers").read_text()) if (out / "trainers").is_file() else 0
    report = out / "report.json"
    shown = " ".join(command)
    if not report.is_file():
        if built < options.trainer:
            what = "built no Trainer" if built == 0 else f"built {built} Trainer(s), not a {_nth(options.trainer)}"
        else:
            what = f"ended before its {_nth(options.trainer)} Trainer's first training step"
        print(f"error: `{shown}` {what} (exit code {code}): nothing to diagnose", file=sys.stderr)
        return code or 2
    doc = json.loads(report.read_text())
    print((out / "report.txt").read_text(), end="")
    watched = doc.get("watched", {})
    others = f" of the {built} it built (--trainer N picks another)" if built > 1 else ""
    early = ", its fit ended early (--full runs it on)" if watched.get("stopped_early") else ""
    ranks = watched.get("processes", 1)
    where = f" on global rank 0 of its {ranks} processes" if ranks > 1 else ""
    print(
        f"doctor: watched the {_nth(options.trainer)} Trainer{others}{where}, {watched.get('steps', 0)} training"
        f" steps{early}",
        file=sys.stderr,
    )
    if verify is not None and code == 0:
        from lightning_speedups.doctor.script_verify import verify_command

        verify.trainer = options.trainer
        for line in verify_command(list(command), doc, verify, fail_on=options.fail_on):
            print(line)
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if html_path:
        write_html(html_path, doc)
    if "KeyboardInterrupt" in str(doc.get("error") or ""):  # Ctrl+C (Lightning's graceful shutdown exits 1)
        return 130
    if code != 0:
        print(f"error: `{shown}` exited with code {code} (its own output is above)", file=sys.stderr)
        return code
    return int(doc.get("exit_code", 0))


def _nth(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _script_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lightning_speedups doctor [options] -- COMMAND",
        description="Run your own training command (python train.py ..., python -m pkg ..., a library's console"
        " command) as you run it, watch the first training steps of the first Trainer it builds, and say which of"
        " the tips T01-T24 apply, each with its evidence and the exact fix.",
    )
    p.add_argument("--steps", type=int, default=20, help="training steps to watch (default 20)")
    p.add_argument("--full", action="store_true", help="let the watched fit run to its end (default: it ends early)")
    p.add_argument("--trainer", type=int, default=1, metavar="N", help="watch the N-th Trainer the command builds")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the report as JSON to FILE")
    p.add_argument("--html", metavar="FILE", default=None, help="also write it as one self-contained HTML file")
    p.add_argument("--fail-on", choices=FAIL_ON, default="high", help="exit 1 at a finding this severe (default high)")
    p.add_argument("--no-lint", action="store_true", help="do not lint the source files of the model and data")
    p.add_argument("--hide-ok", action="store_true", help="do not list the tips that were checked and found fine")
    p.add_argument("--verify", action="store_true", help="then time each finding's fix on the command (as bench --)")
    p.add_argument(
        "--verify-steps", type=int, default=20, metavar="N", help="timed steps per --verify run (default 20)"
    )
    p.add_argument("--verify-repeats", type=int, default=3, metavar="N", help="paired repeats of --verify (default 3)")
    return p


def main(options: Sequence[str], command: Sequence[str]) -> int:
    """``doctor [options] -- COMMAND``: the doctor on the user's own command (:mod:`lightning_speedups.doctor.script`)."""
    try:
        ns = _script_parser().parse_args(list(options))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    for name, value in (
        ("--steps", ns.steps),
        ("--trainer", ns.trainer),
        ("--verify-steps", ns.verify_steps),
        ("--verify-repeats", ns.verify_repeats),
    ):
        if value < 1:
            print(f"error: {name} must be at least 1, got {value}", file=sys.stderr)
            return 2
    watch = WatchOptions(
        steps=ns.steps,
        full=ns.full,
        trainer=ns.trainer,
        fail_on=ns.fail_on,
        show_ok=not ns.hide_ok,
        lint=not ns.no_lint,
    )
    verify = None
    if ns.verify:
        from lightning_speedups.bench.script import ScriptBenchOptions

        verify = ScriptBenchOptions(steps=ns.verify_steps, repeats=ns.verify_repeats)
    return run_command(command, watch, json_path=ns.json, html_path=ns.html, verify=verify)
