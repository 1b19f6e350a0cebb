"""T18: warn when floating-point inputs are far from normalised."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.data.normalize import (
    InputStats,
    input_stats,
    merge_stats,
    normalisation_problems,
)
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.loaders import named_tensors


class InputStatsCheck(SpeedupCallback):
    """Warn when floating-point inputs are far from normalised (tip T18).

    Card: tip T18 ``input-norm``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** Over the first ``batches`` training batches (as the model receives them,
      after the transfer and any :class:`DeviceNormalize`), pools mean, std, min and max of each
      floating-point tensor with at least ``min_dims`` dimensions, and warns once per tensor that
      looks like raw 0..255 pixels, has a mean far from 0 or a standard deviation far from 1,
      naming the tensor (``batch[0]``, ``batch['image']``) and its statistics.
    * **Caveats.** Inputs that are meant to be unnormalised (counts, coordinates) warn once.

    Args:
        batches: how many training batches to look at.
        mean_tol: the largest ``|mean|`` that counts as centred.
        std_range: the standard deviations that count as unit scale.
        min_dims: tensors with fewer dimensions (targets, scalars) are skipped.

    Examples:
        >>> check = InputStatsCheck(batches=2)
        >>> check.problems
        {}
    """

    tip = "T18"
    part = "input_stats"

    def __init__(
        self,
        batches: int = 3,
        mean_tol: float = 1.0,
        std_range: tuple[float, float] = (0.2, 5.0),
        min_dims: int = 2,
    ) -> None:
        super().__init__()
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise SettingError(f"`batches` must be an int >= 1, got {batches!r}.")
        if mean_tol <= 0:
            raise SettingError(f"`mean_tol` must be > 0, got {mean_tol!r}.")
        lo, hi = std_range
        if not 0 < lo < 1 < hi:
            raise SettingError(f"`std_range` must be (low, high) with 0 < low < 1 < high, got {std_range!r}.")
        self.batches = batches
        self.mean_tol = float(mean_tol)
        self.std_range = (float(lo), float(hi))
        self.min_dims = min_dims
        self.stats: dict[str, InputStats] = {}
        self.problems: dict[str, list[str]] = {}
        self._seen = 0
        self._done = False

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._done:
            return
        for name, t in named_tensors(batch):
            if t.is_floating_point() and t.ndim >= self.min_dims and t.numel() > 0:
                self.stats[name] = merge_stats(self.stats.get(name), input_stats(t))
        self._seen += 1
        if self._seen >= self.batches:
            self._judge()

    def _judge(self) -> None:
        if self._done:
            return
        self._done = True
        for name, s in self.stats.items():
            found = normalisation_problems(s, mean_tol=self.mean_tol, std_range=self.std_range)
            if found:
                self.problems[name] = found
                rank_zero_warn(
                    f"InputStatsCheck: input {name} looks unnormalised over {self._seen} batch(es): "
                    f"{'; '.join(found)} (mean {s.mean:.3g}, std {s.std:.3g}, min {s.min:.3g}, max {s.max:.3g})."
                    " Normalise it in the dataset or with lightning_speedups DeviceNormalize.",
                    category=PossibleUserWarning,
                )
        if not self.stats:
            self.report(False, "no floating-point inputs to check")
        elif self.problems:
            self.report(
                True,
                f"{len(self.problems)} of {len(self.stats)} inputs far from normalised",
            )
        else:
            self.report(True, f"{len(self.stats)} floating-point input(s) look normalised")

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._judge()
