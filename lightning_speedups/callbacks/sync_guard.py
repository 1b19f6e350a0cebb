"""T08: count, report or forbid device synchronisations inside the training step."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, on_cuda
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.syncs import SyncSite, SyncWatcher

SYNC_MODES = ("count", "warn", "error")


class SyncGuard(SpeedupCallback):
    """Count, report or forbid device synchronisations inside the training step (tip T08 ``no-sync``).

    On CUDA, turns on ``torch.cuda.set_sync_debug_mode("warn")`` from ``on_train_batch_start`` to
    ``on_train_batch_end`` (the forward, backward and optimizer step), catches the warning torch
    emits for each synchronising call (``.item()``, ``.cpu()``, ``print(tensor)``, boolean-mask
    indexing, ``torch.nonzero`` ...) and attributes it from the Python stack: the user's code
    (file:line), the model's backward ops, Lightning itself (progress-bar values, logging, the AMP
    grad scaler, multi-device reduce) or another library. Lightning's own syncs are named as such
    and never blamed on the user. The previous sync-debug mode is back after every step window and
    at teardown. On CPU it reports "skipped, nothing to check on CPU" once and does nothing.

    Card: tip T08 ``no-sync``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        mode: ``"warn"`` (default) warns once per new location in the user's code and prints a
            summary at the end; ``"count"`` only counts (see :attr:`user_syncs`, :attr:`sites`) and
            prints the summary; ``"error"`` raises
            :class:`~lightning_speedups.functional.syncs.SyncError` at the first sync in the
            user's code (Lightning's own syncs are still only counted).

    Examples:
        >>> guard = SyncGuard(mode="count")
        >>> # trainer = Trainer(accelerator="gpu", callbacks=[guard]); trainer.fit(model)
        >>> guard.user_syncs, guard.lightning_syncs
        (0, 0)
    """

    tip = "T08"
    part = "sync_guard"

    def __init__(self, mode: Literal["count", "warn", "error"] = "warn") -> None:
        super().__init__()
        if mode not in SYNC_MODES:
            raise SettingError(f"`SyncGuard(mode=...)` must be one of {SYNC_MODES}, got {mode!r}.")
        self.mode = mode
        self._watcher = SyncWatcher(mode)
        self._enabled = False

    # -- results ------------------------------------------------------------------------------------
    @property
    def watcher(self) -> SyncWatcher:
        return self._watcher

    @property
    def user_syncs(self) -> int:
        """Syncs in the user's code (including the model's backward ops)."""
        return self._watcher.user_syncs

    @property
    def lightning_syncs(self) -> int:
        """Syncs Lightning makes itself (progress bar, logging, AMP scaler, multi-device reduce)."""
        return self._watcher.lightning_syncs

    @property
    def library_syncs(self) -> int:
        """Syncs inside other installed libraries (e.g. torchmetrics), located at the user's call."""
        return self._watcher.library_syncs

    @property
    def debug_syncs(self) -> int:
        """Syncs made by debugging tools (anomaly detection's NaN check in backward, under DebugMode)."""
        return self._watcher.debug_syncs

    @property
    def sites(self) -> Counter[SyncSite]:
        """Count per location (:class:`~lightning_speedups.functional.syncs.SyncSite`)."""
        return self._watcher.sites

    @property
    def steps(self) -> int:
        """Training steps watched."""
        return self._watcher.windows

    def summary(self) -> str:
        return self._watcher.summary()

    def findings(self) -> list[dict[str, Any]]:
        return self._watcher.findings()

    # -- hooks --------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not on_cuda(trainer):
            self._enabled = False
            self.report(False, "skipped, nothing to check on CPU", echo=True)
            return
        self._watcher = SyncWatcher(self.mode)  # fresh counts per fit
        self._watcher.install()
        self._enabled = True
        self.report(True, f"counting device syncs in the training step (mode={self.mode!r})")

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._enabled:
            self._watcher.start()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._enabled:
            return
        self._watcher.stop()
        new_sites, self._watcher.new_user_sites = self._watcher.new_user_sites, []
        for site in new_sites:
            rank_zero_warn(
                f"SyncGuard: device synchronisation inside the training step at {site.describe()}"
                f" (step {batch_idx}). It stalls the CPU until the GPU catches up. Keep the value on the"
                " device (self.log accepts tensors), or compute it every N steps.",
                category=PossibleUserWarning,
            )

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._enabled:
            return
        self._watcher.stop()
        self.tell(self._watcher.summary())
        self.report(True, f"{self._watcher.total} device syncs in {self.steps} steps, {self.user_syncs} in your code")

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning does not call `teardown` after an exception: restore everything here too
        self._release()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._release()

    def _release(self) -> None:
        self._watcher.uninstall()
        self._enabled = False
