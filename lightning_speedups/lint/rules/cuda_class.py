"""LS203's numpy variant: a CUDA class (``torch.cuda.FloatTensor`` or a name bound to it) given an array
that numpy makes on the host from sizes (``np.ones``, ``np.random.normal``), where the same tensor could be
made on the device. :mod:`~lightning_speedups.lint.rules.create_move` yields these hits under LS203."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, hit_at
from lightning_speedups.lint.rules.device_common import LEGACY_CONSTRUCTORS, LEGACY_DTYPES, torch_alias
from lightning_speedups.lint.runs import UNKNOWN

#: numpy functions that make an array from sizes (and a fill value): the same array can be made on the device
_NUMPY_MADE = frozenset({"ones", "zeros", "full", "empty", "eye", "arange", "linspace"})


def _cuda_class(ctx: FileContext, node: ast.AST) -> Optional[str]:
    """The legacy class ``node`` names when it is ``torch.cuda.<X>Tensor`` (``"FloatTensor"``), else ``None``."""
    name = ctx.qualname(node) or ""
    parts = name.split(".")
    if len(parts) == 3 and parts[:2] == ["torch", "cuda"] and parts[2] in LEGACY_CONSTRUCTORS:
        return parts[2]
    return None


def _cuda_alias(ctx: FileContext, func: ast.AST) -> Optional[tuple[str, str]]:
    """``(class, device expression)`` when ``func`` is ``torch.cuda.FloatTensor`` or a name bound only to
    it (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``: PyTorch-GAN's alias)."""
    direct = _cuda_class(ctx, func)
    if direct is not None:
        return direct, "'cuda'"
    if not isinstance(func, ast.Name):
        return None
    prior = ctx.scopes.bindings_before(func)
    if prior is None and ctx.scope_of(func) is not ctx.tree:
        prior = ctx.scopes.bindings(ctx.tree).get(func.id)
    if not prior:
        return None
    found: Optional[tuple[str, str]] = None
    for b in prior:
        value = b.value
        if b.kind != "value" or value is None:
            return None
        cls = _cuda_class(ctx, value)
        if cls is not None:
            here = (cls, "'cuda'")
        elif isinstance(value, ast.IfExp):
            body, orelse = _cuda_class(ctx, value.body), _cuda_class(ctx, value.orelse)
            test = snippet(value.test, 60)
            if body is not None and orelse is None and ctx.qualname(value.orelse) == f"torch.{body}":
                here = (body, f"'cuda' if {test} else 'cpu'")
            elif orelse is not None and body is None and ctx.qualname(value.body) == f"torch.{orelse}":
                here = (orelse, f"'cpu' if {test} else 'cuda'")
            else:
                return None
        else:
            return None
        if found is not None and found != here:
            return None
        found = here
    return found


def _numpy_made_fix(ctx: FileContext, data: ast.Call, cls: str, device: str) -> tuple[Optional[str], str]:
    """``(replacement, fix text)`` for ``<CUDA class>(np.<f>(...))``: the same tensor made on the device."""
    torch = torch_alias(ctx)
    name = (ctx.call_name(data) or "").split(".")
    dtype = LEGACY_DTYPES[cls]
    dtype_kw = f"dtype={torch}.{dtype}" if dtype else f"dtype={torch}.get_default_dtype()"
    func = name[-1]
    extra = [k for k in data.keywords if k.arg != "dtype"]
    if name[:2] == ["numpy", "random"]:
        args = [snippet(a, 80) for a in data.args]
        on = f"{dtype_kw}, device={device}"

        def size(text: str) -> str:
            return text if text.startswith("(") else f"({text},)"

        if func == "normal" and len(args) == 3 and not extra:
            shown = f"{torch}.randn({size(args[2])}, {on})"
            if args[1] != "1":
                shown += f" * {args[1]}"
            if args[0] != "0":
                shown += f" + {args[0]}"
        elif func == "randint" and len(args) == 3 and not extra:
            shown = f"{torch}.randint({args[0]}, {args[1]}, {size(args[2])}, {on})"
        elif func == "uniform" and len(args) == 3 and not extra:
            shown = f"{torch}.rand({size(args[2])}, {on}) * ({args[1]} - {args[0]}) + {args[0]}"
        elif func in ("rand", "randn") and args and not extra:
            shown = f"{torch}.{func}({', '.join(args)}, {on})"
        else:
            shown = f"the {torch} random factory of the same distribution, with {on}"
        return None, (
            f"draw it on the device: {shown}; the numbers then come from the device's generator, not numpy's "
            "stream, so a run seeded with np.random.seed draws other values: keep it where the run must "
            "reproduce numpy-seeded numbers"
        )
    if func in ("ones", "zeros") and len(data.args) == 1 and not extra:
        replacement = f"{torch}.{func}({snippet(data.args[0], 200)}, {dtype_kw}, device={device})"
        return replacement, f"create it on the device, same dtype and values: `{replacement}`"
    if func == "full" and len(data.args) == 2 and not extra:
        replacement = (
            f"{torch}.full({snippet(data.args[0], 200)}, {snippet(data.args[1], 80)}, {dtype_kw}, device={device})"
        )
        return replacement, f"create it on the device, same dtype and values: `{replacement}`"
    return (
        None,
        f"create it on the device: {torch}.{func}(..., {dtype_kw}, device={device}) (check the arguments: numpy's and torch's differ)",
    )


def numpy_through_cuda_class(ctx: FileContext) -> Iterator[Hit]:
    """``Tensor(np.random.normal(0, 1, (n, d)))`` with ``Tensor`` a CUDA class: an array made on the host
    (random draws, ones, zeros) and copied to the GPU, where the same tensor could be made."""
    for call in ctx.calls:
        if len(call.args) != 1 or call.keywords:
            continue
        data = call.args[0]
        if not isinstance(data, ast.Call):
            continue
        name = ctx.call_name(data) or ""
        parts = name.split(".")
        if not (
            (len(parts) == 3 and parts[:2] == ["numpy", "random"])
            or (len(parts) == 2 and parts[0] == "numpy" and parts[1] in _NUMPY_MADE)
        ):
            continue
        alias = _cuda_alias(ctx, call.func)
        if alias is None:
            continue
        cls, device = alias
        runs = ctx.where.runs(call)
        if runs.how == UNKNOWN and not ctx.where.maybe_hot(call):
            continue
        replacement, fix = _numpy_made_fix(ctx, data, cls, device)
        shown = snippet(call.func, 30)
        message = (
            f"`{shown}({snippet(data, 40)})` makes the array on the host with numpy and copies it to the GPU "
            f"(`{shown}` is torch.cuda.{cls}), {runs.how} (in {runs.where})"
        )
        h = hit_at(call, message, runs, fix)
        if h is not None:
            yield h._replace(replacement=replacement) if replacement else h
