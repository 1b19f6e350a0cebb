"""Time to a target (``bench --target``): how the candidates are ordered and planned, and how a bench's runs are
budgeted there (a candidate that missed stops, freed budget runs the candidates the plan cut, a run stops once it
can no longer be faster than the baseline). :class:`~lightning_speedups.bench.runner.Bench` takes
:class:`TargetRuns`' methods; the throughput phases and the pick stay in the runner."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Mapping
from typing import Any, NamedTuple, Optional

from lightning_speedups.bench.args import flatten, preset_speedups, trainer_overrides
from lightning_speedups.bench.host import BenchState
from lightning_speedups.bench.results import VariantRecord
from lightning_speedups.bench.stats import (
    FASTEST_SHARE,
    can_still_clear,
    compare,
    fastest_stretch_rate,
    fastest_windows_gain,
    fastest_windows_open,
    outpaced,
    pick_verdict,
    rate_ratios,
    summarize,
    window_rates,
)
from lightning_speedups.bench.variants import BASELINE, TARGET_VARIANTS, TIP_VARIANTS, Variant
from lightning_speedups.config import all_settings
from lightning_speedups.functional.precision import CPU_BF16_ENV, cpu_fast_bf16

#: time-to-target mode: the spans a learning-rate schedule is tried at, as shares of the optimizer steps the
#: baseline took to the target, likeliest winner first: annealed at three quarters of them (likely to
#: reach the target, and sooner), at half (a larger gain when the annealed model is good enough), at all
#: of them (reaches it, gains least)
PLAN_FRACTIONS = (0.75, 0.5, 1.0)
#: a schedule-free candidate's warm-up, as a share of the optimizer steps the baseline took to the target (the
#: ``schedulefree`` authors warm up over a few percent of the run)
SCHEDULE_FREE_WARMUP = 0.05
#: a candidate's run stops once its training time passes the slowest baseline run's time to the target
#: by this share (or by the baselines' own spread, when wider): from there it can no longer be faster
CAP_MARGIN = 0.10
#: parts whose being on changes no optimizer step: bench's start-up probe of ``auto`` settings (undone from memory)
#: and the data-wait monitor (a clock). A candidate whose other extra parts all stood down trained as its twin without
#: them does
OBSERVING_PARTS = frozenset({"auto_probe", "data_wait"})


def schedules(variant: Variant) -> bool:
    """Whether a variant turns on a learning-rate schedule (``lr_schedule.name`` other than off)."""
    return _schedule_name(variant) not in ("off", None)


def _schedule_name(variant: Variant) -> Any:
    return _settings(variant).get("lr_schedule.name")


def _settings(variant: Variant) -> dict[str, Any]:
    """The dotted ``speedups`` keys a variant sets: its presets' sections (the last winning, as in ``fit``), then
    its own overrides."""
    keys: dict[str, Any] = {}
    for section in preset_speedups(variant):
        keys.update(flatten(section))
    keys.update(variant.overrides)
    return keys


def _schedule_settings(variant: Variant) -> dict[str, Any]:
    """The settings that make a candidate's learning-rate curve: its schedule's (``lr_schedule.*``) and its batch
    (``largest_batch.*``); two candidates alike in these differ by throughput parts only."""
    return {k: v for k, v in _settings(variant).items() if k.startswith(("lr_schedule.", "largest_batch."))}


def with_measured_plans(variants: list[Variant], fractions: tuple[float, ...] = PLAN_FRACTIONS) -> list[Variant]:
    """Time-to-target mode: each variant with a schedule becomes one variant per span in ``fractions`` of
    the baseline's steps to the target (set by :meth:`Bench._plan_from_baseline` once measured). The
    config's own length is no plan for it: the run stops at the target, and a schedule over the rest of
    ``max_epochs`` (or Lightning's default 1000 epochs) is still warming up there.

    The one-cycle candidates (the presets' and the tips' own, such as T01's bolder peak) are ordered by span first,
    at the place of the first of them: every one-cycle at 0.75x, then every one at 0.5x, then at 1x, since a span
    that is too short or too long fails each of them alike, and a budget that cannot hold them all then keeps the
    likeliest span of each rather than every span of the first. A tip's schedule that a preset already runs with
    the same settings (T01's one-cycle: converge) is not run twice."""
    out: list[Variant] = []
    presets = [v for v in variants if v.kind == "preset" and schedules(v)]
    carried = [
        v for v in variants if v.kind == "tip" and schedules(v) and any(_carries(p, v.overrides) for p in presets)
    ]
    onecycle = [v for v in variants if v not in carried and v.plan_fraction is None and _schedule_name(v) == "onecycle"]

    def at(v: Variant, f: float) -> Variant:
        return dataclasses.replace(
            v,
            name=f"{v.name} @{f:g}x",
            plan_fraction=f,
            description=f"{v.description}; the schedule spans {f:g}x the baseline's steps to the target",
        )

    first = next((v for v in variants if v in onecycle), None)  # where the one-cycles go, before their reorder
    # within a span, each schedule's first candidate before a second with the same schedule (fast+converge, then
    # T01's bold peak, then converge): a second adds throughput parts only, and shares the first one's curve
    seen: list[dict[str, Any]] = []
    firsts: list[Variant] = []
    seconds: list[Variant] = []
    for v in onecycle:
        key = _schedule_settings(v)
        (seconds if key in seen else firsts).append(v)
        seen.append(key)
    onecycle = firsts + seconds
    for v in variants:
        if v in carried:
            continue
        if not schedules(v) or v.plan_fraction is not None:
            out.append(v)
            continue
        if v in onecycle:
            if v is first:
                out.extend(at(u, f) for f in fractions for u in onecycle)
            continue
        out.extend(at(v, f) for f in fractions)
    return out


def _longest_span_first(variants: list[Variant]) -> list[Variant]:
    """The one-cycles among ``variants`` put in their own places longest span first (1x, 0.75x, 0.5x), stably; the
    others stay where they are. For the twins at the stack's larger batch: their spans are the same share of the
    baseline's samples, and a larger batch needs more samples to the same loss (McCandlish et al. 2018, "An
    Empirical Model of Large-Batch Training": epochs grow as 1 + B / B_noise). On the GRU of issue 37 the one-cycle
    over 0.75x at batch 512 reached on seeds 0 and 1 and flattened at 0.880 on seed 2 in three benches, and that
    miss took 99 s of a 575 s budget."""
    slots = [i for i, v in enumerate(variants) if v.plan_fraction is not None and _schedule_name(v) == "onecycle"]
    ordered = sorted((variants[i] for i in slots), key=lambda v: -(v.plan_fraction or 0.0))
    out = list(variants)
    for i, v in zip(slots, ordered):
        out[i] = v
    return out


def target_order(tips: list[Variant], presets: list[Variant]) -> list[Variant]:
    """The candidates of a time-to-target bench, likeliest first, so that a --budget that cannot hold them
    all spends itself there: presets that change the optimisation (``converge``, ``fast+converge``), then
    the tips' own target-mode variants (the records' ``BenchVariant(mode="target")``), then the other
    presets, then the throughput-only tips (their samples/s gain shortens the time a little)."""

    owners = {s.path: owner for owner, s in all_settings()}

    def converges(v: Variant) -> bool:  # a preset that sets a key of a tip with target-mode variants
        keys = [k for section in preset_speedups(v) for k in flatten(section)]
        return any(
            owner in TARGET_VARIANTS
            for k in keys
            for path, owner in owners.items()
            if k == path or k.startswith(path + ".")
        )

    def target_tip(v: Variant) -> bool:
        return bool(v.tips) and v.tips[0] in TARGET_VARIANTS

    order = [v for v in presets if converges(v)]
    order += [v for v in tips if target_tip(v)]
    order += [v for v in presets if not converges(v)]
    order += [v for v in tips if not target_tip(v)]
    return order


#: the stack phase's timed window, in seconds of the baseline's run (:meth:`TargetRuns._stack_window`), and the
#: most steps it grows to
STACK_WINDOW_S = 1.5
STACK_MAX_STEPS = 400

#: the most paired repeats the stack phase adds for a lever every ratio of which is above 1.0 but whose interval is
#: not yet clear of it (:meth:`TargetRuns._extend`)
STACK_EXTRA = 2

#: throughput levers whose gains multiply: a faster precision pays on the large matrix products a larger batch gives
#: (:meth:`TargetRuns._stack_on_top`)
MULTIPLYING = ("T04", "T05")

#: the seeds a pick has run before the leftover budget explores (:meth:`TargetRuns._confirm_pick`)
CONFIRM_SEEDS = 3


class Cap(NamedTuple):
    """A target run's training-time cap (:meth:`TargetRuns._cap`)."""

    seconds: float
    #: why, when it is not ``--target-max-time``
    why: Optional[str] = None
    #: the leading candidate whose time set it (``None``: the baseline's did, or the user's cap)
    leader: Optional[str] = None
    #: the cap the baseline alone would have set, when a leader set a shorter one
    baseline_s: Optional[float] = None


def _batch_lever(variant: Variant) -> bool:
    """T04's larger batch with the linear learning-rate rule (``x4-linear``): the batch lever of the stack."""
    o = variant.overrides
    return variant.kind == "tip" and "largest_batch.batch_size" in o and o.get("largest_batch.lr_rule") == "linear"


def _stacked(paid: list[Variant]) -> dict[str, Any]:
    """The overrides of the throughput levers that paid, merged in tip order, each as timed (T04's with its batch,
    not the search of its own default)."""
    overrides: dict[str, Any] = {}
    for v in sorted(paid, key=lambda v: v.tips[0]):
        overrides.update(v.overrides)
    return overrides


def _side(record: VariantRecord) -> str:
    """What a stack lever was timed against, as its notes name it: the baseline, or the stack it went on top of."""
    return "the baseline" if record.variant.kind == "baseline" else record.variant.name.removesuffix(" (samples/s)")


def _curve_but_span(variant: Variant) -> dict[str, Any]:
    """:func:`_schedule_settings` without the span (``lr_schedule.plan``): the same schedule at the same batch."""
    return {k: v for k, v in _schedule_settings(variant).items() if k != "lr_schedule.plan"}


def _carries(variant: Variant, overrides: Mapping[str, Any]) -> bool:
    """Whether ``variant`` already sets every one of ``overrides`` to the same value (:func:`_settings`): a twin
    with them stacked would be it."""
    own = _settings(variant)
    return all(k in own and own[k] == v for k, v in overrides.items())


class TargetRuns(BenchState):
    """The time-to-target budgeting of a :class:`~lightning_speedups.bench.runner.Bench` (it inherits these)."""

    def _cannot_win(self, record: VariantRecord) -> bool:
        """Target mode: a candidate with a run that missed the target can no longer be picked (every run must
        reach it), so its other repeats are not run; the budget they would take goes to the next candidates."""
        if self.target is None or record.variant.kind in ("baseline", "aa"):
            return False
        missed = [r for r in record.runs if r.get("status") == "ok" and not r.get("reached")]
        if missed:
            if record.variant.name not in self._stopped:
                self._stopped.append(record.variant.name)
            self._spared.append(self._estimate(record.variant))
        return bool(missed)

    def _trained_as(self, record: VariantRecord) -> Optional[VariantRecord]:
        """Target mode: a candidate that already ran and trained as ``record`` would (``None``: none did). The
        other one sets every setting ``record`` sets, to the same value and at the same span, and whatever it sets
        beyond them stood down in every run (on this setup ``fast`` resolves to nothing on a small CPU model: its
        probe keeps 32-true, the loaders as they were, ...): the parts active in its runs, but for the ones that only
        observe (:data:`OBSERVING_PARTS`), are all parts of ``record``'s settings. Same settings and the same seeds
        give the same steps, so ``record``'s runs would repeat its curves (they did, value for value, on the LeNet
        task of issue 37), less the probe's start-up. Never for a ``record`` with ``auto`` settings of its own but the
        schedule's (its range test follows the loss, the same on the same seed): a start-up probe times those, and a
        measurement may resolve them otherwise."""
        if record.variant.kind not in ("preset", "tip", "stack"):
            return None
        mine = _settings(record.variant)
        if any(v == "auto" for k, v in mine.items() if not k.startswith("lr_schedule.")):
            return None  # timed by its own start-up probe, which may decide otherwise (the range test is not timed)
        sections = {k.split(".", 1)[0] for k in mine}
        for other in self.records:
            ok = [r for r in other.runs if r.get("status") == "ok"]
            if other is record or not ok or other.variant.plan_fraction != record.variant.plan_fraction:
                continue
            theirs = _settings(other.variant)
            if any(k not in theirs or theirs[k] != v for k, v in mine.items()):
                continue
            if all(
                isinstance(r.get("parts"), list)
                and {p[0] for p in r["parts"] if len(p) > 2 and p[2] == "active"} - OBSERVING_PARTS <= sections
                for r in ok
            ):
                return other
        return None

    def _sibling_missed(self, record: VariantRecord) -> Optional[str]:
        """Why ``record`` may not be picked though every run of it reached (``None``: it may): a candidate with the
        same schedule, span and batch (:func:`_schedule_settings`; they differ by throughput parts only) missed the
        target on a seed ``record`` has not run. On the GRU of issue 37, the one-cycle over 0.75x at batch 512
        flattened at 0.880 on seed 2 in two benches, with and without `fast`'s parts; the twin the budget could not
        confirm would have been picked on seeds 0 and 1."""
        if (
            self.target is None
            or record.variant.kind not in ("preset", "tip", "stack")
            or not schedules(record.variant)
        ):
            return None
        mine = _schedule_settings(record.variant)
        ran = {r.get("repeat") for r in record.runs}
        for other in self.records:
            if other is record or other.variant.plan_fraction != record.variant.plan_fraction:
                continue
            if _schedule_settings(other.variant) != mine:
                continue
            missed = [
                r.get("repeat")
                for r in other.runs
                if r.get("status") == "ok" and not r.get("reached") and not outpaced(r) and r.get("repeat") not in ran
            ]
            if missed:
                return (
                    f"not picked: {other.variant.name} trains the same schedule at the same batch and missed the target"
                    f" on seed {self.options.seed + int(missed[0] or 0)}, which this one has not run"
                )
        return None

    def _skip_twin(self, record: VariantRecord) -> bool:
        """Mark ``record`` not run when a candidate that already ran trained as it would (:meth:`_trained_as`), when
        it trains at the stack's larger batch and that batch already failed (:meth:`_batch_failed`), or when the same
        one-cycle over a longer span flattened short of the target (:meth:`_longer_flattened`)."""
        if self.target is None or record.runs:
            return False
        failed = self._batch_failed(record)
        if failed is not None:
            record.skipped = failed
            self._batch_dropped.append(record.variant.name)
            return True
        longer = self._longer_flattened(record)
        if longer is not None:
            record.skipped = longer
            self._shorter_dropped.append(record.variant.name)
            return True
        twin = self._trained_as(record)
        if twin is None:
            return False
        record.skipped = (
            f"not run: it would train as {twin.variant.name} did (the same settings, the same seeds: what that one"
            " sets beyond them stood down on this setup)"
        )
        self._twins.append(f"{record.variant.name} (as {twin.variant.name})")
        return True

    def _longer_flattened(self, record: VariantRecord) -> Optional[str]:
        """Why a one-cycle candidate is not run (``None``: it is): the same schedule at the same batch
        (:func:`_schedule_settings` but for its plan) over a longer span flattened short of the target on a seed. A
        one-cycle anneals at the end of its plan, and the same peak annealed after fewer steps settles no higher (the
        final loss falls with the steps of a schedule: Hoffmann et al. 2022, "Training Compute-Optimal Large Language
        Models", where each cosine cycle is matched to its run's length). In every bench of issue 37 where a one-cycle
        flattened at 0.75x or 1x, the same one at a shorter span missed on that seed too (10 of 10, each lower), and
        each took about one baseline run of a 450 s budget. A longer span stopped by its time cap, still improving,
        says nothing of a shorter one, which anneals sooner."""
        v = record.variant
        if v.plan_fraction is None or _schedule_name(v) != "onecycle":
            return None
        mine = _curve_but_span(v)
        for other in self.records:
            o = other.variant
            if other is record or o.plan_fraction is None or o.plan_fraction <= v.plan_fraction:
                continue
            if _curve_but_span(o) != mine:
                continue
            flat = [r for r in other.runs if r.get("status") == "ok" and r.get("flattened")]
            if flat:
                return (
                    f"not run: {o.name}, the same one-cycle over a longer span, flattened short of the target on seed"
                    f" {self.options.seed + int(flat[0].get('repeat') or 0)} (a shorter cycle anneals after fewer"
                    " steps, to a plateau no higher)"
                )
        return None

    def _batch_failed(self, record: VariantRecord) -> Optional[str]:
        """Why a candidate at the stack's larger batch is not run (``None``: it is): the first candidate at that
        batch, the likeliest (the plan's order), missed the target and none at that batch has reached it. A larger
        batch that pays by samples/s may still cost more epochs than it saves (the LeNet of issue 37 under SGD: every
        candidate at batch 512 missed, and the five of them took the budget its 2x pick had needed), so the plan
        tries it once before it commits to it; on the GRU it reached at the first try and stayed."""
        if record.variant.kind != "stack" or "largest_batch.batch_size" not in record.variant.overrides:
            return None
        tried = [
            r
            for r in self.records
            if r is not record
            and r.runs
            and r.variant.kind == "stack"
            and "largest_batch.batch_size" in r.variant.overrides
        ]
        if any(run.get("reached") for r in tried for run in r.runs):
            return None
        # a run stopped at a leader's time lost to that one; it did not miss at this batch
        missed = [r for r in tried if any(not outpaced(run) for run in r.runs)]
        if not missed:
            return None
        first = missed[0]
        return (
            f"not run: the stack's larger batch (largest_batch.batch_size"
            f" {record.variant.overrides['largest_batch.batch_size']}) missed the target on {first.variant.name},"
            " its likeliest candidate, and no candidate at that batch has reached it"
        )

    def _run_waiting(self, repeats: int) -> None:
        """Target mode: the budget left once the planned candidates ran (a candidate that missed stops, one that
        reached ran shorter than the plan counted) runs the candidates the plan had cut, in its order, one seed at
        a time: a candidate starts while one run fits (a run that cannot win stops at the baseline's time, so a
        first seed costs at most about one baseline run), and its next seed runs only while it has reached the
        target and that seed fits (estimated from its own runs, shorter than the baseline's when it can win). A
        candidate that reached on every seed it ran is confirmed, if it would be picked, before the next one starts
        (:meth:`_confirm_pick`): on LeNet with bf16 (issue 37, run 8 of the task) the 0.5x one-cycle, picked on two
        seeds, was left unconfirmed because the budget went to the 1x fast+converge after it (47 s, slower than the
        baseline); confirmed, it caps the next ones at its time (:meth:`_cap`)."""
        base = self.records[0]
        ran, short = [], []
        for record in list(self._waiting):
            if record not in self._waiting:  # a span descent ran it already (:meth:`_descend_span`)
                continue
            if self._skip_twin(record):
                self._waiting.remove(record)
                continue
            if self._estimate(record.variant) > self._remaining():
                break
            self._run_cut(record, repeats)
            ran.append(record.variant.name)
            if len(record.runs) < repeats and all(r.get("reached") for r in record.runs):
                short.append(f"{record.variant.name} ({len(record.runs)} of {repeats})")
            elif record.runs and all(r.get("reached") for r in record.runs):
                self._summarize_phase_one(base)
                self._settle_pick(base, repeats)
        if short:
            self.notes.append(
                "the budget ran out before every seed of: " + ", ".join(short) + " (fewer seeds than the others: a"
                " candidate with one run has no interval and is not picked)"
            )
        if ran:
            self.notes.append(
                f"the budget the planned candidates left (a miss cannot be picked, so its other repeats were not run;"
                f" a candidate that reached ran shorter than planned) ran: {', '.join(ran)}"
            )

    def _run_cut(self, record: VariantRecord, repeats: int) -> None:
        """Run a candidate the plan had cut, from the leftover budget: one seed at a time, up to ``repeats``, while
        it can still win (a miss stops it) and each seed fits the budget."""
        self._waiting.remove(record)
        record.skipped = None
        self._add_total(repeats)
        for repeat in range(repeats):
            if self._cannot_win(record) or self._estimate(record.variant) > self._remaining():
                self._add_total(-1)
                continue
            self._run_one(record, repeat)

    def _settle_pick(self, base: VariantRecord, repeats: int) -> None:
        """Target mode, once a candidate reached on every seed it ran: the would-be pick's shorter span first
        (:meth:`_descend_span`), then its confirmation (:meth:`_confirm_pick`), until neither runs anything; the
        summaries are made again after each."""
        while self._descend_span(base, repeats) or self._confirm_pick(base):
            self._summarize_phase_one(base)

    def _would_pick(self) -> Optional[VariantRecord]:
        """The candidate that would be picked now (``None``: none would): of those whose verdict picks them, the
        fastest."""
        min_gain = self.options.min_gain
        pickable = [
            r
            for r in self.records
            if r.summary is not None
            and r.variant.kind not in ("baseline", "aa")
            and r.summary.speedup is not None
            and pick_verdict(r.summary, min_gain)[0]
        ]
        if not pickable:
            return None
        return max(pickable, key=lambda r: (r.summary.speedup if r.summary is not None else None) or 0.0)

    def _descend_span(self, base: VariantRecord, repeats: int) -> bool:
        """Target mode, before the would-be pick is confirmed: when it trains a schedule over a planned span and the
        plan cut the same schedule at the same batch over the next shorter span, that one runs next, ahead of the
        plan's order (its seeds up to ``repeats``, stopped at a miss). The span is the one lever whose direction is
        known: the same curve that reaches over fewer steps reaches sooner, and its runs cost less than the pick's
        when it does. It is the pick's neighbour, and an iterated local search tries the incumbent's neighbours
        first (Hutter et al. 2009, "ParamILS"). On LeNet with bf16 (issue 37, run 9 of the task) the plan's order
        gave the leftover budget to fast+converge @0.5x and the 0.75x pick's confirmation, and the bold peak over
        0.5x, which reached in two other benches of the task (2.3x and 2.5x by ``fit``), did not fit after them.
        Once per pick; returns whether a run ran (then the summaries are made again, and the faster of the two is
        the one :meth:`_confirm_pick` confirms)."""
        pick = self._would_pick()
        if pick is None or pick.variant.name in self._descended:
            return False
        v = pick.variant
        if v.plan_fraction is None or not schedules(v):
            return False
        self._descended.append(v.name)
        curve = _curve_but_span(v)
        shorter = [
            r
            for r in self._waiting
            if r.variant.plan_fraction is not None
            and r.variant.plan_fraction < v.plan_fraction
            and _curve_but_span(r.variant) == curve
        ]
        if not shorter:
            return False
        span = max(r.variant.plan_fraction or 0.0 for r in shorter)
        for record in [r for r in shorter if r.variant.plan_fraction == span]:
            if self._skip_twin(record):
                self._waiting.remove(record)
                continue
            need = self._estimate(record.variant)
            if need > self._remaining():
                self.notes.append(
                    f"{v.name} led on {len(pick.runs)} seeds; the same schedule over the next shorter span,"
                    f" {record.variant.name} (about {need:.0f} s a run), no longer fit in the"
                    f" {self.options.flag('budget')}"
                )
                return False
            self._run_cut(record, repeats)
            reached = [r for r in record.runs if r.get("reached")]
            said = (
                f"reached the target on {len(reached)} of {len(record.runs)} seeds"
                if len(reached) == len(record.runs)
                else "missed the target: it cannot be picked"
            )
            self.notes.append(
                f"{v.name} led on {len(pick.runs)} seeds: the same schedule over the next shorter span,"
                f" {record.variant.name}, ran before its confirmation and the plan's other candidates (a shorter span"
                f" that reaches is faster), and it {said}"
            )
            return bool(record.runs)
        return False

    def _stack_from_throughput(self) -> None:
        """Target mode (issue 37, item 1): the throughput tips in the plan (precision, compilation, memory layout,
        loader workers, ...) are first timed by samples/s, each against the baseline over paired repeats of a short
        run (``--steps``, ``--warmup``) as a throughput bench times them; those that pay here (their interval above
        1.0 and clear of ``--min-gain``, their loss sane) are stacked into one set of overrides, and each candidate
        that changes the optimisation (a schedule, the schedule-free twin) gets a twin with the stack on top
        (``stack:T05+T24 + T01 lr-schedule onecycle @0.75x``), run first; the stack alone runs too. The throughput
        tips are then not run to the target one by one: their gain is in the stack. A tip that can no longer pay
        (:meth:`_cannot_pay`) gets no more repeats, and once none is left the baseline gets none either."""
        o = self.options
        speed = [
            v
            for v in self.variants
            if v.kind == "tip" and len(v.tips) == 1 and v.tips[0] in TIP_VARIANTS and v.tips[0] not in TARGET_VARIANTS
        ]
        if self.device == "cpu" and cpu_fast_bf16() is None and any(v.tips[0] == "T05" for v in speed):
            # as `precision: auto` does: no bf16 kernels here (or the pack's view forced so), bf16 is emulated and
            # slower than fp32 at any batch (0.83x on a Xeon without AMX; an LSTM in bf16 does not run). Timed here,
            # a forced view on a CPU that has them would stack a gain the hardware it stands for cannot give.
            speed = [v for v in speed if v.tips[0] != "T05"]
            self.variants = [v for v in self.variants if not (v.kind == "tip" and v.tips == ("T05",))]
            self.notes.append(
                "stack: T05 not timed: this CPU has no bf16 kernels by the pack's view (AMX or AMD avx512_bf16;"
                f" {CPU_BF16_ENV} forces it), where bf16 is emulated and slower than fp32, as `precision: auto` knows"
            )
        # the larger batch with the linear rule (T04 x4-linear) is a throughput lever too: timed by samples/s at its
        # batch, and stacked when it pays; what it does to the optimisation the candidates' runs to the target judge
        speed += [v for v in self.variants if _batch_lever(v)][:1]
        if not speed:
            return
        repeats = max(2, o.repeats)
        base = VariantRecord(dataclasses.replace(BASELINE, name="baseline (samples/s)"), phase=0)
        timed = [VariantRecord(v, phase=0) for v in speed]
        # the runs are timed by samples/s as a throughput bench times them: no target, one seed, its Trainer settings
        target, self.target = self.target, None
        settings = self.trainer_overrides
        self.trainer_overrides = trainer_overrides(
            dataclasses.replace(o, target=None), self.device, os.path.join(self.root, "trainer")
        )
        dropped: dict[str, str] = {}  # tip name -> why its repeats to come were not run
        spared: dict[str, int] = {}  # tip name (and the baseline's) -> how many repeats were not run
        window = None
        try:
            self._add_total(repeats * (1 + len(timed)))
            window = self._stack_window(base)
            self._paired_rounds(base, timed, repeats, dropped, spared)
            on_top = self._stack_on_top(base, timed, dropped, spared, repeats)
        finally:
            self.target, self.trainer_overrides, self.options = target, settings, o
        self.stack_records = [base, *timed]
        for _, *pair in on_top:
            self.stack_records += [r for r in pair if not any(r is k for k in self.stack_records)]
        paying, said = [], []
        paid: list[Variant] = []
        for record in timed:
            ok, why = self._stack_verdict(record, base, dropped)
            said.append(f"{record.variant.name} {why}")
            if ok:
                paying.append(record.variant.tips[0])
                paid.append(record.variant)
        for tip, under, over in on_top:
            ok, why = self._stack_verdict(over, under, dropped)
            said.append(f"{tip.name} on top of {under.variant.name.removesuffix(' (samples/s)')} {why}")
            if ok:
                paying.append(tip.tips[0])
                paid.append(tip)
        if dropped:
            self.notes.append(
                f"stack: {len(dropped)} throughput tip(s) had their samples/s repeats to come spared, since no figures"
                f" they could give would lift their interval above 1.0 ({', '.join(dropped)}): about"
                f" {self._stack_saved(self.stack_records, spared):.0f} s of the budget kept for the candidates"
            )
        # a larger batch that did not pay by samples/s may still win by what it does to the optimisation: its
        # variants stay candidates to the target
        self.variants = [v for v in self.variants if v not in speed or (_batch_lever(v) and v not in paid)]
        if not paying:
            self.notes.append(
                "stack: no throughput tip paid by samples/s here (" + "; ".join(said) + "): no stacked candidate"
            )
            return
        stack = tuple(sorted(paying))
        overrides = _stacked(paid)
        label = "stack:" + "+".join(stack)
        front: list[Variant] = []  # per candidate that changes the optimisation, in the plan's order: its twin
        carrying: list[Variant] = []  # or itself, where it already sets the stack (fast's `optimizer: auto` is T06's)
        for v in self.variants:
            if v.kind in ("tip", "preset") and (
                v.plan_fraction is not None or v.overrides.get("schedule_free.enabled")
            ):
                if _carries(v, overrides):
                    carrying.append(v)
                    front.append(v)
                    continue
                front.append(
                    dataclasses.replace(
                        v,
                        name=f"{label} + {v.name}",
                        kind="stack",
                        tips=tuple(dict.fromkeys((*v.tips, *stack))),
                        overrides={**overrides, **v.overrides},
                        description=f"{v.description}; with {' + '.join(stack)} stacked",
                    )
                )
        larger = "largest_batch.batch_size" in overrides
        if larger:
            front = _longest_span_first(front)
        alone = Variant(label, "stack", stack, overrides=dict(overrides), description="the throughput tips that paid")
        rest = [v for v in self.variants[1:] if v not in carrying]
        self.variants = [self.variants[0], *front, alone, *rest]
        twins = len(front) - len(carrying)
        self.notes.append(
            f"stack: timed by samples/s first ({repeats} paired repeats of {o.warmup} +"
            f" {window[0] if window else o.steps} batches{window[1] if window else ''}; samples/s over the fastest"
            f" {FASTEST_SHARE:.0%} of each): "
            + "; ".join(said)
            + f". Stacked {', '.join(stack)} onto {twins} candidate(s) that change the optimisation, run"
            " first; the throughput tips were not run to the target one by one"
            + (
                "; at the larger batch the one-cycles go longest span first (1x, 0.75x, 0.5x): a larger batch"
                " needs more samples to the same loss"
                if larger
                else ""
            )
            + (
                f"; {len(carrying)} candidate(s) already set it ({', '.join(v.name for v in carrying)}): run first"
                " as they are, with no twin"
                if carrying
                else ""
            )
        )

    def _cannot_pay(self, record: VariantRecord, base: VariantRecord, repeats: int) -> Optional[str]:
        """Why a throughput tip of the stack phase can no longer pay, before its next repeat (``None``: it still
        can): a run failed, its loss failed the sanity check, or no figures of its repeats to come could lift its
        interval above 1.0 (:func:`~lightning_speedups.bench.stats.can_still_clear`: with two or three repeats, a
        first paired ratio at or under 1.0) nor, from its second window on, its fastest windows make it pay
        (:meth:`_fastest_open`)."""
        summary, base_summary = summarize(record.runs), summarize(base.runs)
        compare(summary, record.runs, base_summary, base.runs, self._stack_tolerance(record.variant, base.variant))
        if summary.runs_failed or not summary.runs_ok:
            return "a run failed, so it cannot pay: its repeats to come were not run"
        if not summary.sane:
            return f"failed the sanity check ({summary.sanity}): its repeats to come were not run"
        ratios = rate_ratios(record.runs, base.runs)
        if ratios and all(r > 1.0 for r in ratios):
            repeats += STACK_EXTRA  # every ratio so far above 1.0: it may get more repeats (:meth:`_extend`)
        if can_still_clear(ratios, repeats) or self._fastest_open(record, base):
            return None
        shown = ", ".join(f"{r:.2f}x" for r in ratios)
        fastest = (
            f", nor did its fastest window beat {_side(base)}'s by --min-gain"
            if len(window_rates(record.runs)) > 1
            else ""
        )
        return (
            f"samples/s {shown} of {_side(base)}'s over {len(ratios)} of {repeats} repeats: no figures of the"
            f" repeats to come could lift its interval above 1.0{fastest}, so they were not run"
        )

    def _fastest_open(self, record: VariantRecord, base: VariantRecord) -> bool:
        """Whether ``record``, with two windows or more, may still pay by its fastest windows
        (:func:`~lightning_speedups.bench.stats.fastest_windows_open`). After one window a lever at or under the
        baseline is dropped, as the paired interval drops it."""
        mine = window_rates(record.runs)
        return len(mine) > 1 and fastest_windows_open(mine, window_rates(base.runs), self.options.min_gain)

    def _paired_rounds(
        self,
        base: VariantRecord,
        records: list[VariantRecord],
        repeats: int,
        dropped: dict[str, str],
        spared: dict[str, int],
    ) -> None:
        """``repeats`` rounds of samples/s runs, ``base`` then each of ``records`` still able to pay
        (:meth:`_cannot_pay`; one that cannot is dropped, its repeats to come spared, and the base's too once none is
        left), then the extra repeats of the undecided (:meth:`_extend`). A base run already there (the window's
        calibration) counts as its first repeat."""
        running = list(records)
        for repeat in range(repeats):
            if repeat > 0:
                for record in list(running):
                    why = self._cannot_pay(record, base, repeats)
                    if why:
                        running.remove(record)
                        dropped[record.variant.name] = why
                        spared[record.variant.name] = repeats - repeat
                        self._add_total(-(repeats - repeat))
                if not running:  # the base's runs to come would pair with nothing
                    self._add_total(-(repeats - repeat))
                    spared[base.variant.name] = repeats - repeat
                    return
            for record in (base, *running):
                if record is not base or len(base.runs) <= repeat:
                    self._run_rate(record, repeat)
        self._extend(running, base, repeats)

    def _extend(self, running: list[VariantRecord], base: VariantRecord, repeats: int) -> None:
        """Up to :data:`STACK_EXTRA` more paired repeats, one at a time, for the levers still undecided after
        ``repeats``: every ratio above 1.0 (or a fastest window that beat the baseline's, :meth:`_fastest_open`), the
        lever not yet paying, and one that more repeats could still clear (t with 2 dof is 4.3: on the GRU of issue
        37 the larger batch read 1.13x and 1.40x, and no third repeat could have lifted it). The decision to the
        target judges a stacked lever again, so a looser stop here costs at most a candidate's twin."""
        for repeat in range(repeats, repeats + STACK_EXTRA):
            undecided = [
                r
                for r in running
                if len(r.runs) == repeat
                and (all(x > 1.0 for x in rate_ratios(r.runs, base.runs)) or self._fastest_open(r, base))
                and not self._stack_verdict(r, base, {})[0]
                and self._cannot_pay(r, base, repeats) is None
            ]
            if not undecided:
                return
            self._add_total(1 + len(undecided))
            for record in (base, *undecided):
                self._run_rate(record, repeat)

    def _run_rate(self, record: VariantRecord, repeat: int) -> dict[str, Any]:
        """One samples/s run of the stack phase, its rate that of the fastest tenth of its window
        (:func:`~lightning_speedups.bench.stats.fastest_stretch_rate`; the window's mean kept as
        ``samples_per_s_window``): the baseline's own samples/s moved by 27% between two repeats of one bench (the
        GRU of issue 37: its median step 19.8 ms, then 26.5 ms, its fastest 18.6 and 19.8 ms)."""
        run = self._run_one(record, repeat)
        fastest = fastest_stretch_rate(run.get("step_times") or [], run.get("samples") or [])
        if run.get("status") == "ok" and fastest is not None:
            run["samples_per_s_window"] = run.get("samples_per_s")
            run["samples_per_s"] = fastest
        return run

    def _stack_window(self, base: VariantRecord) -> Optional[tuple[int, str]]:
        """The stack phase's timed window: ``--steps`` batches of a small model take a fraction of a second (0.2 s
        on the LeNet of issue 37), where one time slice lent to another process moves samples/s by 10-30% (a 1.16x
        and a 1.47x repeat of T04 on the GRU). One calibration run of the baseline measures the window; below
        :data:`STACK_WINDOW_S` the steps grow to fill it (at most :data:`STACK_MAX_STEPS`), and every run of the
        phase, the baseline's too, is timed over them (the calibration run is then not kept; else it is the
        baseline's first repeat). Sets ``self.options``
        for the phase (the caller puts it back); returns ``(steps, why)`` or ``None`` when ``--steps`` is long
        enough."""
        o = self.options
        probe = self._run_rate(base, 0)  # the baseline's first repeat, kept when its window is long enough
        timed = float(probe.get("timed_s") or 0.0)
        if probe.get("status") != "ok" or timed <= 0.0 or timed >= STACK_WINDOW_S:
            return None
        steps = min(STACK_MAX_STEPS, max(o.steps, math.ceil(o.steps * STACK_WINDOW_S / timed)))
        if steps == o.steps:
            return None
        base.runs.clear()  # a calibration: the phase's repeats are all timed over the same window
        self._add_total(1)
        self.options = dataclasses.replace(o, steps=steps)
        why = f", {steps} rather than --steps {o.steps}: the baseline's {o.steps} took {timed:.2f} s"
        return steps, why

    def _stack_tolerance(self, variant: Variant, against: Variant) -> float:
        """The sanity check's loss tolerance for a throughput lever timed against ``against``: at another batch (the
        larger batch's loss after as many steps has seen four times the samples) the losses are not comparable, so
        only a non-finite one fails it."""
        batch = "largest_batch.batch_size"
        same = variant.overrides.get(batch) == against.overrides.get(batch)
        return self.options.loss_tolerance if same else math.inf

    def _stack_verdict(
        self, record: VariantRecord, against: VariantRecord, dropped: Mapping[str, str]
    ) -> tuple[bool, str]:
        """Whether a throughput lever of the stack phase pays against ``against`` (paired by repeat), and why; sets
        both summaries: its paired interval clears 1.0, or else its fastest windows do
        (:func:`~lightning_speedups.bench.stats.fastest_windows_gain`: one slow window of either side leaves the
        interval undecided). A lever whose repeats to come were spared (``dropped``) does not, for the reason
        given."""
        record.summary, against.summary = summarize(record.runs), summarize(against.runs)
        tolerance = self._stack_tolerance(record.variant, against.variant)
        compare(record.summary, record.runs, against.summary, against.runs, tolerance)
        ok, why = pick_verdict(record.summary, self.options.min_gain)
        s = record.summary
        if not ok and record.variant.name not in dropped and s.runs_ok and not s.runs_failed and s.sane:
            fast, said = fastest_windows_gain(
                window_rates(record.runs), window_rates(against.runs), self.options.min_gain, _side(against)
            )
            if fast:
                ok, why = True, f"pays by its {said}; its paired interval did not decide ({why})"
                s.decided_by, s.picked_why = "its fastest windows", why
        if record.variant.name in dropped:
            ok, why = False, dropped[record.variant.name]
            record.summary.picked_why = why
        return ok, why

    def _stack_on_top(
        self,
        base: VariantRecord,
        timed: list[VariantRecord],
        dropped: dict[str, str],
        spared: dict[str, int],
        repeats: int,
    ) -> list[tuple[Variant, VariantRecord, VariantRecord]]:
        """The stack phase's second pass: levers that multiply (:data:`MULTIPLYING`). A faster precision pays on
        large matrix products, which the larger batch gives: on the GRU of issue 37 with avx512_bf16, bf16 gave
        0.87-1.11x the samples/s at the configured batch 128 and 1.93x at batch 512 (13,100 against 6,800). Timed
        one by one against the baseline, each may fail to pay while the two together pay most. So when one of them
        paid and the other did not (its runs sane, none failed), the other is timed again on top of what paid,
        paired against what paid alone, over as many repeats (spared as in the first pass); it joins the stack when
        it pays there. Returns ``(lever, what paid alone, the lever on top)`` per lever timed again (their runs go
        to the phase's records)."""
        verdicts = {r.variant.tips[0]: (r, self._stack_verdict(r, base, dropped)[0]) for r in timed}
        paid = [r.variant for r, ok in verdicts.values() if ok]
        if not any(v.tips[0] in MULTIPLYING for v in paid):
            return []
        again = [
            r
            for tip, (r, ok) in verdicts.items()
            if tip in MULTIPLYING
            and not ok
            and r.summary is not None
            and r.summary.runs_ok
            and not r.summary.runs_failed
            and r.summary.sane
        ]
        if not again:
            return []
        stack = tuple(sorted(v.tips[0] for v in paid))
        overrides = _stacked(paid)
        under = VariantRecord(
            Variant(
                f"stack:{'+'.join(stack)} (samples/s)",
                "stack",
                stack,
                overrides=dict(overrides),
                description="the throughput tips that paid alone",
            ),
            phase=0,
        )
        out: list[tuple[Variant, VariantRecord, VariantRecord]] = []
        for record in again:
            tip = record.variant
            both = tuple(sorted((*stack, tip.tips[0])))
            over = VariantRecord(
                Variant(
                    f"stack:{'+'.join(both)} (samples/s)",
                    "stack",
                    both,
                    overrides={**overrides, **tip.overrides},
                    description=f"{tip.name} on top of the throughput tips that paid alone",
                ),
                phase=0,
            )
            out.append((tip, under, over))
        self._add_total(repeats * (1 + len(out)))
        self._paired_rounds(under, [over for _, _, over in out], repeats, dropped, spared)
        return out

    @staticmethod
    def _stack_saved(records: list[VariantRecord], spared: dict[str, int]) -> float:
        """The seconds the spared repeats would have taken, each as long as the variant's first run."""
        return sum(
            float(r.runs[0].get("wall_s") or 0.0) * spared[r.variant.name]
            for r in records
            if r.variant.name in spared and r.runs
        )

    def _confirm_leader(self, base: VariantRecord) -> bool:
        """Target mode, before the leftover budget goes to the candidates the plan cut: confirm the leader before
        exploring. The fastest candidate that every run of reached, whose gain clears ``--min-gain`` but that may not
        be picked yet for want of runs, gets one more seed, and the baseline too, while the budget holds both: one
        run carries its interval (:func:`~lightning_speedups.bench.stats.one_run_carries`: what
        :meth:`_one_more_seed` does at the end, done first), or its interval still includes 1.0 and one more seed
        a side would decide it if its figures held (:func:`~lightning_speedups.bench.stats.one_more_seed_decides`).
        Not when a candidate at least as fast may already be picked. Once per bench (the A/A rate of these extra
        looks: ``benchmarks/target_aa.py --simulate``). Needs the summaries made; returns whether it ran (then
        they are made again)."""
        min_gain = self.options.min_gain
        ready, leader, lead = 0.0, None, 0.0
        for record in self.records:
            s = record.summary
            if s is None or record.variant.kind in ("baseline", "aa") or s.speedup is None:
                continue
            if pick_verdict(s, min_gain)[0]:
                ready = max(ready, s.speedup)
            elif (
                (s.carried_by or s.one_more_decides)
                and s.sane
                and not (s.runs_failed or s.target_missed)
                and s.speedup >= 1.0 + min_gain
                and s.speedup > lead
            ):
                leader, lead = record, s.speedup
        if leader is None or leader.summary is None or ready >= lead:
            return False
        carried = leader.summary.carried_by
        why = (
            f"one run carried its interval (without {carried} it no longer lay above 1.0)"
            if carried
            else "its interval still included 1.0, and one more seed a side would decide it if its figures held"
        )
        name = leader.variant.name
        need = self._one_more_pair(base, leader)
        if need is not None:
            if carried:
                self._short_of_seed.append(name)
            self.notes.append(
                f"{name} led, but {why}: one more seed of it and the baseline (about {need:.0f} s) no longer fit in"
                f" the {self.options.flag('budget')}"
            )
            return False
        if carried:
            self._confirmed_carried.append(name)
        self.notes.append(
            f"{name} led, and {why}: one more seed of it and the baseline ran before the leftover budget went to the"
            " candidates the plan cut"
        )
        return True

    def _confirm_pick(self, base: VariantRecord) -> bool:
        """Target mode, before the leftover budget explores the candidates the plan cut: the candidate that would be
        picked, if it ran fewer than :data:`CONFIRM_SEEDS` seeds, gets one more (and the baseline that seed, when it
        has none yet) while the budget holds both. The fastest of many candidates on two seeds is the likeliest to
        have reached the target by a seed's luck: a schedule that anneals just as the metric reaches the target
        reaches it on some seeds and flattens short of it on others (the GRU of issue 37 at batch 512, one-cycle over
        0.75x: 0.890 on seeds 0 and 1, 0.880 on seed 2). A miss on the new seed rules it out, and the next pick is
        confirmed in turn. Returns whether a seed ran (then the summaries are made again)."""
        record = self._would_pick()
        if record is None:
            return False
        name = record.variant.name
        if len(record.runs) >= CONFIRM_SEEDS or name in self._confirming:
            return False
        self._confirming.append(name)
        seed = len(record.runs)
        had_base = len(base.runs) > seed
        need = self._one_more_pair(base, record, alone=True)
        if need is not None:
            alone = "" if had_base else f" (or of it alone, about {self._estimate(record.variant):.0f} s)"
            self.notes.append(
                f"{name} would be picked on {seed} seeds; one more seed of it"
                + ("" if had_base else " and the baseline")
                + f" (about {need:.0f} s){alone} no longer fit in the {self.options.flag('budget')}, so it was not"
                " confirmed"
            )
            return False
        if had_base:
            both = ""
        elif len(base.runs) > seed:
            both = " and the baseline"
        else:
            both = " (alone: the budget no longer held the baseline's seed too; a miss is what the new seed looks for)"
        new = record.runs[-1]
        said = (  # a seed after its first is never stopped at a leader's time (:meth:`_cap`)
            f"reached the target again ({new.get('crossing_s') or new.get('time_to_target_s') or 0:.1f} s)"
            if new.get("reached")
            else "missed the target on it: it cannot be picked"
        )
        self.notes.append(
            f"{name} would have been picked on {seed} seeds: one more seed of it"
            + both
            + " ran before the leftover budget explored (the fastest of many on few seeds is the likeliest to have"
            f" reached by a seed's luck), and it {said}"
        )
        return True

    def _one_more_pair(self, base: VariantRecord, record: VariantRecord, alone: bool = False) -> Optional[float]:
        """One more seed of ``record``, and of the baseline when it has no run of that seed yet, if the budget holds
        both: ``None`` once they ran, else the seconds they would need (nothing ran). With ``alone``, a budget that
        holds ``record``'s run but not the baseline's runs ``record``'s alone (a confirmation that looks for a
        miss)."""
        seed = len(record.runs)
        with_base = len(base.runs) <= seed
        mine = self._estimate(record.variant)
        theirs = self._estimate(base.variant) if with_base else 0.0
        left = self._remaining()
        if mine + theirs > left:
            if not (alone and with_base and mine <= left):
                return mine + theirs
            with_base = False
        if with_base:
            self._add_total(1)
            self._run_one(base, len(base.runs))
        self._add_total(1)
        self._run_one(record, seed)
        return None

    def _one_more_seed(self, base: VariantRecord) -> bool:
        """Target mode: a candidate whose gain one run carries (its interval no longer lies above 1.0 without that
        run: :func:`~lightning_speedups.bench.stats.one_run_carries`) gets one more seed, and the baseline that seed
        too, the fastest such candidate first, while the budget holds both runs; not the leader that
        :meth:`_confirm_leader` gave its one more seed already. Once per bench; returns whether any ran (then the
        summaries are made again: the new runs change the pooled spread too)."""
        carried = [
            r
            for r in self.records
            if r.summary is not None
            and r.summary.carried_by
            and r.variant.kind not in ("baseline", "aa")
            and r.variant.name not in self._confirmed_carried  # its one more seed ran as the leader
        ]
        carried.sort(key=lambda r: -(r.summary.speedup or 0.0) if r.summary is not None else 0.0)
        ran = []
        for record in carried:
            assert record.summary is not None
            why = record.summary.carried_by
            if self._one_more_pair(base, record) is None:
                ran.append(f"{record.variant.name} (without {why} its interval reached 1.0)")
                if record.variant.name in self._short_of_seed:  # it got its seed after all
                    self._short_of_seed.remove(record.variant.name)
            elif record.variant.name not in self._short_of_seed:
                self._short_of_seed.append(record.variant.name)
        if ran:
            self.notes.append(
                "one run carried the gain of " + "; ".join(ran) + ": one more seed of it and the baseline was run"
                " (seed-to-seed times are heavy-tailed: a pick that one seed carries is as often noise)"
            )
        return bool(ran)

    def _plan_from_baseline(self, first: dict[str, Any]) -> None:
        """Time-to-target mode: the schedules' spans from the optimizer steps the baseline's first run took
        to the target (``plan_fraction`` of them); without them the schedule variants are not run."""
        steps = first.get("steps_to_target") if first.get("reached") else None
        self._warmups_from_baseline(steps)
        planned = [r for r in self.records if r.variant.plan_fraction is not None]
        if not planned:
            return
        if not steps:
            for record in planned:
                record.skipped = (
                    "not run: its schedule spans a share of the baseline's steps to the target, and the baseline"
                    " did not reach it"
                )
            self._add_total(-len(planned) * self.options.repeats)
            return
        spans = {}
        scaled: dict[float, dict[float, int]] = {}  # batch scale -> span -> steps at that batch
        for record in planned:
            f = record.variant.plan_fraction
            assert f is not None
            spans[f] = max(1, round(f * int(steps)))
            scale = self._batch_scale(record.variant)
            plan = max(1, round(spans[f] / scale))  # the same share of the baseline's samples at a larger batch
            if scale != 1.0:
                scaled.setdefault(scale, {})[f] = plan
            overrides = {**record.variant.overrides, "lr_schedule.plan": plan}
            record.variant = dataclasses.replace(record.variant, overrides=overrides)
        each = ", ".join(f"{n:,} ({f:g}x)" for f, n in sorted(spans.items()))
        for scale, at in sorted(scaled.items()):
            each += f"; at {scale:g}x the batch, as many samples: " + ", ".join(
                f"{n:,} ({f:g}x)" for f, n in sorted(at.items())
            )
        assert self.target is not None  # called in time-to-target mode only
        self.notes.append(
            f"plan: the baseline reached {self.target.text()} in {int(steps):,} optimizer steps (seed"
            f" {self.options.seed}), so the schedules span {each} optimizer steps (lr_schedule.plan), not the"
            " config's length"
        )

    def _warmups_from_baseline(self, steps: Any) -> None:
        """A schedule-free candidate has no plan, but its warm-up is a share of one (:data:`SCHEDULE_FREE_WARMUP`):
        of the baseline's steps to the target here, not of the config's length, which the run never reaches
        (unset: the part's own default, a share of the config's length)."""
        if not steps:
            return
        for record in self.records:
            o = record.variant.overrides
            if o.get("schedule_free.enabled") and "schedule_free.warmup_steps" not in o:
                scale = self._batch_scale(record.variant)
                warmup = max(1, round(SCHEDULE_FREE_WARMUP * int(steps) / scale))
                overrides = {**o, "schedule_free.warmup_steps": warmup}
                record.variant = dataclasses.replace(record.variant, overrides=overrides)
                assert self.target is not None  # called in time-to-target mode only
                self.notes.append(
                    f"{record.variant.name}: its warm-up is {warmup:,} optimizer steps ({SCHEDULE_FREE_WARMUP:.0%} of"
                    f" the {int(steps):,} the baseline took to {self.target.text()}"
                    + (f", at {scale:g}x the batch" if scale != 1.0 else "")
                    + "; schedule_free.warmup_steps)"
                )

    def _batch_scale(self, variant: Variant) -> float:
        """How many times the configured batch ``variant`` trains at (``largest_batch.batch_size`` over it; 1.0
        when it sets none, or the configured batch is unknown)."""
        size = variant.overrides.get("largest_batch.batch_size")
        configured = getattr(self, "batch_size", None)
        if isinstance(size, int) and isinstance(configured, int) and configured > 0:
            return size / configured
        return 1.0

    def _cap(self, variant: Variant) -> Cap:
        """A target run's training-time cap (:class:`Cap`: why when it is not ``--target-max-time``, and the leader
        that set it). A candidate stops once it passes the slowest baseline run's time to the target (plus the
        noise), where it can no longer win; and once it passes the slowest time of a leading candidate
        (:meth:`_leader`) by the same margin, where it can no longer be faster than that one on this seed (its first
        run only: a candidate that reached before runs its next seeds on). That is adaptive capping (Hutter, Hoos,
        Leyton-Brown and Stuetzle 2009, "ParamILS": a challenger's run is cut once it has taken longer than the
        incumbent's), which the racing of runtime configurators (SMAC, irace) shares."""
        o = self.options
        if variant.kind in ("baseline", "aa") or self.target is None:
            return Cap(o.target_max_time)
        times = [
            float(r["time_to_target_s"])
            for b in self.baselines.values()
            for r in b.runs
            if r.get("reached") and r.get("time_to_target_s")
        ]
        if not times:
            return Cap(o.target_max_time)
        slowest = max(times)
        spread = (slowest - min(times)) / statistics.median(times) if len(times) > 1 else 0.0
        margin = max(CAP_MARGIN, spread)
        cap = slowest * (1.0 + margin)
        # a leader stops a candidate's first run only: one that reached before keeps every seed, or its runs that
        # reached would leave the pooled spread with the one stopped (a group with a miss is left out of it)
        first = not any(r.variant.name == variant.name and r.runs for r in self.records)
        leader = self._leader(variant) if first else None
        if leader is not None and leader[0] * (1.0 + margin) < min(cap, o.target_max_time):
            their, name = leader
            return Cap(
                their * (1.0 + margin),
                f"stopped at {their * (1.0 + margin):.0f} s of training, past the slowest time to the target of"
                f" {name} ({their:.0f} s, every run of which reached it) + {margin:.0%}: it could no longer be faster"
                " than that one on this seed",
                name,
                min(cap, o.target_max_time),
            )
        if cap >= o.target_max_time:
            return Cap(o.target_max_time)
        why = (
            f"stopped at {cap:.0f} s of training, past the slowest baseline run's time to the target ({slowest:.0f} s)"
            f" + {margin:.0%}: it could no longer be faster"
        )
        return Cap(cap, why)

    def _leader(self, variant: Variant) -> Optional[tuple[float, str]]:
        """The leading candidate a run of ``variant`` is capped at, as ``(its slowest time to the target, its
        name)``; ``None`` when there is none. A leader is confirmed as a pick is (:data:`CONFIRM_SEEDS` runs, every one
        of which reached the target), sane, and no twin of it missed on a seed it has not run (:meth:`_sibling_missed`);
        of those, the one whose slowest time is the shortest. A leader on two seeds is not enough: one that then misses
        its third can no longer be picked, and the candidates it stopped could have been (on the GRU of issue 37, run
        10's 0.75x one-cycle at batch 512 reached on seeds 0 and 1 and flattened on seed 2). Never ``variant`` itself:
        its next seed is capped by the baseline, or by another leader."""
        best: Optional[tuple[float, str]] = None
        for record in self.records:
            if record.variant.kind in ("baseline", "aa", "idle") or record.variant.name == variant.name:
                continue
            runs = record.runs
            if len(runs) < CONFIRM_SEEDS or not all(
                r.get("status") == "ok" and r.get("reached") and r.get("time_to_target_s") for r in runs
            ):
                continue
            if not summarize(runs).sane or self._sibling_missed(record) is not None:
                continue
            slowest = max(float(r["time_to_target_s"]) for r in runs)
            if best is None or slowest < best[0]:
                best = (slowest, record.variant.name)
        return best

    def saved_by_flattening(self) -> tuple[int, float]:
        """``(runs stopped, seconds of training)``: what stopping a candidate once its annealed curve flattened
        saved against running it on to its cap (the slowest baseline's time, or ``--target-max-time``)."""
        flat = [r for rec in self.records for r in rec.runs if r.get("flattened")]
        saved = sum(
            max(float(r["cap_s"]) - float(r.get("train_s") or 0.0), 0.0)
            for r in flat
            if r.get("cap_s") is not None and math.isfinite(float(r["cap_s"]))
        )
        return len(flat), saved

    def saved_by_caps(self) -> tuple[int, float]:
        """``(runs stopped early, seconds of training)``: what stopping candidates at the baseline's time saved,
        against training each on to ``--target-max-time`` (an upper bound: some would have reached the target
        before it)."""
        cut = [
            r
            for rec in self.records
            for r in rec.runs
            if r.get("cap_reason") and r.get("timed_out") and not outpaced(r)
        ]
        return len(cut), sum(max(self.options.target_max_time - float(r["cap_s"]), 0.0) for r in cut)

    def saved_by_leaders(self) -> tuple[int, float]:
        """``(runs stopped early, seconds of training)``: what stopping candidates at a leading candidate's time
        (:meth:`_leader`) saved, against training each on to the cap the baseline alone would have set."""
        cut = [r for rec in self.records for r in rec.runs if outpaced(r)]
        return len(cut), sum(max(float(r.get("cap_baseline_s") or r["cap_s"]) - float(r["cap_s"]), 0.0) for r in cut)

    def _cut_for_repeats(self, first_wall: float) -> Optional[int]:
        """Target mode with a budget too small for every candidate at every repeat: the repeats (at least
        2, at most ``--repeats``) at which the most candidates fit, in the plan's order, with the baseline;
        the rest are marked not run. Breadth wins over depth: the interval pools the spread over every
        variant's runs, so a third repeat of one candidate buys less than a second candidate.
        ``None``: not even one candidate fits twice."""
        o = self.options
        best: Optional[tuple[int, int]] = None
        for repeats in range(o.repeats, 1, -1):
            total, k = -first_wall, 0  # the baseline's first run is already done
            for record in self.records:
                if record.skipped:
                    continue
                cost = self._estimate(record.variant) * repeats
                if total + cost > self._remaining():
                    break
                total += cost
                k += 1
            if k >= 2 and (best is None or k > best[1]):
                best = (repeats, k)
        if best is None:
            return None
        repeats, k = best
        kept = [r for r in self.records if not r.skipped][:k]
        cut = [r for r in self.records if not r.skipped and r not in kept]
        self._waiting = [r for r in cut if r.variant.kind != "aa"]  # the A/A pair: never from freed budget
        for record in cut:
            record.skipped = (
                f"not run: the {o.flag('budget')} held the first {k - 1} candidates in the plan's order at"
                f" {repeats} paired repeats"
            )
        if cut:
            self.notes.append(
                f"{o.flag('budget')} {o.budget:g} s: the first {k - 1} candidates at {repeats} repeats;"
                f" not run: {', '.join(r.variant.name for r in cut)}"
            )
        self._add_total((repeats - o.repeats) * len(self.records) - repeats * len(cut))
        return repeats
