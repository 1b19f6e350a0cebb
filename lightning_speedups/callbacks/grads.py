"""T12 ``grads-to-none`` callback: catch, at run time, gradients zeroed instead of set to ``None``.

Card
----
* **What it does.** Watches the first ``check_steps`` optimizer steps of ``fit``: right after Lightning's
  zero-grad step (``on_before_zero_grad`` then the LightningModule's ``optimizer_zero_grad``), in
  ``on_before_backward``, every gradient should be ``None``. If some are tensors (zeros), it warns once
  with the evidence (how many parameters, how many bytes) and the fix, and names the likely culprit: an
  ``optimizer_zero_grad`` override of the LightningModule or a ``zero_grad`` override of the optimizer.
  In manual optimization it flags the case where every gradient is an all-zero tensor before backward.
* **Caveats.** It reads gradients a few times at the start (one small device reduction each when
  it finds something); after ``check_steps`` steps it costs nothing.
* **Card.** Tip T12 ``grads-to-none``: its seeds, expected gain and when it hurts are stated once, in the
  tip's record (``python -m lightning_speedups tips``).

Examples:
    >>> from lightning.pytorch import Trainer
    >>> trainer = Trainer(callbacks=[GradsToNoneCheck()])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.grads import FIX, ZeroedGrads, find_zeroed_grads


def _culprit(pl_module: pl.LightningModule, optimizer: Any) -> str:
    if type(pl_module).optimizer_zero_grad is not pl.LightningModule.optimizer_zero_grad:
        return f"`{type(pl_module).__name__}.optimizer_zero_grad` (overridden)"
    inner = getattr(optimizer, "optimizer", optimizer)  # LightningOptimizer wraps the real one
    if inner is not None and type(inner).zero_grad is not torch.optim.Optimizer.zero_grad:
        return f"`{type(inner).__name__}.zero_grad` (overridden)"
    return "a `zero_grad(set_to_none=False)` call"


class GradsToNoneCheck(SpeedupCallback):
    """Warn once when gradients are zeroed instead of set to ``None`` (tip T12).

    Args:
        check_steps: how many zero-grad steps to inspect before going quiet (>= 1).

    After a finding, :attr:`finding` holds the :class:`~lightning_speedups.functional.grads.ZeroedGrads`
    evidence and :attr:`culprit` the likely source.
    """

    tip = "T12"
    part = "grads_to_none"

    def __init__(self, check_steps: int = 3) -> None:
        super().__init__()
        if isinstance(check_steps, bool) or not isinstance(check_steps, int) or check_steps < 1:
            raise SettingError(f"`check_steps` must be a positive int (e.g. 3), got {check_steps!r}.")
        self.check_steps = check_steps
        self.finding: Optional[ZeroedGrads] = None
        self.culprit: Optional[str] = None
        self._checked = 0
        self._pending: Any = None  # the optimizer whose zero_grad just ran

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._checked = 0
        self._pending = None
        if self.finding is None:
            self.report(True, f"watching the first {self.check_steps} zero-grad step(s)")

    @override
    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if self._checked < self.check_steps and self.finding is None:
            self._pending = optimizer

    @override
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if self.finding is not None or self._checked >= self.check_steps:
            return
        if pl_module.automatic_optimization:
            if self._pending is None:
                return  # accumulating: gradients are legitimately kept between micro-batches
            optimizer, self._pending = self._pending, None
            params = [p for g in optimizer.param_groups for p in g["params"]]
            names = {id(p): n for n, p in pl_module.named_parameters()}
            found = find_zeroed_grads(params)
            found.names = [
                names.get(id(p), f"param{i}") for i, p in enumerate(params) if p.requires_grad and p.grad is not None
            ]
        else:
            found = find_zeroed_grads(pl_module)
            optimizer = None
            if found.found and found.all_zero < len(found.names):
                found = ZeroedGrads(total=found.total)  # non-zero grads: accumulation, not zeroing
        self._checked += 1
        if not found.found:
            if self._checked >= self.check_steps:
                self.report(True, f"checked {self._checked} zero-grad step(s): gradients are set to None")
            return
        self.finding = found
        self.culprit = _culprit(pl_module, optimizer)
        examples = ", ".join(found.names[:3]) + (", ..." if len(found.names) > 3 else "")
        rank_zero_warn(
            f"grads-to-none (T12): after the zero-grad step {found.summary()} (e.g. {examples}); likely "
            f"source: {self.culprit}. Fix: {FIX}.",
            category=PossibleUserWarning,
        )
        self.report(True, f"found {found.summary()}, from {self.culprit}")
