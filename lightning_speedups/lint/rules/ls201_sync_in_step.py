"""LS201 (tip T08), sync-in-step: `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)`, `float(t)`, `int(t)`, a
GradScaler's `get_scale()` or a tensor in an `if`/`while` condition inside training_step / validation_step or a
training-loop body."""

from __future__ import annotations

from collections.abc import Iterator

from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import HOT_TRIGGER
from lightning_speedups.lint.rules.host_reads import host_reads_per_step, with_run


def _sync_calls(ctx: FileContext) -> Iterator[Hit]:
    for node, message, r in host_reads_per_step(ctx):
        if not r.via:
            yield Hit(node, with_run(ctx, node, message + " on every batch"))


RULE = Rule(
    "LS201",
    "T08",
    "sync-in-step",
    "`.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)`, `float(t)`, `int(t)`, a GradScaler's `get_scale()` or "
    "a tensor in an `if`/`while` condition inside training_step / validation_step or a training-loop body",
    "keep values on the device: log the tensor (self.log accepts tensors), accumulate with loss.detach(), "
    "read it on the host once per epoch or under `if step % N == 0`",
    _sync_calls,
    (HOT_TRIGGER,),
)
