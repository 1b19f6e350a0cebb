"""T14: turn the useful debugging tools on deliberately, and off again afterwards (the ``debug`` preset)."""

from __future__ import annotations

import os
from typing import Any, Literal, Optional, Union

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.callbacks.sync_guard import SYNC_MODES, SyncGuard
from lightning_speedups.errors import SettingError, SettingTypeError

#: the environment variable cuBLAS reads for its workspace, and the values torch accepts as deterministic
CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")


class DebugMode(SpeedupCallback):
    """Turn the useful debugging tools on deliberately, and off again afterwards (the ``debug`` preset).

    Anomaly detection is switched on when training starts (inside Lightning's own
    ``detect_anomaly`` context, which would otherwise switch it back off), deterministic algorithms
    in ``setup``, and a :class:`SyncGuard` watches the training step. Everything is restored in
    ``teardown`` (and in ``on_exception``: Lightning skips ``teardown`` when a run fails).
    :class:`DebugToolsCheck` does not warn about the tools this callback turned on.

    Card: tip T14 ``debug-off``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        anomaly: turn on autograd anomaly detection during training.
        check_nan: with ``anomaly``, also raise on NaN in backward outputs.
        sync_guard: mode of the inner :class:`SyncGuard` (``"count"``, ``"warn"``, ``"error"``), or
            ``None`` for no sync guard. When the trainer has a :class:`SyncGuard` of its own, that one
            does the job and the inner one stays off (no double reports).
        deterministic: ``True`` or ``"warn"`` turns on ``torch.use_deterministic_algorithms`` and
            ``cudnn.deterministic`` for the run (``"warn"``: warn instead of failing on ops without
            a deterministic implementation). It also sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when it
            is unset (as ``Trainer(deterministic=True)`` does): without it the first cuBLAS matrix
            product on CUDA raises. Restored after the run.

    Examples:
        >>> from lightning.pytorch import Trainer
        >>> from lightning_speedups.callbacks import DebugToolsCheck
        >>> trainer = Trainer(callbacks=[DebugMode(anomaly=True, sync_guard="warn"), DebugToolsCheck()])
    """

    tip = "T14"
    part = "debug_mode"

    def __init__(
        self,
        anomaly: bool = True,
        check_nan: bool = True,
        sync_guard: Optional[Literal["count", "warn", "error"]] = "warn",
        deterministic: Union[bool, Literal["warn"]] = False,
    ) -> None:
        super().__init__()
        for name, value in (("anomaly", anomaly), ("check_nan", check_nan)):
            if not isinstance(value, bool):
                raise SettingTypeError(f"`DebugMode({name}=...)` must be a bool, got {value!r}.")
        if sync_guard is not None and sync_guard not in SYNC_MODES:
            raise SettingError(f"`DebugMode(sync_guard=...)` must be None or one of {SYNC_MODES}, got {sync_guard!r}.")
        if not (isinstance(deterministic, bool) or deterministic == "warn"):
            raise SettingError(f"`DebugMode(deterministic=...)` must be True, False or 'warn', got {deterministic!r}.")
        self.anomaly = anomaly
        self.check_nan = check_nan
        self.deterministic = deterministic
        self.sync_guard: Optional[SyncGuard] = SyncGuard(sync_guard) if sync_guard is not None else None
        self._guard_on = False
        self._saved: Optional[dict[str, Any]] = None

    @property
    def deliberate_tools(self) -> frozenset[str]:
        """Ids of :func:`~lightning_speedups.functional.debug_tools.find_debug_tools` this callback turns on."""
        ids = set()
        if self.anomaly:
            ids.add("anomaly_detection")
        if self.sync_guard is not None:
            ids.add("sync_debug_mode")
        if self.deterministic:
            ids.update(("deterministic_algorithms", "cudnn_deterministic"))
        return frozenset(ids)

    def _save(self) -> None:
        if self._saved is not None:
            return
        self._saved = {
            "anomaly": torch.is_anomaly_enabled(),
            "check_nan": torch.is_anomaly_check_nan_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cublas_workspace": os.environ.get(CUBLAS_ENV),
        }

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._save()
        if self.deterministic:
            if os.environ.get(CUBLAS_ENV) not in CUBLAS_DETERMINISTIC:
                # read by torch at each cuBLAS call under deterministic mode: unset, the first matmul raises
                os.environ[CUBLAS_ENV] = CUBLAS_DETERMINISTIC[0]
            torch.use_deterministic_algorithms(True, warn_only=self.deterministic == "warn")
            torch.backends.cudnn.deterministic = True
        # a SyncGuard of the trainer's own (e.g. the preset's `monitors.sync_guard`) takes precedence
        other_guard = any(isinstance(cb, SyncGuard) for cb in getattr(trainer, "callbacks", []))
        self._guard_on = self.sync_guard is not None and not other_guard
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.setup(trainer, pl_module, stage)
        on = sorted(self.deliberate_tools)
        self.report(True, "debugging tools on: " + (", ".join(on) if on else "none"))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.anomaly:
            # Lightning wraps fit_loop.run in set_detect_anomaly(trainer.detect_anomaly): set it inside
            torch.autograd.set_detect_anomaly(True, check_nan=self.check_nan)

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.on_train_batch_start(trainer, pl_module, batch, batch_idx)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.on_train_end(trainer, pl_module)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning does not call `teardown` after an exception: restore everything here too
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.on_exception(trainer, pl_module, exception)
        self._restore()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._guard_on:
            assert self.sync_guard is not None  # _guard_on is set only when there is a guard
            self.sync_guard.teardown(trainer, pl_module, stage)
        self._guard_on = False
        self._restore()

    def _restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        torch.autograd.set_detect_anomaly(saved["anomaly"], check_nan=saved["check_nan"])
        torch.use_deterministic_algorithms(saved["deterministic"], warn_only=saved["warn_only"])
        torch.backends.cudnn.deterministic = saved["cudnn_deterministic"]
        if saved["cublas_workspace"] is None:
            os.environ.pop(CUBLAS_ENV, None)
        else:
            os.environ[CUBLAS_ENV] = saved["cublas_workspace"]
