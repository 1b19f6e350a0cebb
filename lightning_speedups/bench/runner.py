"""Plan and run the bench: variants interleaved over repeats, each run in its own process, in budget.

Phase 1 runs the baseline, each applicable tip alone, the packaged presets, the static all-on
combination and the idle parts, round-robin: repeat 1 of every variant, then repeat 2 of every
variant (in a rotated order), and so on, so machine noise hits all of them alike. Phase 2 is the
combination search (:func:`~lightning_speedups.bench.variants.greedy_search`): each candidate is run
interleaved with a fresh baseline, and its speed-up is taken over that baseline.

Which tips apply is read from the shared inspection of the built model
(:func:`lightning_speedups.inspection.inspect_setup`, the same one the doctor reads). Each run goes
through a :class:`~lightning_speedups.bench.launcher.Launcher` (its own process); the argv of a run
comes from :mod:`lightning_speedups.bench.args`, the machine's metadata from
:mod:`lightning_speedups.bench.machine`, the result types from :mod:`lightning_speedups.bench.results`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Optional

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from lightning_speedups.bench.args import (
    nest,
    override_args,
    preset_speedups,
    reset_args,
    trainer_overrides,
    user_speedups,
    variant_args,
)
from lightning_speedups.bench.combination_runs import CombinationRuns
from lightning_speedups.bench.launcher import Launcher
from lightning_speedups.bench.machine import (
    busy_note,
    machine_meta,
    quiet_lightning,
    resolve_device,
)
from lightning_speedups.bench.options import BenchError, BenchOptions
from lightning_speedups.bench.preset_choice import TARGET_PRESETS, chosen_presets
from lightning_speedups.bench.results import BenchResult, VariantRecord
from lightning_speedups.bench.stats import (
    compare,
    compare_target,
    noise_floor,
    pick_verdict,
    pooled_spread,
    seed_blocks,
    summarize,
)
from lightning_speedups.bench.target import FLAT_CHECKS
from lightning_speedups.bench.target_runs import (
    CONFIRM_SEEDS,
    TargetRuns,
    target_order,
    with_measured_plans,
)
from lightning_speedups.bench.variants import (
    BASELINE,
    NOISE_PAIR,
    TIP_VARIANTS,
    SearchResult,
    Variant,
    build_variants,
    plan_tips,
    preset_variant,
    resolve_tips,
    target_tip_variants,
    tip_variant,
)
from lightning_speedups.inspection import inspect_setup
from lightning_speedups.presets import PresetError, parse_speedups
from lightning_speedups.session import UsageError, build

__all__ = ["TARGET_PRESETS", "Bench"]


class Bench(TargetRuns, CombinationRuns):
    """Plans and runs one bench. ``prepare()`` checks the input and the config; ``run()`` measures.

    Args:
        options: what to do.
        console: a rich console for messages and the progress bar (stderr by default).
        launcher: starts runs (tests may pass a fake one with the same ``run(spec, name, timeout)``).
        clock: seconds, read for the budget (tests pass a fake one).
    """

    def __init__(
        self,
        options: BenchOptions,
        console: Any = None,
        launcher: Optional[Launcher] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self.options = options
        self.console = console or Console(stderr=True)
        self.notes: list[str] = []
        self._own_tmp: Optional[str] = None
        self._launcher = launcher
        self.records: list[VariantRecord] = []
        self.baselines: dict[int, VariantRecord] = {}
        self._t0 = 0.0
        self._run_counter = 0
        self._progress: Any = None
        self._task: Any = None
        #: target mode: candidates the budget cut, in the plan's order (freed budget runs them later)
        self._waiting: list[VariantRecord] = []
        self._twins: list[str] = []  # target mode: candidates not run, as twins of one that ran
        #: target mode's stack phase: the baseline and the throughput tips timed by samples/s (issue 37, item 1)
        self.stack_records: list[VariantRecord] = []
        #: target mode: candidates whose other repeats were not run after a miss
        self._stopped: list[str] = []
        self._spared: list[float] = []  # the estimated seconds of each run not run after a miss
        #: target mode: the candidate whose gain one run carried and that got its one more seed as the leader
        self._confirmed_carried: list[str] = []
        #: target mode: the candidates whose gain one run carried and whose one more seed a side did not fit the
        #: budget: a lead by ranks settles them (:func:`~lightning_speedups.bench.stats.ranks_lead`)
        self._short_of_seed: list[str] = []
        #: target mode: the picks given their third seed before the leftover budget explored (:meth:`_confirm_pick`)
        self._confirming: list[str] = []
        #: target mode: the picks whose shorter span ran before their confirmation (:meth:`_descend_span`)
        self._descended: list[str] = []
        #: target mode: candidates at the stack's larger batch not run once that batch missed (:meth:`_batch_failed`)
        self._batch_dropped: list[str] = []
        #: target mode: one-cycles not run once a longer span of theirs flattened short (:meth:`_longer_flattened`)
        self._shorter_dropped: list[str] = []

    # --- preparation
    def prepare(self) -> None:
        """Validate the options, build the user's setup once and decide the variants.

        Raises:
            BenchError: bad options, an unknown tip or preset, or a config that does not build.
        """
        o = self.options
        o.validate()
        try:
            self.selected = resolve_tips(o.tips)
        except KeyError as err:
            raise BenchError(str(err.args[0]) if err.args else str(err)) from None
        target = o.target_mode_on
        self.target = o.parsed_target() if target else None
        self.presets, self.skipped_presets = chosen_presets(o.presets, target)
        self._prepare_run_arguments()
        model = self._build_once()
        self.info = inspect_setup(model, self.device)
        for part, error in self.info.errors.items():
            self.notes.append(f"the {part} part could not inspect the model: {error}")
        self._plan_variants(target)
        if o.noise_pair:
            self.variants.append(NOISE_PAIR)
        if self._launcher is None:
            timeout = max(o.timeout, 3 * o.target_max_time + 300) if target else o.timeout
            self._launcher = Launcher(o.isolation, os.path.join(self.root, "runs"), timeout)

    def _prepare_run_arguments(self) -> None:
        """The device, the log folder, the Trainer overrides of every run, and the user's speedups (checked)."""
        o = self.options
        self.device = resolve_device(o.device)
        self.root = o.log_dir or tempfile.mkdtemp(prefix="lightning_speedups_bench_")
        if o.log_dir is None:
            self._own_tmp = self.root
        os.makedirs(self.root, exist_ok=True)
        self.trainer_overrides = trainer_overrides(o, self.device, os.path.join(self.root, "trainer"))
        self.user_values = user_speedups(o.args)
        self.user_keys = list(self.user_values)
        # the runs reset these in the baseline, so the build below does not see them: checked as given
        known = {k: v for k, v in self.user_values.items() if v is not None}
        try:
            parse_speedups(nest(known), "your config's speedups")
        except PresetError as err:
            raise BenchError(str(err).removeprefix("your config's speedups: ")) from None
        # baseline "yours": the config as given is the baseline, each variant adds its tip on top
        self.reset = reset_args(self.user_keys) if o.baseline == "reset" else []

    def _plan_variants(self, target: bool) -> None:
        """The tips timed and skipped, and the variants: in target mode in the order of the plan."""
        o = self.options
        if target:
            tip_variants, self.skipped_tips = target_tip_variants(self.selected, self.batch_size, self.info)
            if self.selected is None:  # the throughput tips that apply shorten the time too: after the others
                timed, _ = plan_tips(self.info)
                tip_variants += [tip_variant(t) for t in timed if TIP_VARIANTS[t].goal == "speed"]
            self.timed_tips = [t for v in tip_variants for t in v.tips]
            ordered = target_order(tip_variants, [preset_variant(p) for p in self.presets])
            self.variants = [BASELINE, *with_measured_plans(ordered)]
        else:
            self.timed_tips, self.skipped_tips = plan_tips(self.info, self.selected)
            self.variants = build_variants(
                self.info,
                self.timed_tips,
                self.skipped_tips,
                self.presets,
                extras=o.extras,
                yours=bool(self.user_keys) and o.baseline == "reset",
            )
            self.variants = [
                preset_variant(v.presets[0]) if v.kind == "preset" and "+" in v.presets[0] else v for v in self.variants
            ]

    def _build_once(self) -> Any:
        args = list(self.options.args) + self.reset
        overrides = dict(self.trainer_overrides)
        overrides["default_root_dir"] = os.path.join(self.root, "inspect")
        try:
            with quiet_lightning():
                try:
                    cli = build(args + override_args("trainer", overrides))
                except Exception as err:
                    if "enable_checkpointing" not in str(err):
                        raise
                    overrides.pop("enable_checkpointing")
                    cli = build(args + override_args("trainer", overrides))
        except UsageError as err:
            raise BenchError(str(err)) from None
        except SystemExit:
            raise BenchError("the config does not build (the parser's message above says why).") from None
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise BenchError(f"the config does not build: {type(err).__name__}: {first}") from None
        self.batch_size = _batch_size_of(cli)
        return cli.model

    # --- time and budget
    def _elapsed(self) -> float:
        return self._clock() - self._t0

    def _remaining(self) -> float:
        return math.inf if self.options.budget is None else self.options.budget - self._elapsed()

    def _estimate(self, variant: Variant) -> float:
        """Expected wall time of one run of ``variant`` from what has run so far: its own runs', else the baseline's,
        or what its cap holds once a confirmed leader caps it (:meth:`_cap`), where that is shorter."""
        own = [r["wall_s"] for rec in self._all_records() if rec.variant.name == variant.name for r in rec.runs]
        if own:
            return statistics.median(own)
        base = [r["wall_s"] for rec in self._all_records() if rec.variant.kind == "baseline" for r in rec.runs]
        guess = statistics.median(base) if base else 30.0

        def on(value: Any) -> bool:
            return value is True or (value == "auto" and self.device == "cuda")

        compiles = on(variant.overrides.get("compile.enabled")) or any(
            on((v.get("compile") or {}).get("enabled")) for v in preset_speedups(variant)
        )
        if compiles:
            compiled = [
                r["wall_s"]
                for rec in self._all_records()
                if "compile.enabled" in rec.variant.overrides
                for r in rec.runs
            ]
            guess = statistics.median(compiled) if compiled else guess * 3
        elif self.target is not None:
            # a confirmed leader caps this one's first run at its own time: it costs that much and its start-up
            cap = self._cap(variant)
            if cap.leader is not None:
                spare = [
                    r["wall_s"] - float(r["time_to_target_s"])
                    for rec in self._all_records()
                    if rec.variant.kind == "baseline"
                    for r in rec.runs
                    if r.get("reached") and r.get("time_to_target_s")
                ]
                guess = min(guess, cap.seconds + (statistics.median(spare) if spare else 0.0))
        return guess

    def _all_records(self) -> list[VariantRecord]:
        return self.records + [b for p, b in self.baselines.items() if p != 1]

    # --- one run
    def _spec(self, variant: Variant, repeat: int = 0) -> dict[str, Any]:
        o = self.options
        self._run_counter += 1
        env: dict[str, str] = {}
        cache = "inductor" if o.compile_cache == "shared" else f"inductor-{self._run_counter}"
        cap = self._cap(variant)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.root, "cache", cache)
        env["TRITON_CACHE_DIR"] = os.path.join(self.root, "cache", cache, "triton")
        return {
            "variant": variant.name,
            "args": variant_args(o.args, self.reset, variant),
            "speedups_overrides": dict(variant.overrides),
            # a root of its own per run: LightningCLI's SaveConfigCallback refuses an existing config.yaml
            "trainer_overrides": {
                **self.trainer_overrides,
                "default_root_dir": os.path.join(self.root, "trainer", f"run-{self._run_counter}"),
            },
            "warmup": o.warmup,
            "steps": o.steps,
            # target mode: one seed per repeat (the spread over seeds), the same for every variant of it
            "seed": o.seed + repeat if self.target is not None else o.seed,
            "target": dataclasses.asdict(self.target) if self.target is not None else None,
            "target_max_time": cap.seconds,
            "cap_reason": cap.why,
            "cap_leader": cap.leader,
            "cap_baseline_s": cap.baseline_s,
            "memory_step": o.memory_step,
            "threads": o.threads,
            "sys_path": [p for p in sys.path if p],
            "cwd": os.getcwd(),
            "env": env,
        }

    def _run_one(self, record: VariantRecord, repeat: int, timeout: Optional[float] = None) -> dict[str, Any]:
        variant = record.variant
        if self._progress is not None:
            self._progress.update(self._task, description=f"{variant.name} (repeat {repeat + 1})")
        safe = "".join(ch if ch.isalnum() else "_" for ch in variant.name)
        by_budget = timeout is None and self.options.budget is not None
        if by_budget:
            timeout = max(30.0, self._remaining() + 5.0)
        assert self._launcher is not None  # made by prepare(), which run() calls first
        result = self._launcher.run(self._spec(variant, repeat), f"p{record.phase}-{safe}-r{repeat}", timeout)
        # the launcher killed it at the budget's end (not the variant's fault: say so); a run the worker stopped at
        # its own cap (timed_out, status ok, its miss says why) keeps its reason
        if by_budget and result.get("timed_out") and result.get("status") != "ok":
            result["reason"] = (
                f"stopped after {result.get('timeout_s', timeout):.0f} s when the {self.options.flag('budget')}"
                f" ran out (not a fault of the variant)"
            )
        result["repeat"] = repeat
        result["phase"] = record.phase
        if self.options.compile_cache == "fresh":
            shutil.rmtree(os.path.join(self.root, "cache", f"inductor-{self._run_counter}"), ignore_errors=True)
        record.runs.append(result)
        if self._progress is not None:
            self._progress.advance(self._task)
            if result.get("status") != "ok":
                self._progress.console.print(
                    f"[yellow]{variant.name}[/] (repeat {repeat + 1}) failed: {result.get('reason')}"
                )
        return result

    def _add_total(self, n: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=(self._progress.tasks[0].total or 0) + n)

    # --- phases
    def _phase_one(self) -> None:
        o = self.options
        if self.target is not None and o.stack:
            self._stack_from_throughput()
        self.records = [VariantRecord(v, phase=1) for v in self.variants]
        base = self.records[0]
        self.baselines[1] = base
        self._add_total(len(self.records) * o.repeats)
        first = self._first_baseline_run(base)
        repeats = self._repeats_in_budget(first)
        self.repeats_used = repeats
        self._sweeps(base, repeats)
        if self.target is not None:
            self._summarize_phase_one(base)
            if self._confirm_leader(base):
                self._summarize_phase_one(base)
            self._settle_pick(base, repeats)
            self._run_waiting(repeats)
            if self._batch_dropped:
                self.notes.append(
                    "not run, since the stack's larger batch missed the target on its likeliest candidate and no"
                    " candidate at that batch reached it (it pays by samples/s, but may cost more epochs than it"
                    " saves): " + ", ".join(self._batch_dropped)
                )
            if self._shorter_dropped:
                self.notes.append(
                    "not run, since the same one-cycle over a longer span flattened short of the target on a seed (a"
                    " shorter cycle anneals after fewer steps, to a plateau no higher): "
                    + ", ".join(self._shorter_dropped)
                )
            if self._twins:
                self.notes.append(
                    "not run, since a candidate that ran trained as each would (the same settings and seeds; what it"
                    " sets beyond them stood down here): " + ", ".join(self._twins)
                )
        self._summarize_phase_one(base)
        if self.target is not None and self._one_more_seed(base):
            self._summarize_phase_one(base)
        # a pick that only the leftover budget ran (after the confirmations above) is confirmed the same way, or
        # the notes say it was not
        while self.target is not None and self._confirm_pick(base):
            self._summarize_phase_one(base)

    def _first_baseline_run(self, base: VariantRecord) -> dict[str, Any]:
        """The baseline's first run (the fork server warmed first): a time-out or a failure to train stops the
        bench with what to change; in target mode it plans the schedules' spans."""
        o = self.options
        warm = getattr(self._launcher, "warm", None)
        if warm is not None:
            if self._progress is not None:
                self._progress.update(self._task, description="starting the fork server (imports torch, Lightning)")
            warm()
        # with a budget the baseline's first run may take half of it (the other half holds one variant)
        first = self._run_one(base, 0, timeout=None if o.budget is None else o.budget / 2)
        if first.get("timed_out"):
            limit = first.get("timeout_s") or 0.0
            given = (
                f"half the {o.flag('budget')} of {o.budget:g} s (the baseline and one variant must fit in it)"
                if o.budget is not None and limit <= o.budget / 2 + 1e-6
                else f"the run time limit ({o.flag('timeout')} {o.timeout:g} s)"
            )
            raise BenchError(
                f"the baseline's first run was still training when it was stopped at {limit:.0f} s, {given}: a time-out,"
                f" not a failure to train. Give it more time ({o.flag('budget')} of at least {math.ceil(limit * 4)} s,"
                f" a larger {o.flag('timeout')}) or less work (fewer {o.flag('steps')}, a smaller batch)."
            )
        if first.get("status") != "ok":
            raise BenchError(
                f"the baseline does not train: {first.get('reason')}\n{first.get('log_tail', '')}".rstrip()
            )
        if self.target is not None and not first.get("reached"):
            self.notes.append(
                f"the baseline {first.get('miss') or 'missed the target'}: without a baseline that reaches it there is no"
                " ratio; choose a target the baseline reaches (its best is in the JSON) or raise --target-max-time"
            )
        if self.target is not None:
            self._plan_from_baseline(first)
        return first

    def _repeats_in_budget(self, first: dict[str, Any]) -> int:
        """The paired repeats that fit in ``--budget`` after the baseline's first run (in target mode, candidates are
        cut from the end of the plan before repeats are)."""
        o = self.options
        repeats = o.repeats
        if o.budget is not None:
            if first["wall_s"] * 2 > o.budget:
                # merely slow: its figures stand, and the variants that no longer fit are marked not run
                self.notes.append(
                    f"{o.flag('budget')} {o.budget:g} s left no time for a variant after one baseline run of"
                    f" {first['wall_s']:.1f} s: give at least {math.ceil(first['wall_s'] * 2 * 1.2)} s (or fewer"
                    f" {o.flag('steps')}) to compare anything"
                )
            per_sweep = sum(self._estimate(r.variant) for r in self.records)
            speed_tips = [t for t in self.timed_tips if t in TIP_VARIANTS and TIP_VARIANTS[t].goal == "speed"]
            share = 0.7 if (o.search and len(speed_tips) >= 2) else 1.0  # keep time for the search
            fits = int((self._remaining() * share + first["wall_s"]) // max(per_sweep, 1e-9))
            if fits < repeats and self.target is not None:
                # a ratio needs paired repeats: keep them for the likeliest candidates (the plan's order)
                # and cut candidates from the end, rather than run everything once and pick nothing
                kept = self._cut_for_repeats(first["wall_s"])
                if kept is not None:
                    repeats = kept
                    fits = repeats
            if fits < repeats:
                repeats = max(1, fits)
                self.notes.append(
                    f"{o.flag('budget')} {o.budget:g} s: {repeats} repeat(s) instead of {o.repeats}"
                    f" (one sweep of {len(self.records)} variants takes about {per_sweep:.0f} s)"
                )
                self._add_total((repeats - o.repeats) * len(self.records))
        return repeats

    def _sweeps(self, base: VariantRecord, repeats: int) -> None:
        """Every variant once per repeat, each repeat in a rotated order, so machine noise hits them alike."""
        o = self.options
        order = list(self.records)
        for repeat in range(repeats):
            shift = repeat % len(order)
            sweep = order[shift:] + order[:shift]
            for record in sweep:
                if record is base and repeat == 0:
                    continue
                if record.skipped:
                    continue
                if self._skip_twin(record):
                    self._add_total(-(repeats - repeat))
                    continue
                if self._cannot_win(record):
                    self._add_total(-1)
                    continue
                est = self._estimate(record.variant)
                if est > self._remaining():
                    if not record.runs:
                        record.skipped = f"not run: its run (about {est:.0f} s) did not fit in the {o.flag('budget')}"
                    self._add_total(-1)
                    continue
                self._run_one(record, repeat)

    def _summarize_phase_one(self, base: VariantRecord) -> None:
        """Each variant's summary, and its ratio to the baseline (or its time to the target against the baseline's)."""
        o = self.options
        for record in self.records:
            record.summary = summarize(record.runs) if record.runs else None
        base.summary = summarize(base.runs)
        pooled = blocks = None
        if self.target is not None:
            pooled = pooled_spread([r.runs for r in self.records if r.runs])
            # the A/A twin runs the baseline's very steps on each seed: no residual of its own to count
            blocks = seed_blocks([r.runs for r in self.records if r.runs and r.variant.kind != "aa"], base.runs)
        for record in self.records:
            if record.summary is None:
                continue
            if self.target is not None:
                compare_target(record.summary, record.runs, base.summary, base.runs, pooled, blocks)
            else:
                compare(record.summary, record.runs, base.summary, base.runs, o.loss_tolerance)

    def noise(self) -> float:
        """The noise floor: how far from 1.0 the A/A pair of baselines landed (0 without the pair)."""
        aa = next((r for r in self.records if r.variant.kind == "aa"), None)
        return noise_floor(aa.summary if aa is not None else None)

    def pick(self) -> Optional[VariantRecord]:
        """The fastest variant that may be picked (:func:`~lightning_speedups.bench.measure.pick_verdict`:
        every run completed and reached the target, sane, its 95% interval above 1.0, its gain clearing
        ``--min-gain`` and the A/A noise floor); else the baseline. Each summary keeps the reason."""
        best: Optional[VariantRecord] = None
        best_speedup = 0.0
        confirmed: Optional[VariantRecord] = None  # target mode: the fastest that reached on CONFIRM_SEEDS seeds
        confirmed_speedup = 0.0
        dropped = set()
        search = getattr(self, "search_result", None)
        if search is not None:  # a combination the search dropped did not beat its subset by min_gain
            dropped = {s.tips for s in search.steps if not s.accepted}
        noise = self.noise()
        for rec in self.records:
            s = rec.summary
            if rec.variant.kind in ("idle", "baseline", "aa") or s is None:
                continue
            ok, why = pick_verdict(s, self.options.min_gain, noise, by_ranks=rec.variant.name in self._short_of_seed)
            if ok and rec.variant.kind == "combo" and tuple(sorted(rec.variant.tips)) in dropped:
                ok, why = False, "the search dropped it (no gain over its subset)"
            sibling = self._sibling_missed(rec) if ok else None
            if sibling is not None:
                ok, why = False, sibling
            s.picked_why = why
            if not ok or s.speedup is None:  # a verdict of ok has a speed-up (gain_verdict)
                continue
            if best is None or s.speedup > best_speedup:
                best, best_speedup = rec, s.speedup
            if self._confirmed(rec) and (confirmed is None or s.speedup > confirmed_speedup):
                confirmed, confirmed_speedup = rec, s.speedup
        if best is not None and confirmed is not None and not self._confirmed(best):
            best = self._prefer_confirmed(best, confirmed)
        return best or (self.records[0] if self.records else None)

    def _confirmed(self, record: VariantRecord) -> bool:
        """Target mode: whether ``record`` reached the target on :data:`CONFIRM_SEEDS` seeds or more."""
        return self.target is not None and sum(1 for r in record.runs if r.get("reached")) >= CONFIRM_SEEDS

    def _prefer_confirmed(self, best: VariantRecord, confirmed: VariantRecord) -> VariantRecord:
        """Target mode: a candidate that reached on :data:`CONFIRM_SEEDS` seeds is picked over a faster one that
        reached on fewer, which the budget could not confirm (:meth:`_confirm_pick`): the fastest of many on few
        seeds is the likeliest to have reached by a seed's luck. On the GRU of issue 37 without bf16 (run 10) the
        one-cycle over 0.75x at batch 512, picked on seeds 0 and 1 at 1.98x, flattened at 0.880 on seed 2 under
        ``fit``, as it had in three benches before."""
        assert best.summary is not None and confirmed.summary is not None
        why = (
            f"faster on {len(best.runs)} seeds ({best.summary.speedup or 0.0:.2f}x), but the budget held no seed more"
            f" to confirm it: {confirmed.variant.name}"
            f" ({confirmed.summary.speedup or 0.0:.2f}x) reached on {len(confirmed.runs)} and is picked"
        )
        best.summary.picked_why = why
        self.notes.append(
            f"{best.variant.name} was {why} (the fastest of many on few seeds is the likeliest to have reached by a"
            " seed's luck)"
        )
        return confirmed

    def run(self, progress_factory: Optional[Callable[[], Any]] = None) -> BenchResult:
        """Run every phase and return the result (``prepare()`` is called if it was not)."""
        if not hasattr(self, "variants"):
            self.prepare()
        self._t0 = self._clock()
        self._meta = meta = machine_meta(self.device)
        if self.options.threads:
            meta["torch_threads"] = self.options.threads  # what every run used (--threads)
        self.console.print(self.plan_text())
        progress = None
        if self.options.progress:
            progress = (
                progress_factory
                or (
                    lambda: Progress(
                        TextColumn("[bold]bench[/]"),
                        BarColumn(),
                        MofNCompleteColumn(),
                        TextColumn("{task.description}"),
                        TimeElapsedColumn(),
                        console=self.console,
                        transient=False,
                    )
                )
            )()
        try:
            if progress is not None:
                progress.start()
                self._progress = progress
                self._task = progress.add_task("baseline", total=0)
            self._phase_one()
            search = self.search_result = self._phase_two()
            cut, saved = self.saved_by_caps()
            if cut:
                self.notes.append(
                    f"{cut} candidate run(s) stopped once past the slowest baseline run's time to the target (they"
                    f" could no longer win): up to {saved:.0f} s of training saved against running each on to"
                    f" --target-max-time {self.options.target_max_time:g} s"
                )
            lost, kept = self.saved_by_leaders()
            if lost:
                self.notes.append(
                    f"{lost} candidate run(s) stopped once past a leading candidate's slowest time to the target"
                    f" (every run of it had reached it; adaptive capping): they could no longer be faster than it on"
                    f" their seed; {kept:.0f} s of training saved against running each on to the baseline's cap"
                )
            flat, kept = self.saved_by_flattening()
            if flat:
                self.notes.append(
                    f"{flat} candidate run(s) stopped once their curve flattened after the schedule annealed (no"
                    f" better value in {FLAT_CHECKS} checks): {kept:.0f} s of training saved against running each on"
                    " to its cap"
                )
            if self._spared:
                self.notes.append(
                    f"{len(self._spared)} more run(s) of {', '.join(self._stopped)} not run after a miss (a candidate"
                    f" that missed once, or was slower than a leading candidate, cannot be picked): about"
                    f" {sum(self._spared):.0f} s of the budget kept for the next candidates"
                )
        finally:
            if progress is not None:
                progress.stop()
            self._progress = None
        busy = busy_note(meta)
        if busy:
            self.notes.append(busy)
        return self._result(search, pick=self.pick())

    def plan_text(self) -> str:
        """The plan, said once before the first run: what runs, how often, and what a --budget must hold."""
        o = self.options
        runs = len(self.variants) * o.repeats
        text = (
            f"bench plan: {len(self.variants)} variants x {o.repeats} repeats = {runs} runs"
            + (" (then the combination search)" if o.search and self.target is None else "")
            + f", each {o.warmup} warm-up + {o.steps} timed batches in a process of its own"
            if self.target is None
            else f"bench plan: {len(self.variants)} variants x {o.repeats} seeds = {runs} runs to {self.target.text()}"
        )
        if o.budget is not None:
            text += (
                f"; {o.flag('budget')} {o.budget:g} s must hold at least the baseline and one variant (2 runs): the"
                " baseline's first run may take half of it, and the repeats and variants are cut to fit"
            )
        if self.target is not None:  # the order is the plan: a budget that cannot hold all cuts from the end
            text += "\n  in this order: " + ", ".join(v.name for v in self.variants)
        return text

    def partial_result(self) -> Optional[BenchResult]:
        """What was measured so far (an interrupted or failed bench); ``None`` before any run completed."""
        if not any(r.runs for r in self.records):
            return None
        for record in self.records:
            if record.summary is None and record.runs:
                record.summary = summarize(record.runs)
        self.notes.append("incomplete: the bench was interrupted or failed; these are the runs it completed")
        return self._result(getattr(self, "search_result", None), pick=None)

    def _result(self, search: Optional[SearchResult], pick: Optional[VariantRecord]) -> BenchResult:
        meta = dict(getattr(self, "_meta", {}))
        meta["wall_s"] = round(self._elapsed(), 1)
        return BenchResult(
            options=self.options,
            meta=meta,
            info=self.info,
            skipped_tips=self.skipped_tips,
            skipped_presets=self.skipped_presets,
            records=self.records,
            baselines=self.baselines,
            search=search,
            pick=pick,
            target=self.target,
            noise=self.noise() if self.options.noise_pair else None,
            notes=self.notes,
            stack=self.stack_records,
            user_speedups_keys=self.user_keys,
            user_speedups=self.user_values,
        )

    def cleanup(self) -> None:
        if self._own_tmp:
            shutil.rmtree(self._own_tmp, ignore_errors=True)


def _batch_size_of(cli: Any) -> Optional[int]:
    """The configured batch size: ``batch_size`` of the datamodule, the model or its hparams."""
    for obj in (getattr(cli, "datamodule", None), getattr(cli, "model", None)):
        if obj is None:
            continue
        for holder in (obj, getattr(obj, "hparams", None)):
            value = getattr(holder, "batch_size", None) if holder is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
