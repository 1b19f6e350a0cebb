"""LS302 (tip T12), zero-grad-keep: zero_grad(set_to_none=False)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import is_const, keyword
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at


def _zero_grad_keep(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != "zero_grad":
            continue
        kw = keyword(call, "set_to_none")
        value = kw.value if kw is not None else (call.args[0] if call.args else None)
        if is_const(value, False):
            if ctx.facts.grads_used_in_place:
                continue  # p.grad += g later: with set_to_none=True that raises on None
            runs = ctx.where.runs(call)
            h = hit_at(
                call,
                f"zero_grad(set_to_none=False) writes zeros into every gradient (a memset per parameter), {runs.how}",
                runs,
            )
            if h is not None:
                yield h


RULE = Rule(
    "LS302",
    "T12",
    "zero-grad-keep",
    "zero_grad(set_to_none=False)",
    "zero_grad() (set_to_none=True, the default since torch 2.0)",
    _zero_grad_keep,
    (r"zero_grad\s*\(\s*(?:set_to_none\s*=\s*)?False",),
)
