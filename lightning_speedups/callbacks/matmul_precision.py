"""T05: TF32 matrix products (float32 matmul precision) on GPUs that have TF32 tensor cores."""

from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.functional.precision import resolve_matmul_precision


class MatmulPrecision(SpeedupCallback):
    """TF32: ``torch.set_float32_matmul_precision("high")`` on GPUs with TF32 tensor cores, restored after.

    What it does: fp32 matrix products run on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate).

    Card: tip T05 ``amp``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        mode: ``"auto"`` (``"high"`` on Ampere or newer GPUs), ``"highest"``, ``"high"`` or ``"medium"``.
    """

    tip = "T05"
    part = "tf32"

    def __init__(self, mode: str = "auto") -> None:
        super().__init__()
        resolve_matmul_precision(mode, "cpu")  # validates the value
        self.mode = mode
        self._previous: Optional[str] = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        value, reason = resolve_matmul_precision(self.mode, trainer.strategy.root_device.type)
        if value is None:
            self.report(False, f"skipped, {reason}")
            return
        self._previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(value)
        self.report(True, f"float32 matmul precision {value!r}: {reason}")

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._previous is not None:
            torch.set_float32_matmul_precision(self._previous)
            self._previous = None

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "fit")
