"""LS207 (tip T08), empty-cache-in-step: torch.cuda.empty_cache() (mps / xpu / accelerator) on a line that runs per
step, outside an except block and benchmark/profiling/debugging code."""

from __future__ import annotations

from collections.abc import Iterator

from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import per_step_calls

#: The caching allocator's ``empty_cache`` of each device module.
EMPTY_CACHE = frozenset(
    {"torch.cuda.empty_cache", "torch.mps.empty_cache", "torch.xpu.empty_cache", "torch.accelerator.empty_cache"}
)


def _empty_cache_in_step(ctx: FileContext) -> Iterator[Hit]:
    yield from per_step_calls(
        ctx,
        lambda call: ctx.call_name(call) in EMPTY_CACHE,
        "hands the allocator's cached blocks back to the driver on every batch: freeing them waits for the "
        "device, and the next step allocates them again",
    )


RULE = Rule(
    "LS207",
    "T08",
    "empty-cache-in-step",
    "torch.cuda.empty_cache() (mps / xpu / accelerator) on a line that runs per step, outside an except "
    "block and benchmark/profiling/debugging code",
    "remove it: the caching allocator reuses those blocks on the next step; against fragmentation set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and empty the cache at most once, after evaluation",
    _empty_cache_in_step,
    ("empty_cache",),
)
