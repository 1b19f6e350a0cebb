"""LS303 (tip T12), grad-zeroed-in-place: p.grad.zero_() / p.grad.data.zero_() in a zero_grad override or a loop over
parameters."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import DEF_TYPES, is_const, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule


def _is_grad(node: ast.AST) -> bool:
    """``p.grad`` or ``p.grad.data``."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _zeroing_context(ctx: FileContext, node: ast.AST) -> bool:
    """Inside a ``*zero_grad*`` function or a loop over ``.parameters()`` / ``group["params"]``."""
    for anc, _ in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES):
            args = anc.args
            if any(a.arg == "set_to_none" for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]):
                return False  # implements the set_to_none=False option itself (like torch's zero_grad)
            break
    for anc, _ in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES) and "zero_grad" in anc.name:
            return True
        if isinstance(anc, (ast.For, ast.AsyncFor)):
            it = anc.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                if it.func.attr in ("parameters", "named_parameters"):
                    return True
            if isinstance(it, ast.Subscript) and is_const(it.slice, "params"):
                return True
    return False


def _grad_zeroed_in_place(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or not _is_grad(func.value):
            continue
        zeroes = (func.attr == "zero_" and not call.args) or (
            func.attr in ("fill_", "mul_")
            and len(call.args) == 1
            and (is_const(call.args[0], 0) or is_const(call.args[0], 0.0))
        )
        if zeroes and _zeroing_context(ctx, call) and not ctx.facts.grads_used_in_place:
            yield Hit(call, f"{snippet(call)} writes zeros into the gradient instead of dropping it")


RULE = Rule(
    "LS303",
    "T12",
    "grad-zeroed-in-place",
    "p.grad.zero_() / p.grad.data.zero_() in a zero_grad override or a loop over parameters",
    "p.grad = None (what optimizer.zero_grad() does by default); code that reads p.grad afterwards "
    "(grad-norm logging, copying gradients to fp32 master weights) must then skip a parameter whose grad "
    "is None (one that got no gradient this step)",
    _grad_zeroed_in_place,
    (r"grad\s*(?:\.\s*data\s*)?\.\s*(?:zero_|fill_|mul_)\s*\(",),
)
