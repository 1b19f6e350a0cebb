"""T10 grad-accumulation: Gradient accumulation to reach an effective batch.

Card:
    Seeds: A#9, B#13 (claim: simulates a big batch).
    What it does: EffectiveBatchSize sets accumulate_grad_batches so that batch size x devices x
    nodes x accumulation reaches the effective batch asked for, counting every rank of every node.
    Expected gain: the optimisation of a big batch on a device that only fits a small one.
    When it hurts: it changes the optimisation (fewer optimizer steps); BatchNorm still sees the
    small batch.
"""

from __future__ import annotations

from typing import Any, Optional

from lightning_speedups.callbacks import EffectiveBatchSize
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import plural
from lightning_speedups.tips.record import Bounds, BuildContext, Placed, Setting, SuiteCase, Tip, at

_BATCHNORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")


def check(facts: Facts) -> Finding:
    """T10 grad-accumulation: samples per optimizer step, and BatchNorm on small micro-batches."""
    tip = "T10"
    if facts.batch_size is None:
        return Finding.not_checked(tip, facts.run_note() or "the train loader has no batch size")
    acc = facts.accumulate_grad_batches
    eff = facts.batch_size * facts.world_size * acc
    ev = f"{facts.batch_size} per batch x {facts.world_size} process(es) x {acc} accumulated = {eff:,} samples per optimizer step"
    bns = sum(n for t, n in facts.module_counts.items() if t in _BATCHNORMS)
    if acc > 1 and bns and facts.batch_size < 16:
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"{ev}, but {plural(bns, 'BatchNorm layer')} normalise each micro-batch of {facts.batch_size}: their"
                    " statistics stay those of the small batch",
                    "a larger micro-batch (speedups.largest_batch.enabled: true) with speedups.effective_batch_size, or"
                    " GroupNorm / LayerNorm instead of BatchNorm",
                )
            ],
        )
    cb = facts.callback_of("EffectiveBatchSize")
    if cb is not None and cb.status is not None:
        return Finding.ok(tip, "EffectiveBatchSize: " + cb.status[1])
    return Finding.ok(
        tip,
        ev + ("" if acc > 1 else "; accumulation is for a batch that does not fit (speedups.effective_batch_size)"),
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T10 adds, each at its place in the callback list."""
    # before LargestBatch (order 20): the search then keeps this effective batch and lowers accumulation
    return (
        [(at("effective_batch"), EffectiveBatchSize(s.effective_batch_size))]
        if s.effective_batch_size is not None
        else []
    )


def _accumulates(trainer: Any, model: Any, callbacks: Any) -> None:
    assert trainer.accumulate_grad_batches > 1, trainer.accumulate_grad_batches


TIP = Tip(
    id="T10",
    slug="grad-accumulation",
    title="Gradient accumulation to reach an effective batch",
    seeds=("A#9", "B#13"),
    claim="simulates a big batch",
    does="EffectiveBatchSize sets accumulate_grad_batches so that batch size x devices x nodes x accumulation reaches the effective batch asked for, counting every rank of every node.",
    gain="the optimisation of a big batch on a device that only fits a small one",
    hurts="it changes the optimisation (fewer optimizer steps); BatchNorm still sees the small batch",
    check=check,
    settings=(
        Setting(
            "effective_batch_size",
            Optional[int],
            None,
            doc="T10. Sets ``accumulate_grad_batches`` to reach this many samples per optimizer step.",
            bounds=Bounds(ge=1),
        ),
    ),
    callbacks=callbacks,
    parts=(EffectiveBatchSize,),
    not_timed="gradient accumulation changes the optimisation, not the step time: compare accuracy, not samples/s",
    suite=(
        SuiteCase(
            "accumulate",
            settings={"effective_batch_size": 8},
            kinds=("cnn", "transformer", "configure_model", "scheduler"),
            acted=_accumulates,
        ),
    ),
)
