"""LS103 (tip T03), loader-no-pin-memory: DataLoader without pin_memory=True in a file that moves batches to CUDA."""

from __future__ import annotations

from collections.abc import Iterator

from lightning_speedups.lint.astutil import is_const, keyword, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.loaders import dataloader_calls, pin_state, quiet_loader


def _loader_pin_memory(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    for call in dataloader_calls(ctx):
        state = pin_state(call)
        if state is None or quiet_loader(ctx, call):
            continue
        collate = keyword(call, "collate_fn")
        fix = None
        if collate is not None and not is_const(collate.value, None):
            # the loader pins tensors and lists / tuples / dicts of them; an object of another class
            # (DETR's NestedTensor) only if it has a pin_memory() method: the fix depends on the batch
            fix = (
                f"pin_memory=True (only when training on a GPU), copied with .to(device, non_blocking=True); the "
                f"batches come from "
                f"collate_fn={snippet(collate.value)}: tensors and lists / tuples / dicts of them are pinned, an "
                "object of another class only if it defines pin_memory() (give it one, or only its plain "
                "tensors gain)"
            )
        if state == "missing":
            yield Hit(call, "DataLoader without pin_memory=True in a file that moves batches to CUDA", fix)
        else:
            yield Hit(call, "DataLoader with pin_memory=False in a file that moves batches to CUDA", fix)


RULE = Rule(
    "LS103",
    "T03",
    "loader-no-pin-memory",
    "DataLoader without pin_memory=True in a file that moves batches to CUDA",
    "pin_memory=True (only when training on a GPU), and copy the batches with .to(device, non_blocking=True) "
    "(Lightning does): a pinned batch then crosses while the GPU computes",
    _loader_pin_memory,
    ("DataLoader",),
)
