"""The one timer and the one pairing rule of the pack: ``bench`` (whole runs side by side) and the start-up
probe (:mod:`~lightning_speedups.functional.probe`, candidates inside one run) both time with
:class:`Timeline` and judge with :func:`ratio_interval`, :func:`noise_of` and :func:`gain_verdict`.

* :class:`Timeline`: marks on a run's timeline. On CUDA a mark is an event recorded on the current
  stream (no host synchronisation inside a timed window, so asynchronous copies and launches keep
  overlapping); :meth:`Timeline.sync` waits once, at the end of the window, before the marks are read.
  Elsewhere a mark is the host clock, which a test can replace (``clock=``).
* :func:`ratio_interval`: a 95% interval of a ratio from paired repeats (Student's t on the log ratios).
* :func:`noise_of`: how far from 1.0 an A/A pair (the baseline against itself) landed.
* :func:`gain_verdict`: a gain counts only when its interval lies above 1.0 and it clears both a minimum
  gain and the noise floor.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from lightning_speedups.errors import SettingError

__all__ = ["StepPhases", "Timeline", "gain_verdict", "noise_of", "ratio_interval", "t95"]


class Timeline:
    """Marks on a run's timeline and the seconds between them.

    Args:
        device: the device the work runs on; a CUDA device gets CUDA events.
        clock: the host clock (seconds) for every other device; injectable for tests.

    Examples:
        >>> ticks = iter([1.0, 1.5, 3.0])
        >>> line = Timeline(clock=lambda: next(ticks))
        >>> a, b, c = line.mark(), line.mark(), line.mark()
        >>> line.sync(); line.seconds(a, b), line.seconds(b, c)
        (0.5, 1.5)
    """

    def __init__(self, device: Any = None, clock: Optional[Callable[[], float]] = None) -> None:
        self.device = device
        self.cuda = getattr(device, "type", None) == "cuda"
        self.clock = clock or time.perf_counter

    def mark(self) -> Any:
        """A point on the timeline: a recorded CUDA event on CUDA, else the host clock's reading."""
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return self.clock()

    def sync(self) -> None:
        """Wait for the device once (after a timed window, before :meth:`seconds` reads its marks)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    @staticmethod
    def seconds(a: Any, b: Any) -> float:
        """Seconds from mark ``a`` to mark ``b`` (CUDA events: once both have completed)."""
        if isinstance(a, (int, float)):
            return float(b - a)
        return float(a.elapsed_time(b)) / 1000.0


class StepPhases:
    """Where a training step's time goes: marks at its phase boundaries (``start``, ``backward`` when the loss is
    handed to backward, ``optimizer`` before the optimizer steps, ``end``) over a window of steps, and the median
    seconds of each phase, the first step left out (its warm-up) when there are more.

    Examples:
        >>> ticks = iter([0.0, 1.0, 3.0, 3.5,  4.0, 4.2, 4.6, 4.7,  5.0, 5.2, 5.6, 5.7])
        >>> phases = StepPhases(Timeline(clock=lambda: next(ticks)))
        >>> for _ in range(3):
        ...     for point in ("start", "backward", "optimizer", "end"):
        ...         phases.mark(point)
        >>> {k: round(v, 3) for k, v in phases.seconds().items()}
        {'forward': 0.2, 'backward': 0.4, 'optimizer': 0.1}
    """

    #: each phase and the marks it lies between
    PHASES = (
        ("forward", "start", "backward"),
        ("backward", "backward", "optimizer"),
        ("optimizer", "optimizer", "end"),
    )

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.steps: list[dict[str, Any]] = []
        self._current: Optional[dict[str, Any]] = None
        self._last_end: Any = None  # the previous step's end, when nothing but its next batch's fetch ran since

    def mark(self, point: str) -> None:
        """Mark ``point`` of the current step (``start`` opens a step, ``end`` closes it; a repeated point keeps its
        first mark: accumulation's later micro-batches run inside the same step)."""
        if point == "start":
            self._current = {"start": self.timeline.mark()}
            if self._last_end is not None:
                self._current["after"] = self._last_end  # the step before it: the span between is the data wait
                self._last_end = None
            return
        if self._current is None or point in self._current:
            return
        self._current[point] = self.timeline.mark()
        if point == "end":
            self.steps.append(self._current)
            self._last_end = self._current["end"]
            self._current = None

    def gap(self) -> None:
        """Something other than the next batch's fetch runs before the next step (validation, an epoch's end and
        start): that step's wait is not a data wait and is left out of :meth:`data_wait`."""
        self._last_end = None

    def data_wait(self) -> tuple[float, float, int]:
        """``(wait, step, n)``: the seconds the ``n`` steps that followed a marked step right away (no :meth:`gap`
        between) waited for their batch, from the previous step's end to their start, and those steps' whole
        seconds (the wait included).

        Examples:
            >>> ticks = iter([0.0, 1.0,  1.5, 2.5,  3.0, 4.0])
            >>> phases = StepPhases(Timeline(clock=lambda: next(ticks)))
            >>> for i in range(3):
            ...     if i == 2:
            ...         phases.gap()  # validation ran before the third step
            ...     phases.mark("start"); phases.mark("end")
            >>> phases.data_wait()
            (0.5, 1.5, 1)
        """
        followed = [step for step in self.steps if "after" in step]
        if not followed:
            return 0.0, 0.0, 0
        self.timeline.sync()
        wait = busy = 0.0
        for step in followed:
            gap = max(0.0, self.timeline.seconds(step["after"], step["start"]))
            wait += gap
            busy += gap + max(0.0, self.timeline.seconds(step["start"], step["end"]))
        return wait, busy, len(followed)

    def seconds(self) -> dict[str, float]:
        """The median seconds of each phase over the marked steps (``{}`` before a step ended)."""
        if not self.steps:
            return {}
        self.timeline.sync()
        steps = self.steps[1:] if len(self.steps) > 1 else self.steps
        out: dict[str, float] = {}
        for name, a, b in self.PHASES:
            spans = [self.timeline.seconds(step[a], step[b]) for step in steps if a in step and b in step]
            if spans:
                out[name] = statistics.median(spans)
        return out


#: two-sided 95% quantiles of Student's t, by degrees of freedom (1..30; above: the normal's 1.96)
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise SettingError(f"`dof` must be >= 1, got {dof}")
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def ratio_interval(ratios: Sequence[float]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """``(geometric mean, low, high)``: a 95% confidence interval of a ratio from paired repeats.

    Each repeat pairs a variant with the baseline of the same repeat (run side by side), so the ratios
    are independent draws; the interval is Student's t on their logarithms, back-transformed (a ratio
    of 2 and one of 0.5 are equally far from 1). One ratio gives no interval (``None``s).

    Examples:
        >>> g, lo, hi = ratio_interval([1.10, 1.12, 1.08])
        >>> round(g, 3), round(lo, 3), round(hi, 3)
        (1.1, 1.051, 1.151)
        >>> ratio_interval([1.2])
        (1.2, None, None)
    """
    logs = [math.log(r) for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None, None
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def noise_of(aa_ratio: Optional[float]) -> float:
    """The noise floor an A/A ratio (the baseline against itself) gives: its distance from 1.0.

    Examples:
        >>> round(noise_of(0.97), 2), noise_of(None)
        (0.03, 0.0)
    """
    if aa_ratio is None:
        return 0.0
    return abs(aa_ratio - 1.0)


def gain_verdict(
    gain: Optional[float],
    low: Optional[float],
    high: Optional[float],
    min_gain: float,
    noise: float = 0.0,
    *,
    min_gain_name: str = "the minimum gain",
    repeats_hint: str = "use --repeats 2 or more",
) -> tuple[bool, str]:
    """Whether a measured gain counts, and why (not): its 95% interval lies above 1.0 and it clears both
    ``min_gain`` and the A/A ``noise`` floor.

    Examples:
        >>> gain_verdict(1.05, 1.01, 1.09, min_gain=0.02, noise=0.06)
        (False, 'gain 1.05x is within the noise floor (A/A pair off by 6.0%)')
        >>> gain_verdict(1.05, 1.01, 1.09, min_gain=0.02, noise=0.01)
        (True, 'gain 1.05x, 95% CI 1.01-1.09')
        >>> gain_verdict(0.63, 0.58, 0.67, min_gain=0.02)
        (False, 'slower: 95% CI 0.58-0.67 lies below 1.0')
    """
    if gain is None:
        return False, "no ratio to the baseline"
    if low is None or high is None:
        return False, f"gain {gain:.2f}x has no confidence interval (one paired repeat; {repeats_hint})"
    if high < 1.0:
        return False, f"slower: 95% CI {low:.2f}-{high:.2f} lies below 1.0"
    if low <= 1.0:
        return False, f"95% CI {low:.2f}-{high:.2f} includes 1.0"
    if gain < 1.0 + min_gain:
        return False, f"gain {gain:.2f}x is below {min_gain_name} {min_gain:.0%}"
    if gain - 1.0 <= noise:
        return False, f"gain {gain:.2f}x is within the noise floor (A/A pair off by {100 * noise:.1f}%)"
    return True, f"gain {gain:.2f}x, 95% CI {low:.2f}-{high:.2f}"
