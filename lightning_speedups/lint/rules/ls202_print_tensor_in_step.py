"""LS202 (tip T08), print-tensor-in-step: print() of a tensor (also in an f-string or %-format) inside a step method or
a training loop."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import HOT_TRIGGER, SYNC_METHODS
from lightning_speedups.lint.runs import STEP_METHODS


def _print_tensor(ctx: FileContext) -> Iterator[Hit]:
    if ctx.imports_name("print"):
        return  # rich's print, or another one: not the builtin
    for call in ctx.calls:
        if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        shown = [a for a in call.args if ctx.classify.formats_tensor(a)]
        if not shown:
            continue
        if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in SYNC_METHODS and not n.args
            for a in call.args
            for n in ast.walk(a)
        ):
            continue  # print(..., d_loss.item(), M): the .item() waits first (LS201); formatting M waits for nothing new
        where = ctx.where.hot_context(call, STEP_METHODS)
        if where is not None:
            yield Hit(call, f"print({snippet(shown[0], 30)}) in {where} formats a tensor: a device sync on every batch")


RULE = Rule(
    "LS202",
    "T08",
    "print-tensor-in-step",
    "print() of a tensor (also in an f-string or %-format) inside a step method or a training loop",
    "log the tensor with self.log(...) or print it only every N steps (`if step % N == 0:`)",
    _print_tensor,
    (r"print\s*\(", HOT_TRIGGER),
)
