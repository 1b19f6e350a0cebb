"""A start-up probe: time a few training steps of the user's own model under each candidate setting,
interleaved and paired, and keep a candidate only when it is faster beyond the noise.

``auto`` settings whose gain depends on the hardware *and* the model (the memory layout, the optimizer
implementation, CPU bf16) are decided here, on the real model and a real batch, instead of from device
facts. The engine knows nothing of Lightning: it is given a ``step`` (one forward, backward and optimizer
step under the options passed to it) and the :class:`Axis` objects to decide; the caller
(:class:`~lightning_speedups.callbacks.AutoProbe`) puts the training state back afterwards.

How it measures (the timer and the pairing rule are bench's, :mod:`~lightning_speedups.functional.timing`):

* a **calibration** of the baseline (at least 3 steps, until the last two lie within 20% of the fastest:
  the run's own cold start, which a run without the probe pays too) gives the step time, from which the rounds' cost is estimated;
  as many rounds run as fit the budget (seconds, and a share of the run's planned time), and a probe that
  cannot fit three (two give an interval too wide to keep anything: Student's t of 12.7) is skipped
  before any candidate is tried, every axis staying as it is;
* then ``rounds`` rounds; in each, every variant (the baseline, each option of each axis alone, and the
  baseline a second time for an A/A pair) is applied, run ``warmup`` untimed steps (layout conversions,
  kernel selection) and ``steps`` timed ones, and undone; the order rotates from round to round, so a
  drift of the machine hits every variant alike;
* per round, each option's ratio is the baseline's median step time over the option's; the ratios of the
  rounds give a 95% interval (:func:`ratio_interval`), the A/A pair the noise floor (:func:`noise_of`); an
  option is kept when :func:`gain_verdict` says its gain counts, and of several options of one axis the
  fastest is kept.

Examples:
    >>> now, state = [0.0], {"fast": False}
    >>> def step(options):  # a fake step: 1 s, or 0.5 s with "fast" on
    ...     now[0] += 0.5 if state["fast"] else 1.0
    >>> fast = Option("fast", lambda: state.update(fast=True), lambda: state.update(fast=False))
    >>> axis = Axis("demo", "slow", [fast], lambda option, why: print("on:", option.label))
    >>> result = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]))
    >>> result.decisions["demo"][0], result.ratios["demo=fast"], result.steps
    ('fast', [2.0, 2.0, 2.0, 2.0, 2.0], 63)
    >>> decide_axes([axis], result.decisions)
    on: fast
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.errors import SettingError
from lightning_speedups.functional.failures import error_phrase
from lightning_speedups.functional.timing import Timeline, gain_verdict, noise_of, ratio_interval

#: the fewest rounds a probe runs: with two, Student's t (12.7) makes every interval include 1.0
MIN_ROUNDS = 3

__all__ = ["MIN_ROUNDS", "Axis", "Option", "ProbeResult", "decide_axes", "probe_plan", "run_probe", "unprobed"]


@dataclass
class Option:
    """One candidate of an :class:`Axis`.

    Attributes:
        label: what it is (``"channels_last"``, ``"fused"``).
        apply: turns it on (in place, undoable).
        undo: puts back what ``apply`` changed.
        batch: transforms the batch while the option is on (``None``: the batch as it is).
        context: a context manager the step runs in while the option is on (an autocast).
    """

    label: str
    apply: Callable[[], None]
    undo: Callable[[], None]
    batch: Optional[Callable[[Any], Any]] = None
    context: Optional[Callable[[], contextlib.AbstractContextManager[Any]]] = None


@dataclass
class Axis:
    """One ``auto`` setting to decide: what runs without it (``keep``) and its other options.

    Attributes:
        name: the setting (``"channels_last"``, ``"optimizer Adam"``).
        keep: the label of what runs when no option is kept (the layout / implementation as it is).
        options: the candidates.
        decide: ``decide(option or None, reason)``, called once with the outcome (:func:`decide_axes`):
            the option to turn on for the run (``None``: keep), and a one-line reason with the figures.
    """

    name: str
    keep: str
    options: list[Option]
    decide: Callable[[Optional[Option], str], None]


@dataclass
class ProbeResult:
    """What a probe measured and decided.

    Attributes:
        decisions: per axis name, ``(label kept, reason)``.
        skipped: why the probe did not run (``""``: it ran).
        seconds: the probe's own cost (host clock, conversions included).
        steps: training steps it ran (the calibration's included).
        calibration_steps: steps the calibration took to settle.
        rounds: rounds it timed.
        step_s: the baseline's median step time.
        noise: the A/A noise floor.
        ratios: per variant label, its per-round speed ratios over the baseline.
    """

    decisions: dict[str, tuple[str, str]] = field(default_factory=dict)
    skipped: str = ""
    seconds: float = 0.0
    steps: int = 0
    calibration_steps: int = 0
    rounds: int = 0
    step_s: Optional[float] = None
    noise: float = 0.0
    ratios: dict[str, list[float]] = field(default_factory=dict)


def probe_plan(n_options: int, rounds: int, steps: int, warmup: int) -> int:
    """Training steps a probe's rounds run (after its calibration): per round the baseline twice and every option.

    Examples:
        >>> probe_plan(n_options=3, rounds=5, steps=3, warmup=1)
        100
    """
    return (warmup + steps) * rounds * (n_options + 2)


def least_planned_steps(n_options: int, steps: int, warmup: int, max_fraction: Optional[float]) -> Optional[float]:
    """The shortest planned run (in steps) whose ``max_fraction`` holds the probe's :data:`MIN_ROUNDS` rounds,
    or ``None`` with no such limit. The step time cancels out: it is known before any step runs.

    Examples:
        >>> least_planned_steps(n_options=2, steps=3, warmup=1, max_fraction=0.05)
        960.0
    """
    if not max_fraction:
        return None
    return probe_plan(n_options, MIN_ROUNDS, steps, warmup) / max_fraction


def _variant_key(axis: Axis, option: Optional[Option]) -> str:
    return f"{axis.name}={option.label}" if option is not None else axis.name


def run_probe(
    step: Callable[[Sequence[Option]], None],
    axes: Sequence[Axis],
    *,
    timeline: Optional[Timeline] = None,
    rounds: int = 5,
    steps: int = 3,
    warmup: int = 1,
    calibration: int = 8,
    min_gain: float = 0.02,
    max_seconds: Optional[float] = None,
    planned_steps: Optional[float] = None,
    max_fraction: Optional[float] = None,
    wall: Optional[Callable[[], float]] = None,
    agree: Optional[Callable[[Any], Any]] = None,
) -> ProbeResult:
    """Time every option of every axis against the baseline, interleaved and paired, and decide each axis.

    Args:
        step: runs one training step with the given options on (their batch transforms and contexts).
        axes: what to decide. Nothing is decided here: the result's ``decisions`` say what to keep, and
            :func:`decide_axes` applies them once the caller has put the training state back.
        timeline: the timer (:class:`~lightning_speedups.functional.timing.Timeline`; CUDA events on CUDA).
        rounds: timed rounds at most (at least 3, :data:`MIN_ROUNDS`: two give an interval too wide to keep
            anything); fewer when the budget is short.
        steps: timed steps per variant per round (their median is the variant's time in that round, so a
            stall of one step does not move it).
        warmup: untimed steps after each switch.
        calibration: the most steps the calibration may take to settle (the run's own cold start).
        min_gain: the smallest gain kept (on top of the noise floor).
        max_seconds: the budget of the timed rounds in seconds (``None``: no limit); the calibration is the
            run's own cold start, which a run without the probe pays as well.
        planned_steps: the run's planned training steps (``None``: unknown).
        max_fraction: the largest share of the planned run (``planned_steps`` x the step time) the rounds
            may cost; a run too short to repay them skips the probe.
        wall: the host clock for the probe's own cost (default: the timeline's clock).
        agree: makes several processes agree on a value (``strategy.broadcast``): whatever a rank's own
            clock would decide about how many steps run (the calibration's end, its figures, a stalled
            round's cut) goes through it, so every rank runs the same steps and their collectives stay in
            step.
    """
    if rounds < MIN_ROUNDS or steps < 1 or warmup < 0:
        raise SettingError(
            f"`rounds` must be >= {MIN_ROUNDS}, `steps` >= 1 and `warmup` >= 0; got {rounds}, {steps}, {warmup}."
        )
    timeline = timeline or Timeline()
    probe = _Probe(
        step=step,
        axes=list(axes),
        timeline=timeline,
        steps=steps,
        warmup=warmup,
        wall=wall or timeline.clock,
        agreed=agree if agree is not None else _as_is,
    )
    options = probe.options
    if not options:
        return probe.decide_all("no option to try")
    # decided before any step is spent: the rounds' share of the run does not depend on the step time (both
    # scale with it), so a plan shorter than MIN_ROUNDS rounds / max_fraction steps can never repay them
    least = least_planned_steps(len(options), steps, warmup, max_fraction)
    if planned_steps is not None and least is not None and planned_steps < least:
        return probe.decide_all(
            f"the run is too short to repay it: {planned_steps:.0f} planned steps, and {MIN_ROUNDS} rounds of"
            f" {len(options) + 2} variants ({MIN_ROUNDS * (len(options) + 2) * (warmup + steps)} steps) need a run of"
            f" {least:.0f} steps or more to stay within {max_fraction:.0%} of it; nothing was run"
        )
    base_step = probe.calibrate(calibration)
    fit = probe.rounds_that_fit(base_step, rounds, max_seconds, planned_steps, max_fraction)
    if isinstance(fit, str):
        return probe.decide_all(fit)
    probe.run_rounds(*fit)
    probe.decide(min_gain)
    probe.result.seconds = probe.wall() - probe.t0
    return probe.result


@dataclass
class _Probe:
    """One probe's steps and figures (:func:`run_probe` says what each setting means)."""

    step: Callable[[Sequence[Option]], None]
    axes: list[Axis]
    timeline: Timeline
    steps: int
    warmup: int
    wall: Callable[[], float]
    agreed: Callable[[Any], Any]
    result: ProbeResult = field(default_factory=ProbeResult)
    t0: float = 0.0
    #: an option whose steps raise (an op with no kernel for it here) is out, with its error; the others are timed
    broken: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t0 = self.wall()
        self.options = [(axis, option) for axis in self.axes for option in axis.options]

    def decide_all(self, why: str) -> ProbeResult:
        """Nothing probed: every axis keeps what it had, for ``why``."""
        self.result.skipped = why
        self.result.decisions = unprobed(self.axes, why)
        self.result.seconds = self.wall() - self.t0
        return self.result

    def timed(self, active: Sequence[Option]) -> float:
        """The median step time of ``active`` over ``steps`` timed steps after ``warmup`` untimed ones."""
        for _ in range(self.warmup):
            self.step(active)
        marks = [self.timeline.mark()]
        for _ in range(self.steps):
            self.step(active)
            marks.append(self.timeline.mark())
        self.timeline.sync()
        self.result.steps += self.warmup + self.steps
        return statistics.median(self.timeline.seconds(a, b) for a, b in zip(marks, marks[1:]))

    def calibrate(self, calibration: int) -> float:
        """The step time that prices the rounds. The first steps of a run are slow (allocator, kernel selection,
        caches) and a run without the probe pays them too: steps with no candidate on (at least 3, at most
        ``calibration``) until the last two lie within 20% of the fastest so far."""
        times: list[float] = []
        for _ in range(max(calibration, 3)):
            a = self.timeline.mark()
            self.step(())
            b = self.timeline.mark()
            self.timeline.sync()
            self.result.steps += 1
            times.append(self.timeline.seconds(a, b))
            fastest = min(times)
            # each rank's clock says something else on a busy machine: rank zero decides, or a rank that stops
            # early leaves the others waiting in the next step's collective
            if self.agreed(len(times) >= 3 and all(t <= 1.2 * fastest for t in times[-2:])):
                break
        base_step = self.agreed(min(times))
        self.result.calibration_steps = self.result.steps
        self.result.step_s = base_step
        return base_step

    def rounds_that_fit(
        self,
        base_step: float,
        rounds: int,
        max_seconds: Optional[float],
        planned_steps: Optional[float],
        max_fraction: Optional[float],
    ) -> tuple[int, float] | str:
        """``(rounds, seconds they may take)`` within the budget and the share of the planned run, or why not even
        :data:`MIN_ROUNDS` fit."""
        per_round = (len(self.options) + 2) * (self.warmup + self.steps) * base_step
        budget = max_seconds if max_seconds is not None else float("inf")
        share = float("inf")
        if planned_steps is not None and max_fraction is not None and planned_steps != float("inf"):
            share = max_fraction * planned_steps * base_step
        left = min(budget, share)
        fit = int(left // per_round) if per_round > 0 and left != float("inf") else rounds
        if fit >= MIN_ROUNDS:
            return min(rounds, fit), left
        cost = (
            f"{MIN_ROUNDS} rounds of {len(self.options) + 2} variants cost {MIN_ROUNDS * per_round:.2f} s at"
            f" {1000 * base_step:.1f} ms a step"
        )
        if share < budget and planned_steps is not None and max_fraction is not None:
            return (
                f"the run is too short to repay it: {cost}, over {max_fraction:.0%} of the planned"
                f" {planned_steps:.0f} steps ({planned_steps * base_step:.1f} s)"
            )
        return f"{cost}, over its budget of {budget:.1f} s"

    def run_rounds(self, rounds: int, limit: float) -> None:
        """Up to ``rounds`` rounds of every variant (the baseline first and again last, as an A/A pair), each round
        starting at the next variant; no round starts that would end past ``limit`` seconds (three always run)."""
        variants: list[tuple[str, list[Option]]] = [("A", [])]
        variants += [(_variant_key(axis, option), [option]) for axis, option in self.options]
        variants.append(("A2", []))
        self.timings: dict[str, list[float]] = {key: [] for key, _ in variants}
        started = self.wall()
        for r in range(rounds):
            # a machine that stalls makes rounds dearer than the calibration said
            if r >= MIN_ROUNDS and self.agreed((self.wall() - started) * (r + 1) / r > limit):
                rounds = r
                break
            shift = r % len(variants)
            for key, active in variants[shift:] + variants[:shift]:
                if key in self.broken:
                    continue
                try:
                    with _applied(active):
                        self.timings[key].append(self.timed(active))
                except Exception as err:
                    if not active:  # the model's own step fails: nothing can be timed
                        raise
                    self.broken[key] = error_phrase(err)
        self.result.rounds = rounds

    def decide(self, min_gain: float) -> None:
        """Each axis's decision: its best option whose paired ratio to the baseline clears the minimum gain on top
        of the A/A noise, else what it keeps."""
        result = self.result
        base = self.timings["A"]
        result.ratios = {k: [b / t for b, t in zip(base, ts) if t > 0] for k, ts in self.timings.items() if k != "A"}
        aa, _, _ = ratio_interval(result.ratios["A2"])
        result.noise = noise_of(aa)
        for axis in self.axes:
            best: Optional[tuple[float, Option, str]] = None
            lines = []
            for option in axis.options:
                key = _variant_key(axis, option)
                if key in self.broken:
                    lines.append(f"{option.label} failed ({self.broken[key]})")
                    continue
                g, lo, hi = ratio_interval(result.ratios[key])
                ok, why = gain_verdict(g, lo, hi, min_gain, result.noise, min_gain_name="the minimum gain")
                interval = f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
                figure = f"{option.label} {g:.2f}x{interval}"
                lines.append(figure if ok else f"{figure} ({why})")
                if ok and g is not None and (best is None or g > best[0]):
                    best = (g, option, why)
            summary = (
                f"probed {', '.join(lines)} vs {axis.keep} over {result.rounds} rounds, A/A noise"
                f" {100 * result.noise:.1f}%"
            )
            if best is None:
                result.decisions[axis.name] = (axis.keep, f"stays {axis.keep}: {summary}")
            else:
                result.decisions[axis.name] = (best[1].label, f"{best[1].label}: {summary}")


def _as_is(value: Any) -> Any:
    """One process agrees with itself."""
    return value


def unprobed(axes: Sequence[Axis], why: str) -> dict[str, tuple[str, str]]:
    """Decisions that keep every axis as it is, each saying why it was not probed."""
    return {axis.name: (axis.keep, f"not probed ({why}): stays {axis.keep}") for axis in axes}


def decide_axes(
    axes: Sequence[Axis],
    decisions: dict[str, tuple[str, str]],
    failed: Optional[Callable[[Axis, Exception], None]] = None,
) -> None:
    """Call each axis's ``decide`` with the option its decision names (``None``: keep) and the reason; an
    axis with no decision keeps what it has. With ``failed``, an axis whose ``decide`` raises is handed to it (its
    part steps aside) and the other axes are still decided."""
    for axis in axes:
        label, reason = decisions.get(axis.name, (axis.keep, f"not probed: stays {axis.keep}"))
        option = next((o for o in axis.options if o.label == label), None)
        try:
            axis.decide(option, reason)
        except Exception as err:
            if failed is None:
                raise
            failed(axis, err)


@contextlib.contextmanager
def _applied(active: Sequence[Option]) -> Iterator[None]:
    done: list[Option] = []
    try:
        for option in active:
            option.apply()
            done.append(option)
        yield
    finally:
        for option in reversed(done):
            option.undo()
