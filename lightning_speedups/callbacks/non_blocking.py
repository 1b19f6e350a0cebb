"""T21: say when batches reach a CUDA device from unpinned memory, so non_blocking copies cannot overlap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.data.loaders import machine_from_trainer
from lightning_speedups.functional.loaders import unpinned_tensors
from lightning_speedups.trainer.hooks import HookPatches, batch_hook_owner


class NonBlockingCheck(SpeedupCallback):
    """Say when batch copies to CUDA cannot overlap compute because they come from unpinned memory (T21).

    Card: tip T21 ``non-blocking``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** Lightning moves batches with ``non_blocking=True``; a host-to-CUDA copy is
      asynchronous only from pinned memory. This looks at the first batch of each stage before its
      transfer (``on_before_batch_transfer``) and warns, naming the tensors, when they are not
      pinned. :class:`LoaderTuning` pins when batches go to CUDA, which avoids it.
    * **Caveats.** Never; it only reads ``is_pinned()`` on one batch per stage.

    Examples:
        >>> check = NonBlockingCheck()
        >>> check.unpinned
        {}
    """

    tip = "T21"
    part = "non_blocking"

    def __init__(self) -> None:
        super().__init__()
        self.unpinned: dict[str, list[str]] = {}
        self._patches = HookPatches()
        self._checked: set[tuple[str, int]] = set()

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        device = machine_from_trainer(trainer).get("accelerator", "cpu")
        if device != "cuda":
            self.report(False, f"batches stay on {device}: no host-to-device copies to overlap")
            return
        owner = batch_hook_owner(trainer, pl_module, "on_before_batch_transfer")
        if self._patches.is_patched(owner, "on_before_batch_transfer"):
            return

        def make(orig: Callable) -> Callable:
            def hook(batch: Any, *args: Any, **kwargs: Any) -> Any:
                batch = orig(batch, *args, **kwargs)
                idx = args[0] if args else kwargs.get("dataloader_idx", 0)
                key = (str(trainer.state.stage), int(idx))
                if key not in self._checked:
                    self._checked.add(key)
                    self.check(batch, "cuda", f"{key[0]} loader {idx}")
                return batch

            return hook

        self._patches.wrap(owner, "on_before_batch_transfer", make)
        self.report(True, "checking that batches come from pinned memory")

    def check(self, batch: Any, device: str | torch.device, where: str = "batch") -> list[str]:
        """Warn and return the names of ``batch``'s tensors whose copy to ``device`` cannot overlap."""
        names = unpinned_tensors(batch, device)
        if names:
            self.unpinned[where] = names
            self.report(True, f"{where}: {len(names)} unpinned tensor(s), copies cannot overlap")
            rank_zero_warn(
                f"NonBlockingCheck: {where} hands over {', '.join(names[:4])} from unpinned memory: the"
                f" non_blocking copies to {device} cannot overlap compute. Set pin_memory=True on the DataLoader"
                " (LoaderTuning(pin_memory='auto') does it for CUDA).",
                category=PossibleUserWarning,
            )
        return names

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._patches.undo()
        self._checked.clear()
