"""``python -m lightning_speedups bench [options] -- COMMAND``: time the presets on the user's own training command.

The command runs as the user runs it (``python train.py ARGS``, ``python -m pkg``, a library's console command),
once per candidate and repeat, each time in a fresh process: plain Lightning (``LIGHTNING_SPEEDUPS`` unset), plain
again (the A/A pair that measures this machine's noise), and every preset that applies to what the command built
(``LIGHTNING_SPEEDUPS=fast``, ``cnn`` on a model with convolutions, ``transformer`` on one with attention,
``memory``). Inside each run, the pack's timer (:mod:`lightning_speedups.bench.script_watch`) caps the first fit at
``--warmup`` + ``--steps`` batches and times the steps (``--target METRIC=VALUE``: runs it until the metric the
module logs reaches the value). Candidates are interleaved over ``--repeats``, each repeat in another order, and
compared with plain Lightning of the same repeat (paired ratios, a 95% interval, the A/A noise floor, the loss
sanity check: the rule bench's pick follows everywhere). The winner is printed as the ``LIGHTNING_SPEEDUPS`` value
to use; ``--write-preset FILE`` writes the YAML that variable takes.

Example::

    python -m lightning_speedups bench -- python train.py --epochs 10
    python -m lightning_speedups bench --write-preset fastest.yaml -- python train.py
    LIGHTNING_SPEEDUPS=./fastest.yaml python train.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from lightning_speedups.bench.options import BenchError
from lightning_speedups.bench.preset_choice import TARGET_PRESETS
from lightning_speedups.bench.stats import (
    VariantSummary,
    compare,
    compare_target,
    noise_floor,
    pick_verdict,
    pooled_spread,
    seed_blocks,
    summarize,
)
from lightning_speedups.bench.variants import PRESETS_NOT_TIMED
from lightning_speedups.environment import BENCH_OPTIONS_VAR, DOCTOR_OPTIONS_VAR, ENV_VAR, asks_for_doctor

__all__ = [
    "Candidate",
    "CommandBench",
    "ScriptBenchOptions",
    "applicable_presets",
    "check_command",
    "main",
    "run_command_once",
    "write_env_preset",
]

#: the JSON report's schema version (``--json``)
SCHEMA_VERSION = 1
#: the presets a throughput bench on a command tries, and what each needs of the model it built
SCRIPT_PRESETS = {"fast": None, "cnn": "convolutions", "transformer": "attention", "memory": None}
#: presets a bench on a command never runs, and why (the debug and converge reasons are bench's own)
_STRATEGY = "a Trainer the command built keeps its strategy (LIGHTNING_SPEEDUPS cannot change it): set it in the script"
SCRIPT_PRESETS_NOT_RUN = {
    "ddp": _STRATEGY,
    "fsdp": _STRATEGY,
    "debug": PRESETS_NOT_TIMED["debug"],
    "converge": PRESETS_NOT_TIMED["converge"],
    "baseline": "plain Lightning is always run (LIGHTNING_SPEEDUPS unset)",
}
#: with --target: bench's time-to-target presets, likeliest winner first
SCRIPT_TARGET_PRESETS = TARGET_PRESETS
PLAIN = "plain"
PLAIN_AA = "plain (A/A)"


@dataclass
class ScriptBenchOptions:
    """What ``bench -- COMMAND`` was asked (see ``bench --help`` with a ``--``)."""

    steps: int = 20
    warmup: int = 5
    repeats: int = 3
    presets: Optional[list[str]] = None
    trainer: int = 1
    min_gain: float = 0.02
    loss_tolerance: float = 0.25
    timeout: float = 900.0
    budget: Optional[float] = None
    target: Optional[str] = None
    target_max_time: Optional[float] = None
    memory_step: bool = True
    grace: float = 5.0
    #: the doctor's watch options for a candidate whose value names ``doctor`` (its cost measured as a candidate)
    doctor: Optional[dict[str, Any]] = None


@dataclass
class Candidate:
    """One way to run the command: ``value`` is its ``LIGHTNING_SPEEDUPS`` (``None``: unset, plain Lightning)."""

    name: str
    value: Optional[str]
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: Optional[VariantSummary] = None
    pickable: bool = False
    why: str = ""

    @property
    def plain(self) -> bool:
        return self.value is None


# ------------------------------------------------------------------------------------------ one run
def check_command(command: Sequence[str]) -> Optional[str]:
    """Why ``command`` cannot run (one line), before any work; ``None`` when it can."""
    if not command:
        return "nothing after `--`: give the command you train with, e.g. `doctor -- python train.py`"
    program = command[0]
    if shutil.which(program) is None and not Path(program).is_file():
        return f"`{program}` is not a program on PATH nor a file (the command after `--`)"
    name = Path(program).name
    if name.startswith("python") and len(command) > 1 and not command[1].startswith("-"):
        script = command[1]
        if not Path(script).is_file():
            return f"no script {script!r} (in {os.getcwd()}): the command after `--` is run as you would run it"
    return None


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except OSError:  # gone already
            return
        try:
            process.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def run_command_once(
    command: Sequence[str], value: Optional[str], watch: Mapping[str, Any], folder: Path, timeout: float, grace: float
) -> dict[str, Any]:
    """Run ``command`` once with ``LIGHTNING_SPEEDUPS=value`` (unset for ``None``) and the timer's ``watch``
    options; its output goes to ``folder/log``. The command is stopped once the timed fit has written its figures
    (after ``grace`` seconds for its own clean-up): what the script does after that fit is not bench's to time.
    Never raises for a failed run: it returns ``{"status": "failed", "reason": ...}``."""
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    env.pop(DOCTOR_OPTIONS_VAR, None)
    if value is not None:
        env[ENV_VAR] = value
        if asks_for_doctor(value):  # the doctor's watch timed as a candidate (benchmarks/doctor_cost.py)
            (folder / "doctor").mkdir(exist_ok=True)
            env[DOCTOR_OPTIONS_VAR] = json.dumps({**watch.get("doctor", {}), "out": str(folder / "doctor")})
    env[BENCH_OPTIONS_VAR] = json.dumps({**watch, "out": str(folder)})
    result_path = folder / "result.json"
    log_path = folder / "log"
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "wb") as log:
        process = subprocess.Popen(list(command), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            written_at: Optional[float] = None
            while process.poll() is None:
                now = time.perf_counter()
                if written_at is None and result_path.is_file():
                    written_at = now
                if written_at is not None and now - written_at > grace:
                    _kill_group(process)
                    break
                if now - t0 > timeout:
                    timed_out = True
                    _kill_group(process)
                    break
                time.sleep(0.05)
        except BaseException:  # Ctrl+C, or the bench itself failing: the command does not outlive it
            _kill_group(process)
            raise
    code = process.wait()
    wall = time.perf_counter() - t0
    if result_path.is_file():
        out = json.loads(result_path.read_text())
    else:
        built = int((folder / "trainers").read_text()) if (folder / "trainers").is_file() else 0
        if timed_out:
            why = f"timed out after {timeout:.0f} s (--timeout)"
        elif code != 0:
            why = f"the command exited with code {code}"
        elif built < watch.get("trainer", 1):
            why = "the command built no Trainer" if built == 0 else f"the command built {built} Trainer(s)"
        else:
            why = "the command ended before the watched fit's first training step"
        out = {"status": "failed", "reason": why, "exit_code": code, "trainers_built": built}
        if timed_out:
            out["timed_out"] = True
    out["wall_s"] = wall
    out["log"] = str(log_path)
    if out.get("status") != "ok":
        out["log_tail"] = _tail(log_path)
    return out


#: ``(command, value, watch, folder, timeout, grace) -> result``; tests pass a fake one
Runner = Callable[[Sequence[str], Optional[str], Mapping[str, Any], Path, float, float], dict[str, Any]]


# ------------------------------------------------------------------------------------------ the bench
def applicable_presets(facts: Mapping[str, Any], target: bool) -> tuple[list[str], dict[str, str]]:
    """The presets to time on what the command built (its model and device), and those left out with why."""
    if target:
        return list(SCRIPT_TARGET_PRESETS), {}
    run, left = [], {}
    for name, needs in SCRIPT_PRESETS.items():
        if needs is not None and not facts.get(needs):
            what = "no 2D/3D convolution" if needs == "convolutions" else "no attention layer"
            left[name] = f"the model it built ({facts.get('model', '?')}) has {what}"
        else:
            run.append(name)
    return run, dict(left, **SCRIPT_PRESETS_NOT_RUN)


def _check_presets(names: Sequence[str]) -> list[str]:
    from lightning_speedups.presets import list_presets

    available = list_presets()
    out = []
    for text in names:
        for name in str(text).split(","):
            name = name.strip()
            if not name or name in out:
                continue
            for part in name.split("+"):
                if part not in available and not Path(part).is_file():
                    raise BenchError(
                        f"--presets: unknown preset {part!r}; presets: {', '.join(available)}"
                        " (compose with +, e.g. fast+converge), or a YAML file with a speedups: section"
                    )
            out.append(name)
    return out


class CommandBench:
    """Times ``command`` under each candidate (see the module doc); :meth:`run` returns the candidates, plain
    first. ``runner`` starts one run (tests pass a fake one)."""

    def __init__(
        self,
        command: Sequence[str],
        options: ScriptBenchOptions,
        candidates: Optional[Sequence[tuple[str, str]]] = None,
        runner: Runner = run_command_once,
        workdir: Optional[str] = None,
        say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.command = list(command)
        self.options = options
        self.asked = list(candidates) if candidates is not None else None
        self.runner = runner
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="lightning_speedups_bench_"))
        self.say = say
        self.clock = clock
        self.candidates: list[Candidate] = []
        self.left_out: dict[str, str] = {}
        self.first: Optional[dict[str, Any]] = None
        self.repeats_done = 0
        self.noise = 0.0
        self.pick: Optional[Candidate] = None
        #: the loss sanity check's tolerance, widened to twice the A/A pair's own loss difference (scripts seed or
        #: sample as they like: two plain runs of a library that draws random windows differ by 15%)
        self.loss_tolerance = options.loss_tolerance
        self.seconds = 0.0
        self.interrupted = False

    # --- runs
    def _watch(self) -> dict[str, Any]:
        o = self.options
        watch: dict[str, Any] = {
            "steps": o.steps,
            "warmup": o.warmup,
            "trainer": o.trainer,
            "memory_step": o.memory_step and o.target is None,
        }
        if o.doctor is not None:
            watch["doctor"] = o.doctor
        if o.target:
            watch["target"] = o.target
            watch["max_time"] = o.target_max_time
        return watch

    def _run(self, candidate: Candidate, repeat: int) -> dict[str, Any]:
        label = "first" if repeat < 0 else f"r{repeat}"
        folder = self.workdir / f"{_slug(candidate.name)}-{label}"
        result = self.runner(
            self.command, candidate.value, self._watch(), folder, self.options.timeout, self.options.grace
        )
        result["repeat"] = repeat
        figure = _figure_text(result, self.options.target)
        self.say(f"bench: {candidate.name:<22} {label:>5}  {figure}")
        return result

    def _plan(self) -> None:
        """The first plain run (it warms the file cache and tells what the command built), then the candidates."""
        plain = Candidate(PLAIN, None)
        first = self._run(plain, -1)
        self.first = first
        if first.get("status") != "ok":
            tail = first.get("log_tail", "").rstrip()
            shown = " ".join(self.command)
            raise BenchError(
                f"`{shown}` did not complete its first fit without the pack ({first.get('reason')}); bench times a"
                " command that runs as it is" + (f". Its last lines:\n{tail}" if tail else "")
            )
        if self.asked is not None:
            chosen = list(self.asked)
        else:
            names, self.left_out = applicable_presets(first.get("facts") or {}, self.options.target is not None)
            if self.options.presets is not None:
                names = [n for n in _check_presets(self.options.presets) if n not in SCRIPT_PRESETS_NOT_RUN]
            chosen = [(n, n) for n in names]
        self.candidates = [plain, Candidate(PLAIN_AA, None)] + [Candidate(name, value) for name, value in chosen]

    def _repeats(self) -> int:
        o = self.options
        if o.budget is None:
            return o.repeats
        per_run = max(self.seconds, 1e-3)  # the first run (the clock's, so tests can set it)
        fit = int((o.budget - self.seconds) // (per_run * len(self.candidates)))
        if fit < 2:
            raise BenchError(
                f"--budget {o.budget:.0f} s holds {max(fit, 0)} repeat(s) of the {len(self.candidates)} candidates"
                f" ({per_run:.0f} s a run): give --budget {per_run * len(self.candidates) * 2 + self.seconds:.0f} or"
                " more, or fewer --steps / --presets"
            )
        return min(o.repeats, fit)

    def run(self) -> list[Candidate]:
        t0 = self.clock()
        try:
            self._plan()
            self.seconds = self.clock() - t0
            repeats = self._repeats()
            for r in range(repeats):
                order = self.candidates[r % len(self.candidates) :] + self.candidates[: r % len(self.candidates)]
                for candidate in order:
                    candidate.runs.append(self._run(candidate, r))
                self.repeats_done = r + 1
        except KeyboardInterrupt:
            self.interrupted = True
        self.seconds = self.clock() - t0
        self.judge()
        return self.candidates

    # --- judging
    def judge(self) -> None:
        """Summaries, ratios to plain of the same repeat, the A/A noise floor, and the pick."""
        if not self.candidates:
            return
        done = self.repeats_done
        for c in self.candidates:  # an interrupted repeat is left out whole: every ratio stays paired
            c.runs = [r for r in c.runs if r["repeat"] < done]
            c.summary = summarize(c.runs)
        plain = self.candidates[0]
        base = plain.summary
        assert base is not None
        target = self.options.target is not None
        aa = self.candidates[1]
        pooled = pooled_spread([c.runs for c in self.candidates]) if target else None
        # plain's A/A twin runs plain's very steps on a seeded script: no residual of its own to count
        blocks = seed_blocks([c.runs for c in self.candidates if c is not aa], plain.runs) if target else None
        for c in self.candidates[1:]:
            assert c.summary is not None
            if target:
                compare_target(c.summary, c.runs, base, plain.runs, pooled, blocks)
            else:
                if c is not aa:  # a loss plain differs from plain by is noise: the check widens to twice that
                    self.loss_tolerance = max(self.options.loss_tolerance, 2 * _loss_noise(aa, plain))
                compare(c.summary, c.runs, base, plain.runs, self.loss_tolerance)
        self.noise = noise_floor(aa.summary)
        best: Optional[Candidate] = None
        for c in self.candidates[2:]:
            c.pickable, c.why = pick_verdict(c.summary, self.options.min_gain, self.noise)
            if c.pickable and (best is None or _gain(c) > _gain(best)):
                best = c
        self.pick = best

    def cleanup(self, keep: bool = False) -> None:
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- reports
    def to_dict(self) -> dict[str, Any]:
        from lightning_speedups.bench.machine import machine_meta

        facts = (self.first or {}).get("facts") or {}
        return {
            "version": SCHEMA_VERSION,
            "command": self.command,
            "mode": "target" if self.options.target else "throughput",
            "target": self.options.target,
            "steps": self.options.steps,
            "warmup": self.options.warmup,
            "repeats": self.repeats_done,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 1),
            "noise_floor": self.noise,
            "loss_tolerance": self.loss_tolerance,
            "watched": {"trainer": self.options.trainer, **facts},
            "left_out": self.left_out,
            "candidates": [
                {
                    "name": c.name,
                    "LIGHTNING_SPEEDUPS": c.value,
                    "pickable": c.pickable,
                    "why": c.why,
                    "summary": c.summary.to_dict() if c.summary is not None else None,
                    "runs": [{k: v for k, v in r.items() if k not in ("log_tail",)} for r in c.runs],
                }
                for c in self.candidates
            ],
            "pick": None if self.pick is None else {"name": self.pick.name, "LIGHTNING_SPEEDUPS": self.pick.value},
            "machine": machine_meta(str(facts.get("accelerator", "cpu"))),
        }


def _loss_noise(aa: Candidate, plain: Candidate) -> float:
    """How far the A/A pair's loss lands from plain's, relative to plain's (0 when either has none)."""
    a = aa.summary.loss.median if aa.summary is not None else None
    b = plain.summary.loss.median if plain.summary is not None else None
    if a is None or b is None or not b:
        return 0.0
    return abs(a - b) / abs(b)


def _gain(c: Candidate) -> float:
    return (c.summary.speedup if c.summary is not None else None) or 0.0


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)[:60]


def _figure_text(result: Mapping[str, Any], target: Optional[str]) -> str:
    if result.get("status") != "ok":
        return f"failed: {result.get('reason')}"
    if target:
        if result.get("reached"):
            return f"reached {target} in {result.get('crossing_s') or result.get('time_to_target_s'):.1f} s"
        return f"missed {target} (best {result.get('best_value')})"
    rate = result.get("samples_per_s")
    unit = "samples/s"
    if rate is None:
        rate, unit = result.get("steps_per_s"), "steps/s"
    return f"{rate:.1f} {unit}" if rate else "no rate"


# ------------------------------------------------------------------------------------------ output
def _ratio(c: Candidate) -> str:
    s = c.summary
    if s is None or s.speedup is None:
        return "-"
    lo, hi = s.speedup_ci
    return f"{s.speedup:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if lo is not None and hi is not None else "")


def print_table(bench: CommandBench, console: Any = None) -> None:
    """The candidates, their figures against plain Lightning, and the verdict on each."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 140)
    target = bench.options.target
    table = Table(title=f"bench -- {' '.join(bench.command)}", title_justify="left")
    for col in ("candidate", "LIGHTNING_SPEEDUPS", "time to target" if target else "rate", "vs plain (95% CI)"):
        table.add_column(col)
    if not target:
        table.add_column("memory")
        table.add_column("loss")
    table.add_column("verdict")
    for c in bench.candidates:
        s = c.summary
        if s is None:
            continue
        if target:
            figure = s.target_time
            rate = f"{figure.median:.1f} s" if figure.median is not None else "-"
        else:
            figure = s.samples_per_s
            rate = f"{figure.median:.4g}/s" if figure.median is not None else "-"
        if figure.pct is not None:
            rate += f" ±{figure.pct:.0f}%"
        if c.name == PLAIN:
            verdict = "the reference"
        elif c.name == PLAIN_AA:
            verdict = f"noise floor {100 * bench.noise:.1f}%"
        elif c is bench.pick:
            verdict = f"[bold green]picked[/]: {c.why}"
        else:
            verdict = c.why
        if s.failure and not s.runs_ok:
            verdict = f"failed: {s.failure}"
        row = [c.name, c.value or "(unset)", rate, "1" if c.name == PLAIN else _ratio(c)]
        if not target:
            row.append(f"{s.mem_ratio:.2f}x" if s.mem_ratio is not None else "-")
            row.append(f"{s.loss.median:.4g}" if s.loss.median is not None else "-")
        table.add_row(*row, verdict)
    console.print(table)
    for name, why in bench.left_out.items():
        if name in SCRIPT_PRESETS:
            console.print(f"  not run: {name}: {why}")


def pick_lines(bench: CommandBench) -> list[str]:
    """What to set, in the form a script user sets it."""
    shown = " ".join(bench.command)
    if bench.interrupted and bench.repeats_done == 0:
        return ["bench: interrupted before a whole repeat: nothing to compare"]
    if bench.pick is None:
        return [
            f"bench: no preset beat plain Lightning on this command beyond the noise ({100 * bench.noise:.1f}% A/A,"
            f" {bench.repeats_done} paired repeats): keep {ENV_VAR} unset"
        ]
    s = bench.pick.summary
    assert s is not None
    what = "time to target" if bench.options.target else "throughput"
    return [
        f"bench: pick {bench.pick.name}: {_ratio(bench.pick)} {what} over plain Lightning,"
        f" {bench.repeats_done} paired repeats, noise floor {100 * bench.noise:.1f}%",
        f"  {ENV_VAR}={bench.pick.value} {shown}",
    ]


def write_env_preset(path: str, bench: CommandBench) -> str:
    """The YAML ``LIGHTNING_SPEEDUPS=PATH`` takes, for the pick (the composed presets' sections, checked by loading
    it back); plain Lightning's pick writes empty sections."""
    import yaml

    from lightning_speedups.presets import load_yaml, preset, resolve_config

    pick = bench.pick
    data: dict[str, Any] = {"trainer": {}, "speedups": {}}
    if pick is not None and pick.value is not None:
        for name in pick.value.split("+"):
            loaded = load_yaml(resolve_config(name))
            for key in ("trainer", "speedups"):
                _merge(data[key], loaded.get(key) or {})
    data = {k: v for k, v in data.items() if v} or {"speedups": {}}
    shown = " ".join(bench.command)
    header = [
        f"# Written by `python -m lightning_speedups bench -- {shown}` on {time.strftime('%Y-%m-%d')}.",
        *[f"# {line}" for line in pick_lines(bench)],
        f"# Use: {ENV_VAR}={path} {shown}",
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(header) + "\n")
        yaml.safe_dump(data, fh, sort_keys=False, default_flow_style=False)
    preset(path)  # what the variable will read: it must load
    return path


def _merge(into: dict[str, Any], new: Mapping[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


# ------------------------------------------------------------------------------------------ the command
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lightning_speedups bench [options] -- COMMAND",
        description="Run your own training command (python train.py ..., python -m pkg ..., a library's console"
        " command) once per candidate and repeat, in fresh processes: plain Lightning, plain again (A/A), and each"
        " preset that applies to what it built, through LIGHTNING_SPEEDUPS; time the first fit's steps, and print the"
        " LIGHTNING_SPEEDUPS value that pays.",
    )
    p.add_argument("--steps", type=int, default=20, help="timed training steps per run (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="steps before the timed ones (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="paired repeats (default 3; 2 or more for an interval)")
    p.add_argument(
        "--presets", nargs="+", default=None, metavar="P", help="presets to time (default: those that apply)"
    )
    p.add_argument("--trainer", type=int, default=1, metavar="N", help="time the N-th Trainer the command builds")
    p.add_argument("--min-gain", type=float, default=0.02, help="the gain a pick must clear (default 0.02)")
    p.add_argument("--loss-tolerance", type=float, default=0.25, help="sanity check: loss off plain's by at most this")
    p.add_argument("--budget", type=float, default=None, metavar="S", help="seconds for the whole bench")
    p.add_argument("--timeout", type=float, default=900.0, metavar="S", help="seconds one run may take (default 900)")
    p.add_argument(
        "--target", default=None, metavar="METRIC=VALUE", help="rank by time until the logged metric reaches VALUE"
    )
    p.add_argument(
        "--target-max-time", type=float, default=None, metavar="S", help="with --target: a run gives up after S s"
    )
    p.add_argument("--json", default=None, metavar="FILE", help="write every run and summary as JSON")
    p.add_argument(
        "--write-preset", default=None, metavar="FILE", help="write the pick as a YAML for LIGHTNING_SPEEDUPS"
    )
    p.add_argument("--keep-logs", action="store_true", help="keep each run's output (default: kept when one failed)")
    return p


def options_from(ns: argparse.Namespace) -> ScriptBenchOptions:
    """The options, checked (one line naming the flag for a bad value)."""
    for flag, value, low in (
        ("--steps", ns.steps, 1),
        ("--warmup", ns.warmup, 0),
        ("--repeats", ns.repeats, 1),
        ("--trainer", ns.trainer, 1),
    ):
        if value < low:
            raise BenchError(f"{flag} must be at least {low}, got {value}")
    if ns.target is not None:
        from lightning_speedups.bench.target import parse_target

        try:
            parse_target(ns.target)
        except ValueError as err:
            raise BenchError(f"--target: {err}") from None
    if ns.presets is not None:
        _check_presets(ns.presets)
    return ScriptBenchOptions(
        steps=ns.steps,
        warmup=ns.warmup,
        repeats=ns.repeats,
        presets=ns.presets,
        trainer=ns.trainer,
        min_gain=ns.min_gain,
        loss_tolerance=ns.loss_tolerance,
        timeout=ns.timeout,
        budget=ns.budget,
        target=ns.target,
        target_max_time=ns.target_max_time,
    )


def main(options: Sequence[str], command: Sequence[str]) -> int:
    """``bench [options] -- COMMAND`` (:mod:`lightning_speedups.bench.script`)."""
    try:
        ns = _parser().parse_args(list(options))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        opts = options_from(ns)
        for flag, path in (("--json", ns.json), ("--write-preset", ns.write_preset)):
            if path and not os.access(Path(path).resolve().parent, os.W_OK):
                raise BenchError(f"{flag} {path}: its folder does not exist or is not writable")
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    why = check_command(command)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    bench = CommandBench(command, opts)
    try:
        bench.run()
    except BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        bench.cleanup()
        return 2
    failed = any(r.get("status") != "ok" for c in bench.candidates for r in c.runs)
    print_table(bench)
    for line in pick_lines(bench):
        print(line)
    if ns.json:
        Path(ns.json).write_text(json.dumps(bench.to_dict(), indent=2, default=str) + "\n")
    if ns.write_preset and not bench.interrupted:
        write_env_preset(ns.write_preset, bench)
        print(f"bench: wrote {ns.write_preset}: {ENV_VAR}={ns.write_preset} {' '.join(command)}")
    keep = ns.keep_logs or failed
    if keep:
        print(f"bench: each run's output is in {bench.workdir}", file=sys.stderr)
    bench.cleanup(keep=keep)
    return 130 if bench.interrupted else 0
