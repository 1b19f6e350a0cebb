"""``doctor --verify``: time each finding's fix on the user's own setup with bench's machinery.

The doctor's checks say what *should* help (folklore, made precise by evidence). ``--verify`` measures
it: every finding whose tip bench can time by samples/s (or, for a memory tip, by training memory)
becomes a bench variant on top of the user's config as given (``BenchOptions(baseline="yours")``),
run in its own process, interleaved with the baseline over ``repeats`` paired repeats, with an A/A
pair of baselines for the run's noise floor. Each finding then carries a
:class:`~lightning_speedups.inspection.Measured`:

- ``pays``: the gain's 95% interval lies above 1.0 and clears ``min_gain`` and the noise floor (the
  rule a bench pick must pass, :func:`~lightning_speedups.bench.stats.pick_verdict`); the finding stays.
- ``slower`` (the interval lies below 1.0), ``no-gain`` (within the noise, or below ``min_gain``),
  ``failed`` (the fix did not run here, or changed the loss past the sanity check): the finding is
  *demoted*: its severity drops to ``low`` (the old one is kept in ``severity_before``), it is listed
  apart with the figure, and it no longer counts for ``--fail-on``.
- ``not-timed``: bench cannot time this tip here (a code change, a convergence tip, a part that needs
  CUDA), with the reason; the finding is left as it is.

Example::

    from lightning_speedups.doctor import diagnose, VerifyOptions
    result = diagnose(["--config", "my.yaml"], verify=VerifyOptions(repeats=3, steps=20))
    for f in result.findings:
        if f.measured is not None:
            print(f.tip, f.severity, f.measured.verdict, f.measured.figure)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.bench import NOT_TIMED, TIP_VARIANTS, Bench, BenchError, BenchOptions
from lightning_speedups.bench.stats import VariantSummary, pick_verdict
from lightning_speedups.inspection import Finding, Measured

__all__ = ["VerifyOptions", "VerifyReport", "judge", "timeable_tips", "verify_findings"]

#: a finding demoted by its measurement drops to this severity
DEMOTED_SEVERITY = "low"
#: an interval whose high end is more than this times its low end is called wide (more repeats narrow it)
WIDE_CI = 1.5


#: bench's flags as ``doctor --verify`` spells them (bench's messages name these)
VERIFY_FLAGS = {
    "budget": "--verify-budget",
    "steps": "--verify-steps",
    "repeats": "--verify-repeats",
    "warmup": "--verify-steps",
    "timeout": "--verify-budget",
}


@dataclass
class VerifyOptions:
    """How ``doctor --verify`` times the fixes (bench's own knobs, smaller defaults).

    Attributes:
        steps: timed batches per run.
        warmup: batches before the timed ones.
        repeats: paired repeats (at least 2 for an interval; 3 by default).
        min_gain: the relative gain a fix must bring to count as paying.
        budget: seconds for the whole verification (``None``: no limit); fewer repeats when short.
        threads: torch threads in every run (``None``: torch's choice).
        progress: show bench's progress bar (on stderr).
        launcher: starts the runs (tests pass a fake one with bench's ``run(spec, name, timeout)``).
        clock: bench's budget clock (tests pass a fake one).
    """

    steps: int = 20
    warmup: int = 3
    repeats: int = 3
    min_gain: float = 0.02
    budget: Optional[float] = None
    threads: Optional[int] = None
    progress: bool = False
    launcher: Any = None
    clock: Callable[[], float] = time.monotonic

    def bench_options(self, args: Sequence[str], tips: Sequence[str], memory_step: bool = False) -> BenchOptions:
        """Bench's options for timing ``tips`` on the setup ``args`` describe: the config as given is the
        baseline, each fix is added on top, and messages name ``--verify-*`` flags."""
        return BenchOptions(
            args=list(args),
            tips=list(tips),
            presets=["none"],
            steps=self.steps,
            warmup=self.warmup,
            repeats=self.repeats,
            budget=self.budget,
            min_gain=self.min_gain,
            search=False,
            extras=False,
            threads=self.threads,
            progress=self.progress,
            memory_step=memory_step,
            baseline="yours",
            flags=VERIFY_FLAGS,
        )


@dataclass
class VerifyReport:
    """What the verification ran: the tips timed, the noise floor, bench's notes, or why it could not run."""

    timed: list[str] = field(default_factory=list)
    repeats: int = 0
    steps: int = 0
    noise: Optional[float] = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "timed": list(self.timed),
            "repeats": self.repeats,
            "steps": self.steps,
            "noise_floor": self.noise,
            "seconds": round(self.seconds, 1),
            "notes": list(self.notes),
            "error": self.error,
        }


def timeable_tips(findings: Sequence[Finding]) -> list[str]:
    """The tips of ``findings`` (status ``finding``) that bench has a samples/s or memory variant for."""
    return [f.tip for f in findings if f.status == "finding" and f.tip in TIP_VARIANTS]


def _ci_text(summary: VariantSummary) -> str:
    lo, hi = summary.speedup_ci
    n = len(summary.samples_per_s.values)
    interval = f"95% CI {lo:.2f}-{hi:.2f}, " if lo is not None and hi is not None else ""
    return f"{interval}{n} paired repeat{'s' if n != 1 else ''}"


def judge(summary: Optional[VariantSummary], goal: str, min_gain: float, noise: float = 0.0) -> Measured:
    """The verdict on one fix from its bench summary (compared with the baseline of the same run).

    A speed tip pays when :func:`~lightning_speedups.bench.stats.pick_verdict` would let bench pick it;
    a memory tip pays when it trains in at most ``1 - min_gain`` of the baseline's memory and still runs.

    Examples:
        >>> from lightning_speedups.bench.stats import VariantSummary
        >>> s = VariantSummary.empty(); s.speedup, s.speedup_ci = 0.80, (0.75, 0.85)
        >>> judge(s, "speed", 0.02).verdict
        'slower'
        >>> s.speedup, s.speedup_ci = 1.30, (1.20, 1.40)
        >>> judge(s, "speed", 0.02).verdict
        'pays'
    """
    if summary is None or not summary.runs_ok:
        why = summary.failure if summary is not None and summary.failure else "no run completed"
        return Measured("failed", f"the fix did not run here: {why}", goal=goal)
    if summary.runs_failed:
        return Measured(
            "failed", f"{summary.runs_failed} of its runs failed: {summary.failure or 'see bench'}", goal=goal
        )
    if not summary.sane:
        return Measured("failed", f"it changed the loss past bench's sanity check ({summary.sanity})", goal=goal)
    g = summary.speedup
    if goal == "memory":
        m = summary.mem_ratio
        if m is None or m <= 0:
            return Measured(
                "no-gain", "no training-memory figure to compare (bench's memory step did not run)", goal=goal
            )
        speed = f" at {g:.2f}x samples/s" if g is not None else ""
        figure = f"trains in {m:.2f}x the baseline's memory{speed}"
        verdict = "pays" if m <= 1.0 - min_gain else "no-gain"
        return Measured(verdict, figure, ratio=1.0 / m, goal=goal)
    if g is None:
        return Measured("no-gain", "no samples/s ratio to the baseline", goal=goal)
    lo, hi = summary.speedup_ci
    figure = f"{g:.2f}x samples/s ({_ci_text(summary)})"
    ok, why = pick_verdict(summary, min_gain, noise)
    if ok:
        return Measured("pays", figure, ratio=g, ci=(lo, hi), goal=goal)
    if hi is not None and hi < 1.0:
        return Measured("slower", figure + ": slower on this setup", ratio=g, ci=(lo, hi), goal=goal)
    if lo is not None and hi is not None and hi / lo > WIDE_CI:
        why += "; the interval is wide: more --verify-repeats or --verify-steps, on a quiet machine, narrow it"
    return Measured("no-gain", f"{figure}: {why}", ratio=g, ci=(lo, hi), goal=goal)


def _apply(finding: Finding, measured: Measured) -> None:
    finding.measured = measured
    if measured.demotes and finding.status == "finding":
        measured.severity_before = finding.severity
        finding.severity = DEMOTED_SEVERITY


def verify_findings(
    findings: Sequence[Finding], args: Sequence[str], options: Optional[VerifyOptions] = None, console: Any = None
) -> VerifyReport:
    """Time the fix of every finding bench can time, on the setup ``args`` describe; mark each finding.

    Args:
        findings: the doctor's findings (changed in place: ``measured`` set, demoted ones ``low``).
        args: the setup's ``fit`` arguments (``--config`` paths, ``--model.*``, ...), as the doctor built it.
        options: how to time (:class:`VerifyOptions`).
        console: a rich console for bench's messages (stderr by default).

    Returns:
        A :class:`VerifyReport`; ``error`` says why nothing could be timed (the findings then keep their
        severities and carry a ``not-timed`` measurement with that reason).
    """
    o = options or VerifyOptions()
    report = VerifyReport(repeats=o.repeats, steps=o.steps)
    t0 = o.clock()
    for f in findings:
        if f.status == "finding" and f.tip not in TIP_VARIANTS:
            reason = NOT_TIMED.get(f.tip, "bench has no variant for this tip")
            _apply(f, Measured("not-timed", reason))
    tips = timeable_tips(findings)
    if not tips:
        report.notes.append("no finding has a fix bench can time on this setup")
        return report
    goals = {t: TIP_VARIANTS[t].goal for t in tips}
    bench_options = o.bench_options(args, tips, memory_step="memory" in goals.values())
    bench = Bench(bench_options, console=console, launcher=o.launcher, clock=o.clock)
    try:
        result = bench.run()
    except BenchError as err:
        report.error = f"bench could not time the fixes: {err}".splitlines()[0]
        for f in findings:
            if f.tip in goals:
                _apply(f, Measured("not-timed", report.error, goal=goals[f.tip]))
        report.seconds = o.clock() - t0
        return report
    finally:
        bench.cleanup()
    noise = bench.noise()
    report.noise = noise
    report.repeats = getattr(bench, "repeats_used", o.repeats)
    report.notes += list(result.notes)
    by_tip = {rec.variant.tips[0]: rec for rec in result.records if rec.variant.kind == "tip"}
    for f in findings:
        if f.tip not in goals:
            continue
        if f.tip in result.skipped_tips:
            _apply(f, Measured("not-timed", result.skipped_tips[f.tip], goal=goals[f.tip]))
            continue
        rec = by_tip.get(f.tip)
        if rec is None or rec.skipped:
            why = rec.skipped if rec is not None and rec.skipped else "not run"
            _apply(f, Measured("not-timed", why, goal=goals[f.tip]))
            continue
        report.timed.append(f.tip)
        _apply(f, judge(rec.summary, goals[f.tip], o.min_gain, noise))
    report.seconds = o.clock() - t0
    return report
