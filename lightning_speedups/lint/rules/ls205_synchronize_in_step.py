"""LS205 (tip T08), synchronize-in-step: an explicit torch.cuda.synchronize() (torch.accelerator / mps / xpu, a
stream's synchronize()) on a line that runs per step, outside benchmark/profiling/debugging code."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import SYNC_METHODS, is_synchronize, per_step_calls


def _synchronize_in_step(ctx: FileContext) -> Iterator[Hit]:
    for hit in per_step_calls(
        ctx,
        lambda call: is_synchronize(ctx, call),
        "waits for every queued kernel on every batch (the host can no longer run ahead of the GPU)",
    ):
        timer = _event_timer_after(ctx, hit.node)
        if timer is not None:
            # end.record(); torch.cuda.synchronize(); start.elapsed_time(end): without the wait, elapsed_time
            # raises (the end event has not completed), so the advice is never to remove it
            yield hit._replace(
                fix=f"keep it while `{snippet(timer, 40)}` (line {timer.lineno}) reads the events: elapsed_time needs"
                " the end event complete. To stop waiting on every batch, record the events every batch and read the"
                " timings every N batches (synchronize, or end.synchronize(), only then)"
            )
            continue
        read = _host_read_after(ctx, hit.node)
        if read is None:
            yield hit
            continue
        yield hit._replace(
            fix=f"remove it together with the host read after it: `{snippet(read, 40)}` (line {read.lineno}) waits"
            " for the same kernels, so removing the synchronize alone gains nothing; keep that value on the device"
            " (log the tensor, accumulate with .detach()) or read it every N steps"
        )


def _event_timer_after(ctx: FileContext, sync: ast.AST) -> Optional[ast.Call]:
    """A CUDA-event timer's read (``start.elapsed_time(end)``) in the few lines after ``sync``, in its function:
    the synchronize is what lets it read the events."""
    fn = ctx.enclosing_function(sync)
    line = getattr(sync, "lineno", 0)
    reads = [
        c
        for c in ctx.calls
        if line <= c.lineno <= line + 6
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "elapsed_time"
        and ctx.enclosing_function(c) is fn
    ]
    return min(reads, key=lambda c: (c.lineno, c.col_offset), default=None)


def _host_read_after(ctx: FileContext, sync: ast.AST) -> Optional[ast.Call]:
    """The first host read (``x.item()``, ``float(x)``, ...) in the few lines after ``sync``, in its function."""
    fn = ctx.enclosing_function(sync)
    line = getattr(sync, "lineno", 0)
    reads = [
        c
        for c in ctx.calls
        if line < c.lineno <= line + 6
        and ctx.enclosing_function(c) is fn
        and (
            (isinstance(c.func, ast.Attribute) and c.func.attr in SYNC_METHODS and not c.args)
            or (isinstance(c.func, ast.Name) and c.func.id in ("float", "int", "bool") and len(c.args) == 1)
        )
    ]
    return min(reads, key=lambda c: (c.lineno, c.col_offset), default=None)


RULE = Rule(
    "LS205",
    "T08",
    "synchronize-in-step",
    "an explicit torch.cuda.synchronize() (torch.accelerator / mps / xpu, a stream's synchronize()) on a line "
    "that runs per step, outside benchmark/profiling/debugging code",
    "remove it; to time steps, synchronize only every N steps or time with torch.cuda.Event(enable_timing=True); "
    "keep it where host code then reads device memory written outside PyTorch's streams",
    _synchronize_in_step,
    ("synchronize",),
)
