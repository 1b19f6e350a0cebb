"""LS102 (tip T02), loader-no-workers: DataLoader without num_workers, or with num_workers=0, in a file that moves
batches to CUDA."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import argument, is_const
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.loaders import dataloader_calls, dataset_call, quiet_loader

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_NUM_WORKERS_POS = 5


def _dataset_class(ctx: FileContext, node: Optional[ast.AST], at: ast.AST) -> Optional[str]:
    """The class name (or ``torch.utils.data.X``) of the dataset ``node`` visibly is, else ``None``."""
    call = dataset_call(ctx, node, at)
    if call is None:
        return None
    qual = ctx.call_name(call)
    if qual is not None:
        return qual
    return call.func.id if isinstance(call.func, ast.Name) else None


def _indexes_memory(node: ast.AST) -> bool:
    """``self.data[i]`` / ``self.trajectories["states"][t][i]``: an index into an attribute."""
    if not isinstance(node, ast.Subscript):
        return False
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute)


def _in_memory_class(cls: ast.ClassDef) -> bool:
    """``__getitem__`` only indexes attributes (``return self.data[i]``), possibly after looking up
    where the item is (``t, i = self.get_idx[i]``): the data is in memory already."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getitem__":
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
                return False
            if not all(isinstance(s, ast.Assign) and _indexes_memory(s.value) for s in body[:-1]):
                return False
            ret = body[-1].value
            parts = ret.elts if isinstance(ret, ast.Tuple) else [ret]
            return bool(parts) and all(_indexes_memory(p) for p in parts)
    return False


def _in_memory_datasets(ctx: FileContext) -> set[str]:
    """Dataset classes of this file whose ``__getitem__`` only indexes attributes (``return self.data[i]``)."""
    return {cls.name for cls in ctx.classes if _in_memory_class(cls)}


def _in_memory_elsewhere(ctx: FileContext, call: Optional[ast.Call]) -> bool:
    """The dataset's class lives in another file of the project and is in memory (``gail.ExpertDataset``)."""
    project = ctx.project
    if call is None or project is None:
        return False
    found = project.resolve_name(ctx, call.func)
    return found is not None and isinstance(found[1], ast.ClassDef) and _in_memory_class(found[1])


_WORKERS_FIX = "num_workers=4 (about 4 per GPU, at most the CPUs you have) and persistent_workers=True"


def _loader_workers(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    iterable = ctx.facts.iterable_dataset_classes
    if any(".demos." in q or q.endswith(".demos") for q in ctx.aliases.values()):
        return  # Lightning's demo datasets (WikiText2, RandomDataset) index tensors in memory
    for call in dataloader_calls(ctx):
        state, value = argument(call, "num_workers", _NUM_WORKERS_POS)
        if state == "missing":
            text = "DataLoader without num_workers loads every batch in the main process while the GPU waits"
        elif state == "given" and is_const(value, 0):
            text = "DataLoader with num_workers=0 loads every batch in the main process while the GPU waits"
        else:
            continue
        _, dataset = argument(call, "dataset", 0)
        kind = _dataset_class(ctx, dataset, call)
        if kind is not None and (kind in iterable or kind.endswith("IterableDataset")):
            continue  # workers each get a copy of the stream (a replay buffer goes stale): not a safe fix
        if kind == "torch.utils.data.TensorDataset" or (kind is not None and kind in _in_memory_datasets(ctx)):
            continue  # indexing tensors already in memory: workers only add inter-process copies
        if _in_memory_elsewhere(ctx, dataset_call(ctx, dataset, call)):
            continue
        if quiet_loader(ctx, call):
            continue
        fix = None
        if ctx.enclosing_function(call) is None and not ctx.purpose.under_main_guard(call):
            fix = (
                f"{_WORKERS_FIX}, once the "
                'script runs under `if __name__ == "__main__":` (it builds the loader at module level; workers '
                "started by spawn, the default on Windows and macOS, import the script again)"
            )
        yield Hit(call, text, fix)


RULE = Rule(
    "LS102",
    "T02",
    "loader-no-workers",
    "DataLoader without num_workers, or with num_workers=0, in a file that moves batches to CUDA",
    _WORKERS_FIX,
    _loader_workers,
    ("DataLoader",),
)
