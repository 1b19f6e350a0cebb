"""What a bench found: one :class:`VariantRecord` per variant, and the whole :class:`BenchResult`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.bench.options import BenchOptions
from lightning_speedups.bench.stats import VariantSummary
from lightning_speedups.bench.variants import SearchResult, Variant
from lightning_speedups.inspection import SetupInfo

__all__ = ["MEMORY_FIGURE", "BenchResult", "VariantRecord"]


@dataclass
class VariantRecord:
    """A variant, the raw results of its runs, and its summary."""

    variant: Variant
    phase: int = 1
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: Optional[VariantSummary] = None
    skipped: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.variant.to_dict(),
            "phase": self.phase,
            "skipped": self.skipped,
            "summary": self.summary.to_dict() if self.summary else None,
            "runs": self.runs,
        }


@dataclass
class BenchResult:
    """All a bench found: what ran, the raw runs, the search, the pick, and the context."""

    options: BenchOptions
    meta: dict[str, Any]
    info: SetupInfo
    skipped_tips: dict[str, str]
    skipped_presets: dict[str, str]
    records: list[VariantRecord]
    baselines: dict[int, VariantRecord]
    search: Optional[SearchResult]
    pick: Optional[VariantRecord]
    notes: list[str]
    user_speedups_keys: list[str]
    #: the goal of a time-to-target bench (``None``: ranked by samples/s)
    target: Any = None
    #: the A/A pair's distance from 1.0 (``None``: not measured)
    noise: Optional[float] = None
    #: the values the user's configs and arguments set for those keys (dotted)
    user_speedups: dict[str, Any] = field(default_factory=dict)
    #: target mode's stack phase: the baseline and the throughput tips, timed by samples/s (none: not run)
    stack: list[VariantRecord] = field(default_factory=list)

    def noise_record(self) -> Optional[VariantRecord]:
        return next((r for r in self.records if r.variant.kind == "aa"), None)

    def record(self, name: str) -> Optional[VariantRecord]:
        return next((r for r in self.records if r.variant.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        opts = dataclasses.asdict(self.options)
        return {
            "meta": self.meta,
            "options": opts,
            "setup": dataclasses.asdict(self.info),
            "memory_figure": MEMORY_FIGURE[self.info.device],
            "skipped_tips": self.skipped_tips,
            "skipped_presets": self.skipped_presets,
            "variants": [r.to_dict() for r in self.records],
            "extra_baselines": [
                {"phase": p, "summary": r.summary.to_dict() if r.summary else None, "runs": r.runs}
                for p, r in sorted(self.baselines.items())
                if p != 1
            ],
            "search": None
            if self.search is None
            else {
                "helpful": self.search.helpful,
                "best": list(self.search.best),
                "speedup": self.search.speedup,
                "steps": [dataclasses.asdict(s) for s in self.search.steps],
            },
            "pick": None if self.pick is None else self.pick.variant.name,
            "target": None if self.target is None else dataclasses.asdict(self.target),
            "noise_floor": self.noise,
            "notes": self.notes,
            "stack_phase": [r.to_dict() for r in self.stack],
        }


MEMORY_FIGURE = {
    "cpu": "train memory = peak live bytes of the CPU allocator during one profiled training batch, above what was"
    " live when it started (torch.profiler); the memory ratio uses this figure",
    "cuda": "train memory = torch.cuda peak allocated during the timed steps, above what was allocated when they"
    " started; the memory ratio uses this figure",
}
