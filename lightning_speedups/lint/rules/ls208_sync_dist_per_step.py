"""LS208 (tip T08), sync-dist-per-step: self.log(..., sync_dist=True) logged every step (in training_step, where
on_step=True is the default): an all-reduce every step under DDP / FSDP."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import DEF_TYPES, is_const, keyword
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.runs import TRAIN_BATCH_HOOKS

#: Where ``self.log`` logs every step by default (``on_step=True``): the training step and the hooks that run
#: with it (Lightning's ``_FxValidator``: on_train_batch_*, on_before / after_backward, on_before_optimizer_step,
#: on_before_zero_grad), the same hooks the frequency analysis knows as per training step.
_ON_STEP_DEFAULT = frozenset({"training_step"}) | TRAIN_BATCH_HOOKS


def _sync_dist_per_step(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("log", "log_dict")):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id in ("self", "pl_module")):
            continue
        kw = keyword(call, "sync_dist")
        if kw is None or not is_const(kw.value, True):
            continue
        fn = ctx.enclosing_function(call)
        on_step = keyword(call, "on_step")
        if on_step is not None:
            every_step = not is_const(on_step.value, False)
        else:  # Lightning's default: on_step=True in the training step, False in validation / test
            every_step = isinstance(fn, DEF_TYPES) and fn.name in _ON_STEP_DEFAULT
        if not every_step:
            continue  # reduced once, when the epoch's value is computed
        r = ctx.where.hot_runs(call)
        if r is None:
            continue
        yield Hit(
            call,
            f"self.{func.attr}(..., sync_dist=True) in {r.where} reduces the value across processes on every step "
            "(a collective the ranks wait for, under DDP / FSDP)",
        )


RULE = Rule(
    "LS208",
    "T08",
    "sync-dist-per-step",
    "self.log(..., sync_dist=True) logged every step (in training_step, where on_step=True is the default): "
    "an all-reduce every step under DDP / FSDP",
    "log the per-step value without sync_dist (each rank's own; rank 0's reaches the logger), or log it with "
    "on_step=False, on_epoch=True so it is reduced once per epoch",
    _sync_dist_per_step,
    ("sync_dist",),
)
