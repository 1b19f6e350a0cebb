"""T18: uint8 images cross the bus; conversion and normalisation happen on the device."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.data.normalize import DeviceNormalizer
from lightning_speedups.trainer.hooks import HookPatches, batch_hook_owner


class DeviceNormalize(SpeedupCallback):
    """Let the dataset hand over uint8 images; convert and normalise them on the device (tip T18).

    Card: tip T18 ``input-norm``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** Wraps ``on_after_batch_transfer`` (of the DataModule when it overrides it,
      else of the LightningModule) so that, after the batch reached the device, its uint8 images
      become ``(x / 255 - mean) / std`` in ``dtype``, in every stage (fit, validate, test,
      predict). Labels and other tensors pass unchanged.
    * **Caveats.** Never on the maths: results equal normalising on the CPU (tested). The
      dataset must then return uint8, not already normalised floats.

    Args:
        mean: per-channel means in 0..1 (e.g. ``(0.485, 0.456, 0.406)``).
        std: per-channel standard deviations in 0..1, all > 0.
        scale: multiplies raw values first (``1/255``).
        channel_dim: channel dimension of the images (1 for NCHW).
        dtype: floating dtype handed to the model; ``None`` (default) follows the trainer's precision:
            float32, or the model's dtype under ``16-true`` / ``bf16-true`` / ``64-true`` (Lightning
            casts floating batches to that dtype *before* the transfer, so a uint8 batch would
            otherwise reach a bf16 model as float32).
        keys: dict keys or positions to convert; ``None`` converts every uint8 tensor with at least
            ``min_dims`` dimensions.
        min_dims: see ``keys``.

    Examples:
        >>> norm = DeviceNormalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    """

    tip = "T18"
    part = "device_normalize"
    #: batches stay integer until the device: pinning them pays even where Lightning casts floats on the host
    expects_integer_batches = True

    def __init__(
        self,
        mean: float | Sequence[float],
        std: float | Sequence[float],
        *,
        scale: float = 1.0 / 255.0,
        channel_dim: int = 1,
        dtype: torch.dtype | None = None,
        keys: Sequence[str | int] | None = None,
        min_dims: int = 3,
    ) -> None:
        super().__init__()
        self.dtype = dtype
        self.normalizer = DeviceNormalizer(
            mean,
            std,
            scale=scale,
            channel_dim=channel_dim,
            dtype=torch.float32 if dtype is None else dtype,
            keys=keys,
            min_dims=min_dims,
        )
        self._patches = HookPatches()
        self.batches_converted = 0

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.dtype is None:
            # the dtype the precision plugin gives floating inputs (public: convert_input on a probe tensor)
            probe = trainer.precision_plugin.convert_input(torch.zeros(1))
            self.normalizer.dtype = probe.dtype if probe.is_floating_point() else torch.float32
        owner = batch_hook_owner(trainer, pl_module, "on_after_batch_transfer")
        if self._patches.is_patched(owner, "on_after_batch_transfer"):
            return

        def make(orig: Callable) -> Callable:
            def hook(batch: Any, *args: Any, **kwargs: Any) -> Any:
                out = self.normalizer(orig(batch, *args, **kwargs))
                if self.normalizer.converted:
                    self.batches_converted += 1
                    if not self.active:
                        self.report(
                            True,
                            f"normalising {', '.join(self.normalizer.converted)} on the device"
                            f" ({str(self.normalizer.dtype).removeprefix('torch.')})",
                        )
                return out

            return hook

        self._patches.wrap(owner, "on_after_batch_transfer", make)
        self.report(False, "waiting for the first uint8 batch")

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if batch_idx == 0 and self.batches_converted == 0:
            rank_zero_warn(
                "DeviceNormalize found no uint8 image tensor in the first training batch: nothing was normalised."
                " Return uint8 images from the dataset, or name them with `keys=`.",
                category=PossibleUserWarning,
            )

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._patches.undo()
