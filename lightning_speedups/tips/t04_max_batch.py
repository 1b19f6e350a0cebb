"""T04 max-batch: Largest batch that fits, learning rate scaled by the linear rule.

Card:
    Seeds: A#3, B#10 (claim: faster epochs).
    What it does: LargestBatch searches the largest batch that fits (GPU: until out of memory; CPU:
    within memory_budget), rounds it down to a multiple, and scales the learning rate by the linear
    or square-root rule; it can keep the effective batch by lowering accumulation.
    Expected gain: better device use per step; faster epochs when the device was under-used.
    When it hurts: a bigger batch changes the optimisation: the learning rate must follow, and
    generalisation can suffer; samples/s are not like for like.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from lightning_speedups.callbacks import LargestBatch
from lightning_speedups.functional import find_largest_batch_size
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import fmt_bytes
from lightning_speedups.tips.record import (
    FROM_PART,
    BenchVariant,
    BuildContext,
    Placed,
    Setting,
    SuiteCase,
    Tip,
    at,
    bounded,
    part_kwargs,
    settings_of,
)


@dataclass
@settings_of(LargestBatch)
class LargestBatchSettings:
    """T04: search the largest batch that fits (GPU: until out of memory; CPU: within ``memory_budget``),
    rounded down to ``multiple``, with the learning rate scaled by ``lr_rule``."""

    enabled: bool = False
    memory_budget: Union[int, float, str, None] = FROM_PART
    multiple: int = bounded(FROM_PART, ge=1)
    lr_rule: Literal["linear", "sqrt", "off"] = FROM_PART
    base_batch_size: Optional[int] = bounded(FROM_PART, ge=1)
    keep_effective_batch: bool = FROM_PART
    max_batch_size: Optional[int] = bounded(FROM_PART, ge=1)
    margin: float = bounded(FROM_PART, ge=0, lt=1)
    batch_size: Optional[int] = bounded(FROM_PART, ge=1)


def check(facts: Facts) -> Finding:
    """T04 max-batch: peak device memory against the device's, at the current batch size."""
    tip = "T04"
    lb = facts.callback_of("LargestBatch")
    if lb is not None and lb.status is not None:
        return Finding.ok(tip, "LargestBatch: " + lb.status[1])
    bs = f"batch size {facts.batch_size}" if facts.batch_size else "the current batch size"
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"the largest batch is bounded by GPU memory; on {facts.device_type} a larger batch rarely shortens an"
            f" epoch ({bs} now)",
            "run the doctor on the GPU machine; on CPU speedups.largest_batch.memory_budget bounds the search",
        )
    if facts.peak_memory is None or not facts.total_memory:
        return Finding.not_checked(tip, facts.run_note() or "peak memory was not measured")
    share = facts.peak_memory / facts.total_memory
    ev = f"peak memory {fmt_bytes(facts.peak_memory)} of {fmt_bytes(facts.total_memory)} ({share:.0%}) at {bs}"
    if share < 0.5:
        return Finding.from_items(
            tip,
            [
                Item(
                    "medium" if share < 0.25 else "low",
                    ev + ": a larger batch fits",
                    "speedups.largest_batch.enabled: true (LargestBatch callback: the largest batch that fits, rounded to a"
                    " multiple of 8, learning rate scaled by the linear rule)",
                    "runtime",
                )
            ],
        )
    return Finding.ok(tip, ev)


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T04 adds, each at its place in the callback list."""
    lb = s.largest_batch
    if not lb.enabled:
        return []
    return [
        (
            at("largest_batch"),
            LargestBatch(
                **part_kwargs(
                    lb,
                    LargestBatch,
                    lr_rule=None if lb.lr_rule == "off" else lb.lr_rule,
                    # the effective batch of T10 is kept: the search then lowers accumulation
                    keep_effective_batch=lb.keep_effective_batch or s.effective_batch_size is not None,
                )
            ),
        )
    ]


TIP = Tip(
    id="T04",
    slug="max-batch",
    title="Largest batch that fits, learning rate scaled by the linear rule",
    seeds=("A#3", "B#10"),
    claim="faster epochs",
    does="LargestBatch searches the largest batch that fits (GPU: until out of memory; CPU: within memory_budget), rounds it down to a multiple, and scales the learning rate by the linear or square-root rule; it can keep the effective batch by lowering accumulation.",
    gain="better device use per step; faster epochs when the device was under-used",
    hurts="a bigger batch changes the optimisation: the learning rate must follow, and generalisation can suffer; samples/s are not like for like",
    check=check,
    settings=(
        Setting(
            "largest_batch",
            LargestBatchSettings,
            factory=LargestBatchSettings,
            doc="T04. Largest batch that fits, with learning-rate scaling.",
            on=lambda v: v.enabled,
        ),
    ),
    callbacks=callbacks,
    parts=(
        LargestBatch,
        find_largest_batch_size,
    ),
    # target mode: the configured batch times 4 (bench sets largest_batch.batch_size), lr by each rule
    bench=(
        BenchVariant(
            {"largest_batch.enabled": True, "largest_batch.lr_rule": "linear"},
            mode="target",
            name="x4-linear",
            batch_scale=4,
        ),
        BenchVariant(
            {"largest_batch.enabled": True, "largest_batch.lr_rule": "sqrt"},
            mode="target",
            name="x4-sqrt",
            batch_scale=4,
        ),
    ),
    not_timed="changes the batch size and the learning rate, so samples/s are not like for like: judged by time to a target (bench --target)",
    suite=(
        SuiteCase(
            "search",
            settings={
                "largest_batch.enabled": True,
                "largest_batch.memory_budget": "1GiB",
                "largest_batch.max_batch_size": 64,
            },
            kinds=("cnn",),
            compose=False,
        ),
    ),
)
