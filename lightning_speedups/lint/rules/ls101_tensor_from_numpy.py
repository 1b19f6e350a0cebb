"""LS101 (tip T13), tensor-from-numpy: torch.tensor(ndarray) on a visible numpy array copies it."""

from __future__ import annotations

from collections.abc import Iterator

from lightning_speedups.lint.astutil import is_const, keyword, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at


def _tensor_from_numpy(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        if not call.args or ctx.call_name(call) != "torch.tensor":
            continue
        device = keyword(call, "device")
        if device is not None and not is_const(device.value, "cpu"):
            continue  # the data must cross to the device anyway: as_tensor would copy too
        arg = call.args[0]
        if ctx.classify.is_numpy(arg):
            runs = ctx.where.runs(call)
            h = hit_at(call, f"torch.tensor({snippet(arg)}) copies a numpy array, {runs.how} (in {runs.where})", runs)
            if h is not None:
                yield h


RULE = Rule(
    "LS101",
    "T13",
    "tensor-from-numpy",
    "torch.tensor(ndarray) on a visible numpy array copies it",
    "torch.from_numpy(arr) (shares memory) or torch.as_tensor(arr, dtype=..., device=...)",
    _tensor_from_numpy,
    ("numpy", r"tensor\s*\("),
)
