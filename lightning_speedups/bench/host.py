"""What the halves of a bench (:mod:`~lightning_speedups.bench.target_runs`,
:mod:`~lightning_speedups.bench.combination_runs`) read of the :class:`~lightning_speedups.bench.runner.Bench`
they are part of: its state and the few methods they call, declared once."""

from __future__ import annotations

from typing import Any, Optional

from lightning_speedups.bench.options import BenchOptions
from lightning_speedups.bench.results import VariantRecord
from lightning_speedups.bench.target import Target
from lightning_speedups.bench.variants import Variant


class BenchState:
    """The state and methods of a :class:`~lightning_speedups.bench.runner.Bench` that its halves use."""

    options: BenchOptions
    target: Optional[Target]
    records: list[VariantRecord]
    variants: list[Variant]
    baselines: dict[int, VariantRecord]
    notes: list[str]
    device: str
    root: str
    trainer_overrides: dict[str, Any]
    _waiting: list[VariantRecord]
    _twins: list[str]
    stack_records: list[VariantRecord]
    _stopped: list[str]
    _spared: list[float]
    _confirmed_carried: list[str]
    _short_of_seed: list[str]
    _confirming: list[str]
    _descended: list[str]
    _batch_dropped: list[str]
    _shorter_dropped: list[str]

    def _estimate(self, variant: Variant) -> float:
        raise NotImplementedError

    def _remaining(self) -> float:
        raise NotImplementedError

    def _add_total(self, n: int) -> None:
        raise NotImplementedError

    def _run_one(self, record: VariantRecord, repeat: int, timeout: Optional[float] = None) -> dict[str, Any]:
        raise NotImplementedError

    def _summarize_phase_one(self, base: VariantRecord) -> None:
        raise NotImplementedError
