"""T07: cudnn.benchmark for fixed input shapes, switched back off when the shapes keep changing."""

from __future__ import annotations

from typing import Any, Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, on_cuda
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.shapes import batch_shape_signature


class CudnnBenchmark(SpeedupCallback):
    """T07: turn on ``torch.backends.cudnn.benchmark`` for fixed input shapes, and restore it after.

    What it does: cuDNN times several convolution algorithms for each new input shape and keeps the fastest.
    This callback watches the shapes of the first ``watch_steps`` batches and turns benchmarking off again
    (with a warning) once more than ``max_shapes`` distinct shapes have been seen.

    Card: tip T07 ``cudnn-benchmark``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        mode: ``"auto"`` (on when training on a CUDA device), ``"on"`` or ``"off"``.
        max_shapes: distinct input shapes tolerated before benchmarking is switched back off.
        watch_steps: how many training batches to watch.

    Example::

        trainer = Trainer(accelerator="gpu", callbacks=[CudnnBenchmark()])
    """

    tip = "T07"
    part = "cudnn_benchmark"

    def __init__(self, mode: Literal["auto", "on", "off"] = "auto", max_shapes: int = 4, watch_steps: int = 50) -> None:
        super().__init__()
        if mode not in ("auto", "on", "off"):
            raise SettingError(f"`mode` must be 'auto', 'on' or 'off'; got {mode!r}.")
        if not isinstance(max_shapes, int) or max_shapes < 1:
            raise SettingError(f"`max_shapes` must be a positive integer; got {max_shapes!r}.")
        self.mode = mode
        self.max_shapes = max_shapes
        self.watch_steps = watch_steps
        self._previous: Optional[bool] = None
        self.shapes: set[tuple] = set()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.mode == "off":
            self.report(False, "off")
            return
        if self.mode == "auto" and not on_cuda(trainer):
            self.report(False, "skipped, cuDNN is only used on CUDA devices")
            return
        self._previous = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        self.report(True, "cudnn.benchmark on (input shapes are watched, restored after the run)")

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._previous is None or trainer.global_step >= self.watch_steps or not torch.backends.cudnn.benchmark:
            return
        self.shapes.add(batch_shape_signature(batch))
        if len(self.shapes) > self.max_shapes:
            torch.backends.cudnn.benchmark = self._previous
            self.report(False, f"turned off again: {len(self.shapes)} distinct input shapes in {batch_idx + 1} batches")
            rank_zero_warn(
                f"cudnn_benchmark: the input shapes changed {len(self.shapes)} times in the first {batch_idx + 1} batches;"
                " cuDNN re-tunes at every new shape, so benchmarking was turned off again. Pad or bucket the"
                " inputs to a few fixed shapes to benefit from it."
            )

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._previous is not None:
            torch.backends.cudnn.benchmark = self._previous
            self._previous = None

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "fit")
