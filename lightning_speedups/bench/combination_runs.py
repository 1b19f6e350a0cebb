"""Phase two of a throughput bench: the combination search
(:func:`~lightning_speedups.bench.variants.greedy_search`) over the tips that paid alone, each combination run
interleaved with a fresh baseline and its speed-up taken over that baseline.
:class:`~lightning_speedups.bench.runner.Bench` takes :class:`CombinationRuns`' methods."""

from __future__ import annotations

import dataclasses
from typing import Optional

from lightning_speedups.bench.host import BenchState
from lightning_speedups.bench.results import VariantRecord
from lightning_speedups.bench.stats import compare, sanity_check, summarize
from lightning_speedups.bench.variants import (
    BASELINE,
    TIP_VARIANTS,
    BudgetExhausted,
    SearchResult,
    combo_variant,
    greedy_search,
)


class CombinationRuns(BenchState):
    """The combination search of a :class:`~lightning_speedups.bench.runner.Bench` (it inherits these)."""

    def _measure_combo(self, tips: tuple[str, ...]) -> Optional[float]:
        o = self.options
        # a combination already measured in phase 1 (e.g. the all-on one) is not run again
        for rec in self.records:
            if rec.variant.kind in ("all-on", "combo") and tuple(sorted(rec.variant.tips)) == tips and rec.summary:
                s = rec.summary
                return s.speedup if (s.runs_ok and s.sane) else None
        variant = combo_variant(tips)
        phase = max([1, *self.baselines]) + 1
        record = VariantRecord(variant, phase=phase)
        base = VariantRecord(dataclasses.replace(BASELINE, name=f"baseline (phase {phase})"), phase=phase)
        repeats = getattr(self, "repeats_used", o.repeats)
        cost = (self._estimate(variant) + self._estimate(BASELINE)) * repeats
        if cost > self._remaining():
            raise BudgetExhausted()
        self.records.append(record)
        self.baselines[phase] = base
        self._add_total(2 * repeats)
        for repeat in range(repeats):
            pair = (record, base) if repeat % 2 == 0 else (base, record)
            for rec in pair:
                self._run_one(rec, repeat)
        base.summary = summarize(base.runs)
        record.summary = summarize(record.runs)
        compare(base.summary, base.runs, base.summary, base.runs, o.loss_tolerance)
        compare(record.summary, record.runs, base.summary, base.runs, o.loss_tolerance)
        # sanity against the phase-1 baseline's loss too (same seed, same data: it must agree)
        if record.summary.sane and self.baselines[1].summary is not None:
            record.summary.sane, record.summary.sanity = sanity_check(
                record.summary.loss.median, self.baselines[1].summary.loss.median, o.loss_tolerance
            )
        s = record.summary
        return s.speedup if (s.runs_ok and s.sane) else None

    def _phase_two(self) -> Optional[SearchResult]:
        o = self.options
        if not o.search or self.target is not None:
            return None
        singles: dict[str, Optional[float]] = {}
        for rec in self.records:
            if rec.variant.kind == "tip" and TIP_VARIANTS[rec.variant.tips[0]].goal == "speed" and rec.summary:
                s = rec.summary
                singles[rec.variant.tips[0]] = s.speedup if (s.runs_ok and s.sane) else None
        return greedy_search(singles, self._measure_combo, o.min_gain)
