"""How bench summarises the runs of a variant and compares variants: spreads, paired ratios with a
95% interval (Student's t on the log ratios of the repeats paired by seed), the run's own noise floor
(an A/A pair of baselines) and the rule a pick must pass."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.functional.timing import gain_verdict, noise_of, ratio_interval, t95

# ------------------------------------------------------------------------------------- summaries


@dataclass
class Spread:
    """Median and range of one figure over repeats."""

    median: Optional[float]
    low: Optional[float]
    high: Optional[float]
    values: list[float] = field(default_factory=list)

    @property
    def pct(self) -> Optional[float]:
        """Half the range as a percentage of the median (``±x%``)."""
        if self.median in (None, 0) or self.low is None or self.high is None:
            return None
        return 100.0 * (self.high - self.low) / (2.0 * abs(self.median))

    @classmethod
    def of(cls, values: Sequence[Optional[float]]) -> Spread:
        vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not vals:
            return cls(None, None, None, [])
        return cls(statistics.median(vals), min(vals), max(vals), vals)

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "spread_pct": self.pct, "values": self.values}


def sanity_check(loss: Optional[float], baseline_loss: Optional[float], tolerance: float) -> tuple[bool, str]:
    """Whether a variant's loss after the timed steps is finite and close to the baseline's.

    ``tolerance`` is relative to the baseline's loss (with a floor of 0.05 absolute, so a loss
    near zero does not turn noise into a failure).

    Examples:
        >>> sanity_check(2.10, 2.00, 0.25)
        (True, 'loss 2.1 vs baseline 2 (+5.0%)')
        >>> sanity_check(float("nan"), 2.0, 0.25)[0]
        False
    """
    if loss is None:
        return True, "no loss to compare (training_step returned none)"
    if not math.isfinite(loss):
        return False, f"loss is {loss}"
    if baseline_loss is None or not math.isfinite(baseline_loss):
        return True, f"loss {loss:.4g} (no baseline loss to compare)"
    diff = loss - baseline_loss
    limit = max(tolerance * abs(baseline_loss), 0.05)
    rel = f"{100.0 * diff / abs(baseline_loss):+.1f}%" if baseline_loss else f"{diff:+.3g}"
    text = f"loss {loss:.4g} vs baseline {baseline_loss:.4g} ({rel})"
    if abs(diff) > limit:
        return False, text + f": further than the tolerance {tolerance:.0%}"
    return True, text


@dataclass
class VariantSummary:
    """The figures of one variant over its repeats, and how they compare with the baseline."""

    runs_ok: int
    runs_failed: int
    samples_per_s: Spread
    step_s: Spread
    data_wait: Spread
    warmup_s: Spread
    warmup_excess_s: Spread
    train_mem: Spread
    peak_rss: Spread
    cuda_peak: Spread
    loss: Spread
    speedup: Optional[float] = None
    speedup_range: tuple[Optional[float], Optional[float]] = (None, None)
    speedup_ci: tuple[Optional[float], Optional[float]] = (None, None)
    mem_ratio: Optional[float] = None
    sane: bool = True
    sanity: str = ""
    failure: Optional[str] = None
    target_time: Spread = field(default_factory=lambda: Spread(None, None, None))
    target_steps: Spread = field(default_factory=lambda: Spread(None, None, None))
    target_reached: int = 0
    target_missed: int = 0
    #: of the misses, the runs stopped at a leading candidate's time (:func:`outpaced`), and that candidate
    target_outpaced: int = 0
    outpaced_by: Optional[str] = None
    picked_why: str = ""
    decided_by: str = ""
    #: the run without which the interval would no longer lie above 1.0 (time-to-target mode): one seed carries
    #: the gain, and one more seed of both decides it (:func:`one_run_carries`)
    carried_by: Optional[str] = None
    #: time-to-target mode: the interval still includes 1.0, but one more seed of both sides would lift it above
    #: 1.0 if the mean times and the spread held (:func:`one_more_seed_decides`): the leader is confirmed first
    one_more_decides: bool = False
    #: time-to-target mode: every run of it reached the target before every run of the baseline, on
    #: :data:`RANK_LEAD_MIN_RUNS` runs a side or more (:func:`ranks_lead`): one seed does not carry such a gain
    rank_lead: bool = False

    @classmethod
    def empty(cls) -> VariantSummary:
        """A summary with no figures (tests fill in what they need)."""
        none = Spread(None, None, None)
        return cls(1, 0, none, none, none, none, none, none, none, none, none)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs_ok": self.runs_ok, "runs_failed": self.runs_failed}
        for name in (
            "samples_per_s",
            "step_s",
            "data_wait",
            "warmup_s",
            "warmup_excess_s",
            "train_mem",
            "peak_rss",
            "cuda_peak",
            "loss",
        ):
            out[name] = getattr(self, name).to_dict()
        out.update(
            speedup=self.speedup,
            speedup_min=self.speedup_range[0],
            speedup_max=self.speedup_range[1],
            speedup_ci95=list(self.speedup_ci),
            target_time_s=self.target_time.to_dict(),
            target_steps=self.target_steps.to_dict(),
            target_reached=self.target_reached,
            target_missed=self.target_missed,
            target_outpaced=self.target_outpaced,
            outpaced_by=self.outpaced_by,
            picked_why=self.picked_why,
            decided_by=self.decided_by,
            carried_by=self.carried_by,
            one_more_decides=self.one_more_decides,
            rank_lead=self.rank_lead,
            mem_ratio=self.mem_ratio,
            sane=self.sane,
            sanity=self.sanity,
            failure=self.failure,
        )
        return out


#: the share of a timed window whose fastest stretch gives a run's samples/s in target mode's stack phase
#: (:func:`fastest_stretch_rate`)
FASTEST_SHARE = 0.1


def fastest_stretch_rate(
    step_times: Sequence[float], samples: Sequence[Optional[int]], share: float = FASTEST_SHARE
) -> Optional[float]:
    """Samples/s over the fastest run of consecutive steps making up ``share`` of a timed window (``None``: no step
    times, or a step of unknown size). Another process lent a time slice slows a stretch of a run, not the hardware:
    over the stack phases of issue 37 the paired log-ratio's spread (median over variants) fell from 0.165 with the
    window's mean to 0.133 with its fastest tenth (0.152 to 0.113 on the runs held out). A stretch rather than
    the single fastest step keeps a cost that recurs every few steps (a loader's refill) in the figure.

    Examples:
        >>> fastest_stretch_rate([0.1] * 8 + [0.5, 0.5], [10] * 10, share=0.2)
        100.0
    """
    n = len(step_times)
    if n == 0 or len(samples) != n or any(s is None for s in samples):
        return None
    k = max(1, math.ceil(share * n))
    best: Optional[tuple[float, float]] = None
    for i in range(n - k + 1):
        t = float(sum(step_times[i : i + k]))
        if t > 0 and (best is None or t < best[0]):
            best = (t, float(sum(s for s in samples[i : i + k] if s is not None)))
    return None if best is None else best[1] / best[0]


#: the windows of each side (a lever's, the baseline's) :func:`fastest_windows_gain` needs
FASTEST_WINDOWS = 3


def fastest_windows_gain(
    rates: Sequence[float], base_rates: Sequence[float], min_gain: float, against: str = "the baseline"
) -> tuple[Optional[bool], str]:
    """Whether a throughput lever pays by its fastest windows, and why (``None``: too few windows to say). Another
    process only ever slows a window: the fastest of a few is the least disturbed (Chen and Revels, "Robust
    benchmarking in noisy environments", 2016; Python's ``timeit`` reports the minimum for the same reason), where
    one slow window in a paired ratio swings the interval past deciding (the GRU of issue 37: the larger batch
    read 2.12x and 0.87x of the baseline in two repeats, one of each side 30% slow). The lever pays when its second
    fastest window beats the baseline's fastest by ``min_gain`` and by the gap between the baseline's own two
    fastest (its noise: with one of them slow the rule stands back): a gain two windows show, not one lucky one.
    Each side needs :data:`FASTEST_WINDOWS`; ``against`` names the other side in the reason.

    Examples:
        >>> ok, why = fastest_windows_gain([8826, 5297, 8790], [4161, 6062, 6010], 0.02)
        >>> ok, why.split(": ")[-1]
        (True, '1.46x, its second 1.45x (above 1 + 2%)')
        >>> fastest_windows_gain([6116, 5808, 6200], [4161, 6062, 6010], 0.02)[0]
        False
        >>> fastest_windows_gain([8826, 5297], [4161, 6062], 0.02)[0] is None
        True
        >>> fastest_windows_gain([120, 118, 90], [100, 99, 98], 0.02, "stack:T04")[1].split(": ")[0]
        "fastest windows 120 and 118 samples/s against stack:T04's fastest 100"
    """
    mine, theirs = sorted(rates, reverse=True), sorted(base_rates, reverse=True)
    if len(mine) < FASTEST_WINDOWS or len(theirs) < FASTEST_WINDOWS or theirs[1] <= 0:
        return None, f"{len(mine)} and {len(theirs)} window(s): its fastest windows need {FASTEST_WINDOWS} of each"
    floor = max(min_gain, theirs[0] / theirs[1] - 1.0)
    gain, second = mine[0] / theirs[0], mine[1] / theirs[0]
    said = (
        f"fastest windows {mine[0]:,.0f} and {mine[1]:,.0f} samples/s against {against}'s fastest"
        f" {theirs[0]:,.0f}: {gain:.2f}x, its second {second:.2f}x"
    )
    why = "--min-gain" if floor == min_gain else f"{against}'s own two fastest windows' gap"
    if second >= 1.0 + floor:
        return True, f"{said} (above 1 + {floor:.0%})"
    return False, f"{said}: not above 1 + {floor:.0%} ({why})"


def fastest_windows_open(rates: Sequence[float], base_rates: Sequence[float], min_gain: float) -> bool:
    """Whether more windows could still make a lever pay by :func:`fastest_windows_gain`: its fastest window so far
    beats the baseline's fastest by ``min_gain`` (one that never did was not slowed in every window)."""
    return bool(rates) and bool(base_rates) and max(rates) >= (1.0 + min_gain) * max(base_rates)


def _rate(run: Mapping[str, Any]) -> Optional[float]:
    return run.get("samples_per_s") or run.get("steps_per_s")


def window_rates(runs: Sequence[Mapping[str, Any]]) -> list[float]:
    """The samples/s (else steps/s) of each completed run, in order."""
    return [float(x) for x in (_rate(r) for r in runs if r.get("status") == "ok") if x]


def outpaced(run: Mapping[str, Any]) -> bool:
    """Whether a target run was stopped at a leading candidate's time
    (:meth:`~lightning_speedups.bench.target_runs.TargetRuns._leader`): it lost to that one on its seed, which says
    nothing of whether it would have reached the target, so it is no miss of its schedule or batch. A run that
    flattened first, or reached, was not."""
    return (
        bool(run.get("cap_leader"))
        and bool(run.get("timed_out"))
        and not run.get("reached")
        and not run.get("flattened")
    )


def summarize(runs: Sequence[Mapping[str, Any]]) -> VariantSummary:
    """Summarise the raw results of one variant's runs (failed runs are counted, not averaged)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    failed = [r for r in runs if r.get("status") != "ok"]
    s = VariantSummary(
        runs_ok=len(ok),
        runs_failed=len(failed),
        samples_per_s=Spread.of([_rate(r) for r in ok]),
        step_s=Spread.of([r.get("step_s") for r in ok]),
        data_wait=Spread.of([r.get("data_wait_fraction") for r in ok]),
        warmup_s=Spread.of([r.get("warmup_s") for r in ok]),
        warmup_excess_s=Spread.of([r.get("warmup_excess_s") for r in ok]),
        train_mem=Spread.of([r.get("train_mem_bytes") for r in ok]),
        peak_rss=Spread.of([r.get("peak_rss_bytes") for r in ok]),
        cuda_peak=Spread.of([r.get("cuda_peak_bytes") for r in ok]),
        loss=Spread.of([r.get("loss") for r in ok]),
    )
    if any("reached" in r for r in ok):
        s.target_time = Spread.of([_time_to_target(r) for r in ok])
        s.target_steps = Spread.of([r.get("steps_to_target") for r in ok if r.get("reached")])
        s.target_reached = sum(1 for r in ok if r.get("reached"))
        s.target_missed = len(ok) - s.target_reached
        lost = [r for r in ok if outpaced(r)]
        s.target_outpaced = len(lost)
        s.outpaced_by = str(lost[0]["cap_leader"]) if lost else None
    if failed and not ok:
        s.failure = str(failed[0].get("reason") or "failed")
        s.sane = False
        s.sanity = "no run completed"
    elif any(r.get("loss") is not None and not math.isfinite(float(r["loss"])) for r in ok):
        s.sane = False
        s.sanity = "a run ended with a non-finite loss"
    return s


def _time_to_target(run: Mapping[str, Any]) -> Optional[float]:
    """A run's time to the target: where its metric crossed it between two checks (``crossing_s``), else
    the time of the check that saw it."""
    if not run.get("reached"):
        return None
    value = run.get("crossing_s") or run.get("time_to_target_s")
    return float(value) if value else None


@dataclass(frozen=True)
class PooledSpread:
    """How far runs of one variant land from each other in time to the target, pooled over every variant
    whose runs all reached it: the standard deviation of log time, its degrees of freedom, and from how many
    runs of how many variants. Two repeats of one variant say little of their spread; ten runs of five
    variants say more, and a variant's noise does not depend much on which speed-up it has."""

    sd: Optional[float]
    dof: int
    runs: int
    variants: int

    def text(self) -> str:
        return f"spread pooled over {self.runs} runs of {self.variants} variants (t, {self.dof} dof)"


def pooled_spread(groups: Sequence[Sequence[Mapping[str, Any]]]) -> PooledSpread:
    """The pooled spread of log time to the target over ``groups`` (each one variant's runs); a group with
    a failed or missed run is left out (its times are not all of one kind).

    Examples:
        >>> run = lambda t: {"status": "ok", "reached": True, "time_to_target_s": t}
        >>> p = pooled_spread([[run(100), run(110)], [run(50), run(55)], [run(70)]])
        >>> round(p.sd, 4), p.dof, p.runs, p.variants
        (0.0674, 2, 5, 3)
    """
    ss, dof, runs, variants = 0.0, 0, 0, 0
    for group in groups:
        if not group or any(r.get("status") != "ok" or not r.get("reached") for r in group):
            continue
        logs = [math.log(t) for t in (_time_to_target(r) for r in group) if t and t > 0]
        if len(logs) != len(group):
            continue
        mean = statistics.fmean(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
        runs += len(logs)
        variants += 1
    return PooledSpread(math.sqrt(ss / dof) if dof > 0 else None, dof, runs, variants)


@dataclass(frozen=True)
class SeedBlocks:
    """The residual spread of log time to the target once each seed's share is taken out: every variant runs on
    the same seeds (0, 1, ...), and a seed that is slow for the baseline is slow for the candidates too (the same
    initial weights, the same data order; on the GRU task of issue 37 the baseline's seeds took 75 and 100 s, a
    candidate's 42 and 56 s). Log time = variant + seed + residual (a randomized-block fit, by least squares over
    the variants whose runs all reached the target, on the seeds the baseline ran); the residual's standard
    deviation, its degrees of freedom (runs - variants - seeds + 1), and from how many runs, variants and seeds.
    :func:`pooled_spread` counts the seed's share as noise."""

    sd: Optional[float]
    dof: int
    runs: int
    variants: int
    seeds: int

    def text(self) -> str:
        return (
            f"seeds as blocks: residual over {self.runs} runs of {self.variants} variants on {self.seeds} seeds"
            f" (t, {self.dof} dof)"
        )


#: the residual degrees of freedom from which the decision takes the seed as a block; with fewer (two variants on
#: two seeds give one) Student's t is too wide to decide and the pooled spread decides instead
MIN_BLOCK_DOF = 2


def seed_blocks(
    groups: Sequence[Sequence[Mapping[str, Any]]], baseline_runs: Sequence[Mapping[str, Any]]
) -> SeedBlocks:
    """The :class:`SeedBlocks` of ``groups`` (each one variant's runs, the seed its ``repeat``) around the
    baseline's (``baseline_runs``, one of them or apart). A group with a failed or missed run is left out (as
    :func:`pooled_spread` does), and so are a group's runs on seeds the baseline did not run (every variant left
    then shares a seed with the baseline: the fit is connected). A variant with one run fits exactly (no dof). A
    variant whose curve was that of one already in the fit, on every seed (the same steps to the target, the same
    metric at every check), is left out: it trained as that one did (a throughput part alone, or parts that all stood down), so what it adds is timing noise, not
    the seed-by-variant interaction the candidates' schedules have, and it would shrink the residual. Pass no copy
    of the baseline either (its A/A twin runs its very steps on each seed).

    Examples:
        >>> run = lambda t, k: {"status": "ok", "reached": True, "time_to_target_s": t, "repeat": k}
        >>> base = [run(75, 0), run(100, 1)]
        >>> b = seed_blocks([base, [run(42, 0), run(56, 1)], [run(35, 0), run(56, 1)], [run(60, 0)]], base)
        >>> round(b.sd, 4), b.dof, b.runs, b.variants, b.seeds
        (0.0744, 2, 7, 4, 2)
    """
    rows: list[dict[Any, float]] = []
    kept_steps: list[dict[Any, Any]] = []
    base = dict(_log_times(baseline_runs))
    for group in [baseline_runs, *[g for g in groups if g is not baseline_runs]]:
        if not group or any(r.get("status") != "ok" or not r.get("reached") for r in group):
            continue
        cells = dict(_log_times(group))
        if len(cells) != len(group):
            continue
        cells = {k: x for k, x in cells.items() if k in base}
        steps = {r.get("repeat"): _trajectory(r) for r in group if r.get("repeat") in cells}
        if not cells or _twin_steps(steps, kept_steps):
            continue
        rows.append(cells)
        kept_steps.append(steps)
    if not rows or not base or rows[0] != base:
        return SeedBlocks(None, 0, 0, 0, 0)
    seeds = list(base)
    seed_eff = dict.fromkeys(seeds, 0.0)
    for _ in range(1000):  # backfitting: the least-squares fit of an additive model on an incomplete table
        var_eff = [statistics.fmean(x - seed_eff[k] for k, x in row.items()) for row in rows]
        new = {k: statistics.fmean(row[k] - var_eff[i] for i, row in enumerate(rows) if k in row) for k in seeds}
        moved = max(abs(new[k] - seed_eff[k]) for k in seeds)
        seed_eff = new
        if moved < 1e-13:
            break
    var_eff = [statistics.fmean(x - seed_eff[k] for k, x in row.items()) for row in rows]
    runs = sum(len(row) for row in rows)
    dof = runs - len(rows) - len(seeds) + 1
    ss = sum((x - var_eff[i] - seed_eff[k]) ** 2 for i, row in enumerate(rows) for k, x in row.items())
    return SeedBlocks(math.sqrt(ss / dof) if dof > 0 else None, dof, runs, len(rows), len(seeds))


def _trajectory(run: Mapping[str, Any]) -> Optional[tuple[Any, ...]]:
    """What a run's curve was: its steps to the target and the metric at each check (its best value without
    checks); ``None`` when unknown. Two runs that trained alike on one seed have the same, value for value (a check
    every epoch alone would make different curves that crossed at the same check look alike)."""
    steps = run.get("steps_to_target")
    if not isinstance(steps, int):
        return None
    values = tuple(c.get("value") for c in run.get("checks") or () if isinstance(c, Mapping))
    if all(v is None for v in values):
        values = (run.get("best_value"),)
    return None if all(v is None for v in values) else (steps, *values)


def _twin_steps(steps: Mapping[Any, Any], kept: Sequence[Mapping[Any, Any]]) -> bool:
    """Whether a variant's curves (seed -> :func:`_trajectory`) are those of one in ``kept`` on every seed they
    share."""
    if not steps or any(n is None for n in steps.values()):
        return False
    return any(
        shared and all(other[k] == steps[k] for k in shared)
        for other in kept
        for shared in [[k for k in steps if k in other]]
    )


#: runs a side from which a lead by ranks settles a gain that one seed carries (:func:`ranks_lead`)
RANK_LEAD_MIN_RUNS = 3


def ranks_lead(mine: Sequence[float], theirs: Sequence[float]) -> bool:
    """Whether every one of the candidate's times to the target (``mine``, logs or seconds) lies under every one of
    the baseline's (``theirs``), on :data:`RANK_LEAD_MIN_RUNS` runs a side or more.

    Of two setups that are the same (A/A), the candidate's three runs are the three fastest of six in 1 of 20 cases
    whatever the law of the times, heavy tails included; that is the case one outlying seed cannot make: a slow
    baseline seed lifts the mean gain but leaves the other runs interleaved. So a gain whose interval lies above 1.0
    and that one seed carries (:func:`one_run_carries`) is settled by ranks when the one more seed a side that would
    decide it does not fit the budget (:func:`pick_verdict`'s ``by_ranks``): such picks are a subset of the
    interval's own, and the A/A rate of the whole rule stays under the nominal whatever the budget holds
    (``benchmarks/target_aa.py --simulate``). On a slow task that seed is dear (the GRU of issue 37: about 140 s of
    a 575 s budget), and refusing for want of it handed the pick to the baseline.

    Examples:
        >>> ranks_lead([51.6, 38.2, 52.5], [73.1, 93.5, 92.6])
        True
        >>> ranks_lead([51.6, 38.2, 80.0], [73.1, 93.5, 92.6]), ranks_lead([40.0, 41.0], [90.0, 95.0])
        (False, False)
    """
    return len(mine) >= RANK_LEAD_MIN_RUNS and len(theirs) >= RANK_LEAD_MIN_RUNS and max(mine) < min(theirs)


def compare_target(
    summary: VariantSummary,
    runs: Sequence[Mapping[str, Any]],
    baseline: VariantSummary,
    baseline_runs: Sequence[Mapping[str, Any]],
    pooled: Optional[PooledSpread] = None,
    blocks: Optional[SeedBlocks] = None,
) -> None:
    """Time-to-target mode: the speed-up is the ratio of the baseline's and the variant's geometric mean times to
    the target; a miss leaves no ratio. The 95% interval is Student's t on the difference of mean log times:

    - with the seed as a block (``blocks``, :func:`seed_blocks`, at least :data:`MIN_BLOCK_DOF` dof): on the seeds
      both ran, the mean of the log ratios paired by seed, with the residual spread (:func:`blocked_decision`);
    - else with the ``pooled`` spread (:func:`pooled_spread`), so two repeats per variant still decide when the
      runs agree;
    - without either (or with one run in all), the repeats paired by seed."""
    if summary.target_missed or not summary.target_reached or not baseline.target_reached:
        return
    mine_by_seed, theirs_by_seed = _log_times(runs), _log_times(baseline_runs)
    mine, theirs = [x for _, x in mine_by_seed], [x for _, x in theirs_by_seed]
    if not mine or not theirs:
        return
    diff = statistics.fmean(theirs) - statistics.fmean(mine)
    summary.speedup = math.exp(diff)
    paired = paired_ratios(runs, baseline_runs, _time_to_target, higher_is_better=False)
    if paired:
        summary.speedup_range = (min(paired), max(paired))
    if blocks is not None and blocks.sd is not None and blocks.dof >= MIN_BLOCK_DOF:
        base = dict(theirs_by_seed)
        ratios = {k: base[k] - x for k, x in mine_by_seed if k in base}  # the log ratios on the seeds both ran
        if ratios:
            blocked_decision(summary, ratios, blocks)
            summary.rank_lead = ranks_lead(mine, theirs)
            return
    if pooled is not None and pooled.sd is not None and pooled.dof >= 1:
        half = t95(pooled.dof) * pooled.sd * math.sqrt(1 / len(mine) + 1 / len(theirs))
        summary.speedup_ci = (math.exp(diff - half), math.exp(diff + half))
        summary.decided_by = pooled.text()
        if diff - half > 0:
            seeds, base_seeds = [k for k, _ in mine_by_seed], [k for k, _ in theirs_by_seed]
            summary.carried_by = one_run_carries(mine, theirs, pooled, seeds, base_seeds)
            summary.rank_lead = ranks_lead(mine, theirs)
        else:
            summary.one_more_decides = one_more_seed_decides(mine, theirs, pooled)
    elif paired:
        _, lo, hi = ratio_interval(paired)
        summary.speedup_ci = (lo, hi)
        summary.decided_by = "repeats paired by seed"


def blocked_decision(summary: VariantSummary, ratios: Mapping[Any, float], blocks: SeedBlocks) -> None:
    """The decision with the seed as a block, on ``ratios`` (seed -> log of the baseline's time over the
    variant's, on the seeds both ran): the speed-up is their mean's exponential, the interval ``t(dof) * sd *
    sqrt(2 / seeds)`` around it (each log ratio has twice the residual variance). The two rules of issue 37 for
    heavy-tailed seeds, with the seed (both sides' runs of it) as the unit: a gain that one seed carries (without
    it, the interval no longer lies above 1.0) sets ``carried_by``; an undecided one whose every seed is a gain
    and that one more seed of both would lift above 1.0 if its figures held sets ``one_more_decides``.

    Examples:
        >>> import math
        >>> s = VariantSummary.empty()
        >>> blocked_decision(s, {0: math.log(1.79), 1: math.log(1.79)}, SeedBlocks(0.066, 2, 7, 4, 2))
        >>> round(s.speedup, 2), [round(x, 2) for x in s.speedup_ci], s.carried_by
        (1.79, [1.35, 2.38], None)
        >>> blocked_decision(s, {0: math.log(1.9), 1: math.log(1.02)}, SeedBlocks(0.066, 2, 7, 4, 2))
        >>> s.speedup_ci[0] > 1.0, s.carried_by
        (True, 'seed 0')
    """
    assert blocks.sd is not None
    logs = list(ratios.values())
    diff = statistics.fmean(logs)
    t = t95(blocks.dof)
    half = t * blocks.sd * math.sqrt(2 / len(logs))
    summary.speedup = math.exp(diff)
    summary.speedup_ci = (math.exp(diff - half), math.exp(diff + half))
    summary.decided_by = blocks.text()
    summary.carried_by, summary.one_more_decides = None, False
    if diff - half > 0:
        if len(logs) > 1:
            for seed, x in ratios.items():
                rest = (sum(logs) - x) / (len(logs) - 1)
                if rest - t * blocks.sd * math.sqrt(2 / (len(logs) - 1)) <= 0:
                    summary.carried_by = f"seed {seed}"
                    break
    elif min(logs) > 0:  # every seed a gain: an undecided lead seed by seed too
        summary.one_more_decides = diff - t95(blocks.dof + 1) * blocks.sd * math.sqrt(2 / (len(logs) + 1)) > 0


def _log_times(runs: Sequence[Mapping[str, Any]]) -> list[tuple[Any, float]]:
    """``(seed, log time to the target)`` of each run that completed and reached it (its seed: its ``repeat``)."""
    out = []
    for r in runs:
        t = _time_to_target(r) if r.get("status") == "ok" else None
        if t and t > 0:
            out.append((r.get("repeat"), math.log(t)))
    return out


def one_more_seed_decides(mine: Sequence[float], theirs: Sequence[float], pooled: PooledSpread) -> bool:
    """Whether one more run of each side would lift the interval on the gain (``mine``: the candidate's log times to
    the target, ``theirs``: the baseline's) above 1.0 if the mean log times and the pooled spread stayed as they are
    (two more degrees of freedom, one more run a side), and every candidate run beat every baseline run (a lead by
    ranks too, which heavy-tailed seeds rarely give by chance). An undecided candidate with a large gain on two
    seeds is short of runs, not of evidence: confirming it is worth more than a first run of a cut candidate. One
    extra look, so the A/A rate stays under the nominal (``benchmarks/target_aa.py --simulate``).

    Examples:
        >>> import math
        >>> spread = PooledSpread(0.15, 2, 4, 2)  # two seeds of two variants: t with 2 dof is 4.3
        >>> one_more_seed_decides([math.log(43), math.log(53)], [math.log(80), math.log(91)], spread)
        True
        >>> one_more_seed_decides([math.log(80), math.log(88)], [math.log(80), math.log(91)], spread)
        False
    """
    if pooled.sd is None or not mine or not theirs or max(mine) >= min(theirs):
        return False  # only a candidate whose every run beat every baseline run: an undecided lead by ranks too
    diff = statistics.fmean(theirs) - statistics.fmean(mine)
    half = t95(pooled.dof + 2) * pooled.sd * math.sqrt(1 / (len(mine) + 1) + 1 / (len(theirs) + 1))
    return diff - half > 0


def one_run_carries(
    mine: Sequence[float],
    theirs: Sequence[float],
    pooled: PooledSpread,
    seeds: Sequence[Any] = (),
    base_seeds: Sequence[Any] = (),
) -> Optional[str]:
    """The run (``"the candidate's seed 2"``) without which the variant's interval on its mean log time to the
    target (``mine``) against the baseline's (``theirs``) no longer lies above 1.0, with the same pooled spread;
    ``None`` when the gain survives dropping any one run. Seed-to-seed times are heavy-tailed (one seed in three
    may take twice as long): a t interval on two or three seeds under-covers them, and a pick that one slow
    baseline seed or one fast candidate seed carries is the A/A false pick (``benchmarks/target_aa.py``).

    Examples:
        >>> import math
        >>> spread = PooledSpread(0.2, 10, 12, 6)
        >>> one_run_carries([math.log(50), math.log(52)], [math.log(100), math.log(104)], spread) is None
        True
        >>> one_run_carries([math.log(50), math.log(52)], [math.log(80), math.log(160)], spread, [0, 1], [0, 1])
        "the baseline's seed 1"
    """
    assert pooled.sd is not None
    # the gain is the baseline's mean log time minus the candidate's: +1 when a candidate run is left out, -1 for
    # a baseline run
    sides = ((mine, theirs, seeds, "the candidate's", 1.0), (theirs, mine, base_seeds, "the baseline's", -1.0))
    for own, other, names, whose, sign in sides:
        if len(own) < 2:
            continue  # a side's only run cannot be left out
        for i in range(len(own)):
            rest = [x for j, x in enumerate(own) if j != i]
            half = t95(pooled.dof) * pooled.sd * math.sqrt(1 / len(rest) + 1 / len(other))
            diff = sign * (statistics.fmean(other) - statistics.fmean(rest))
            if diff - half <= 0:
                name = names[i] if i < len(names) and names[i] is not None else i
                return f"{whose} seed {name}"
    return None


def compare(
    summary: VariantSummary,
    runs: Sequence[Mapping[str, Any]],
    baseline: VariantSummary,
    baseline_runs: Sequence[Mapping[str, Any]],
    tolerance: float,
) -> None:
    """Fill in the speed-up, its range over paired repeats, the memory ratio and the sanity verdict."""
    base = baseline.samples_per_s.median
    if summary.samples_per_s.median is not None and base:
        summary.speedup = summary.samples_per_s.median / base
        paired = rate_ratios(runs, baseline_runs)
        if paired:
            summary.speedup_range = (min(paired), max(paired))
            _, lo, hi = ratio_interval(paired)
            summary.speedup_ci = (lo, hi)
    if summary.train_mem.median is not None and baseline.train_mem.median:
        summary.mem_ratio = summary.train_mem.median / baseline.train_mem.median
    if summary.runs_ok and summary.sane:
        summary.sane, summary.sanity = sanity_check(summary.loss.median, baseline.loss.median, tolerance)


# ------------------------------------------------------------------------------ confidence intervals
# t95 and ratio_interval live in functional.timing: one pairing rule for bench and the start-up probe


def paired_ratios(
    runs: Sequence[Mapping[str, Any]],
    baseline_runs: Sequence[Mapping[str, Any]],
    figure: Callable[[Mapping[str, Any]], Optional[float]],
    higher_is_better: bool = True,
) -> list[float]:
    """Per repeat, the variant's figure over the baseline's of the same repeat (inverted when lower is
    better, so a ratio above 1 is always a gain)."""
    base = {r.get("repeat"): figure(r) for r in baseline_runs if r.get("status") == "ok"}
    out = []
    for r in runs:
        if r.get("status") != "ok":
            continue
        mine, theirs = figure(r), base.get(r.get("repeat"))
        if mine and theirs:
            out.append(mine / theirs if higher_is_better else theirs / mine)
    return out


def rate_ratios(runs: Sequence[Mapping[str, Any]], baseline_runs: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per repeat, the variant's samples/s over the baseline's of the same repeat (:func:`paired_ratios`)."""
    return paired_ratios(runs, baseline_runs, _rate)


def can_still_clear(ratios: Sequence[float], repeats: int) -> bool:
    """Whether a variant whose paired ratios so far are ``ratios`` could still get an interval
    (:func:`~lightning_speedups.functional.timing.ratio_interval`) lying above 1.0 once all ``repeats`` ran, whatever
    the repeats still to come turn out to give. With no ratio yet the answer is yes. For a fixed mean of the ratios
    to come, their spread is least when they are all equal, so the best case is one value repeated: a search over
    one number. With two or three repeats a first ratio at or under 1.0 can never pay (with two, the interval's low
    end never exceeds the first ratio: the t of one degree of freedom is 12.7), so its other repeats would be spent
    for nothing.

    Examples:
        >>> can_still_clear([0.97], 2), can_still_clear([1.0], 2), can_still_clear([1.3], 2)
        (False, False, True)
        >>> can_still_clear([1.01, 1.02], 3), can_still_clear([0.9, 1.3], 3), can_still_clear([0.98], 3)
        (True, False, False)
        >>> can_still_clear([0.98], 10)  # nine more repeats at 1.5x would lift it
        True
        >>> can_still_clear([], 2)
        True
    """
    logs = [math.log(r) for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    if not logs:
        return True
    if repeats < 2 or len(logs) > repeats:
        return False

    def clears(x: float) -> bool:  # the interval bench uses, with every repeat to come at the log ratio x
        low = ratio_interval([math.exp(v) for v in (*logs, *[x] * (repeats - len(logs)))])[1]
        return low is not None and low > 1.0

    if len(logs) == repeats:
        return clears(0.0)
    # the low end falls without bound far out on both sides and peaks near the known logs: a fine grid around them
    # that holds each known log (the peak with two repeats) and their mean
    lo, hi = min(logs) - 1.0, max(logs) + 3.0
    grid = [lo + (hi - lo) * i / 2000 for i in range(2001)] + logs + [statistics.fmean(logs)]
    return any(clears(x) for x in grid)


def noise_floor(aa: Optional[VariantSummary]) -> float:
    """How far from 1.0 an A/A pair (the baseline against itself) landed: the gain noise alone gives."""
    return noise_of(None if aa is None else aa.speedup)


def pick_verdict(
    summary: Optional[VariantSummary], min_gain: float, noise: float = 0.0, by_ranks: bool = False
) -> tuple[bool, str]:
    """Whether a variant may be picked, and why (not): every run completed (and reached the target),
    it passed the sanity check, its confidence interval lies above 1.0, and its gain clears both
    ``min_gain`` and the A/A noise floor. A gain that one run carries waits for one more seed a side; with
    ``by_ranks`` (that seed did not fit the budget), a lead by ranks settles it (:func:`ranks_lead`).

    Examples:
        >>> s = VariantSummary.empty(); s.speedup, s.speedup_ci = 1.05, (1.01, 1.09)
        >>> pick_verdict(s, min_gain=0.02, noise=0.06)
        (False, 'gain 1.05x is within the noise floor (A/A pair off by 6.0%)')
        >>> pick_verdict(s, min_gain=0.02, noise=0.01)
        (True, 'gain 1.05x, 95% CI 1.01-1.09')
    """
    if summary is None or not summary.runs_ok:
        return False, "no run completed"
    if summary.runs_failed:
        return False, f"{summary.runs_failed} run(s) failed"
    if summary.target_missed and summary.target_outpaced == summary.target_missed:
        return False, (
            f"stopped past the time to the target of {summary.outpaced_by} in {summary.target_outpaced} of"
            f" {summary.runs_ok} run(s): slower than that one on its seed"
        )
    if summary.target_missed:
        return False, f"missed the target in {summary.target_missed} of {summary.runs_ok} run(s)"
    if not summary.sane:
        return False, f"failed the sanity check ({summary.sanity})"
    if summary.carried_by is not None and not (by_ranks and summary.rank_lead):
        return False, (
            f"one run carries its interval (without {summary.carried_by} it no longer lies above 1.0): one more seed"
            " of it and the baseline would decide"
        )
    lo, hi = summary.speedup_ci
    ok, why = gain_verdict(summary.speedup, lo, hi, min_gain, noise, min_gain_name="--min-gain")
    if ok and summary.carried_by is not None:
        why += (
            f"; {summary.carried_by} carries the interval and one more seed a side did not fit the budget: settled"
            " by ranks, every run of it beat every run of the baseline"
        )
    return ok, why
