"""LS104 (tip T21), non-blocking-from-pageable: non_blocking=True on a tensor that is visibly not pinned (a batch of a
loader without pin_memory=True, torch.from_numpy(...)) in a file that moves data to CUDA."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import DATALOADER, is_const, keyword, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.loaders import batch_loop, pin_state, root_name, unwrap_iter


def _unpinned_loader(ctx: FileContext, source: ast.AST, at: ast.AST) -> Optional[ast.Call]:
    """The DataLoader call ``source`` visibly is (directly, a local/module name, or ``self.attr``),
    if every such loader does not pin memory; else ``None``."""
    values: list[ast.AST]
    if isinstance(source, ast.Call):
        values = [source]
    elif isinstance(source, ast.Name):
        prior = ctx.scopes.bindings_before(source)
        if prior is None:
            module = ctx.scopes.bindings(ctx.tree).get(source.id)
            if ctx.scope_of(source) is ctx.tree or not module:
                return None
            prior = module
        if any(b.kind != "value" or b.value is None for b in prior):
            return None
        values = [b.value for b in prior if b.value is not None]  # every one (checked above)
    elif isinstance(source, ast.Attribute) and isinstance(source.value, ast.Name) and source.value.id == "self":
        cls = ctx.enclosing_class(at)
        if cls is None:
            return None
        values = ctx.scopes.self_attrs(cls)[0].get(source.attr, [])
    else:
        return None
    if not values:
        return None
    loaders: list[ast.Call] = []
    for value in values:
        if not (isinstance(value, ast.Call) and ctx.call_name(value) == DATALOADER and pin_state(value)):
            return None
        loaders.append(value)
    return loaders[0]


def _batch_source(ctx: FileContext, name: ast.Name, call: ast.Call) -> Optional[ast.Call]:
    """If ``name`` is (unpacked from) the target of a ``for ... in <unpinned loader>`` loop, that loader."""
    loop = batch_loop(ctx, name, call)
    return _unpinned_loader(ctx, unwrap_iter(loop.iter), call) if loop is not None else None


def _non_blocking_unpinned(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("to", "cuda"):
            continue
        kw = keyword(call, "non_blocking")
        if kw is None or not is_const(kw.value, True):
            continue
        if func.attr == "to" and call.args and is_const(call.args[0], "cpu"):
            continue  # device-to-host: another matter
        receiver = func.value
        if isinstance(receiver, ast.Call) and ctx.call_name(receiver) in ("torch.from_numpy", "torch.as_tensor"):
            if keyword(receiver, "device") is None:
                yield Hit(
                    call,
                    f"non_blocking=True on {snippet(receiver)}: a fresh tensor in pageable memory, "
                    "so the copy cannot overlap",
                )
            continue
        root = root_name(receiver)
        if root is None:
            continue
        loader = _batch_source(ctx, root, call)
        if loader is not None:
            yield Hit(
                call,
                f"non_blocking=True on `{root.id}`, a batch of the DataLoader at line {loader.lineno} "
                "that does not pin memory: a copy from pageable memory cannot overlap",
            )


RULE = Rule(
    "LS104",
    "T21",
    "non-blocking-from-pageable",
    "non_blocking=True on a tensor that is visibly not pinned (a batch of a loader without pin_memory=True, "
    "torch.from_numpy(...)) in a file that moves data to CUDA",
    "pin the source: DataLoader(..., pin_memory=True) or tensor.pin_memory(); non_blocking only overlaps from pinned memory",
    _non_blocking_unpinned,
    ("non_blocking",),
)
