"""LS105 (tip T13), tensor-of-tensors: torch.tensor([...]) of tensors (a list comprehension or literal)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at


def _tensor_of_tensors(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        if not call.args or ctx.call_name(call) != "torch.tensor":
            continue
        arg = call.args[0]
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            tensors = ctx.classify.is_tensor(arg.elt)
        elif isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
            tensors = all(ctx.classify.is_tensor(e) for e in arg.elts)
        else:
            tensors = False
        if tensors:
            runs = ctx.where.runs(call)
            h = hit_at(
                call,
                f"torch.tensor({snippet(arg)}) builds a tensor from tensors one Python scalar at a "
                f"time (a host copy, and a device sync per element on GPU), {runs.how} (in {runs.where})",
                runs,
            )
            if h is not None:
                yield h


RULE = Rule(
    "LS105",
    "T13",
    "tensor-of-tensors",
    "torch.tensor([...]) of tensors (a list comprehension or literal)",
    "torch.stack([...]) keeps the data on its device in one kernel",
    _tensor_of_tensors,
    (r"tensor\s*\(\s*[\[(]",),
)
