"""T07: count distinct training input shapes; warn when ``cudnn.benchmark`` keeps re-tuning."""

from __future__ import annotations

from typing import Any, Optional

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, on_cuda
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.shapes import ShapeTracker


class ShapeWatch(SpeedupCallback):
    """Count distinct training input shapes; warn when ``cudnn.benchmark`` keeps re-tuning (tip T07).

    Records the shapes of the floating-point tensors of every training batch (all tensors when a
    batch has none, e.g. token ids). With ``torch.backends.cudnn.benchmark`` on, cuDNN times every
    convolution algorithm again at each new shape; when more than ``max_shapes`` distinct shapes
    appear on a CUDA device the callback warns once with the evidence ("N distinct input shapes in
    M steps"). On CPU it only counts (benchmark mode does nothing there).

    Card: tip T07 ``cudnn-benchmark``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        max_shapes: distinct shapes that are fine (default 2: full batches and the last one).

    Examples:
        >>> watch = ShapeWatch()
        >>> # after fit: watch.distinct_shapes, watch.steps
    """

    tip = "T07"
    part = "shape_watch"

    def __init__(self, max_shapes: int = 2) -> None:
        super().__init__()
        if not isinstance(max_shapes, int) or isinstance(max_shapes, bool) or max_shapes < 1:
            raise SettingError(f"`ShapeWatch(max_shapes=...)` must be an int >= 1, got {max_shapes!r}.")
        self.max_shapes = max_shapes
        self.tracker = ShapeTracker(max_shapes=max_shapes)
        self.warned = False
        self._cuda = False

    @property
    def distinct_shapes(self) -> int:
        """Distinct input shapes seen in this fit."""
        return self.tracker.distinct_shapes

    @property
    def steps(self) -> int:
        return self.tracker.steps

    @property
    def shape_counts(self) -> dict[tuple, int]:
        """Batches seen per shape signature (``((path, shape), ...)``)."""
        return self.tracker.shape_counts

    def finding(self) -> Optional[dict[str, Any]]:
        return self.tracker.finding()

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.tracker = ShapeTracker(max_shapes=self.max_shapes)
        self.warned = False
        self._cuda = on_cuda(trainer)
        self.report(True, "watching training input shapes" + ("" if self._cuda else " (cudnn not used on CPU)"))

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        new = self.tracker.update(batch)
        if not new or self.warned or not self._cuda:
            return
        finding = self.tracker.finding()
        if finding is not None:
            self.warned = True
            rank_zero_warn(
                f"ShapeWatch (tip T07): {finding['evidence']}: benchmark mode re-tunes every convolution at"
                f" each new shape. Fix: {finding['fix']}.",
                category=PossibleUserWarning,
            )

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.report(True, f"{self.distinct_shapes} distinct input shapes in {self.steps} steps")
