"""The start-up summary: which speed-ups are active and which were skipped, and why."""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback


class SpeedupsSummary(SpeedupCallback):
    """Prints which speed-ups are active and which were skipped, and why, once per run (rank zero).

    Args:
        notes: extra lines decided before the Trainer existed (e.g. ``precision: bf16-mixed, ...``).
    """

    part = "summary"

    def __init__(self, notes: Sequence[tuple[str, bool, str]] = ()) -> None:
        super().__init__()
        self.notes = list(notes)
        self.lines: list[str] = []

    def summarize(self, trainer: pl.Trainer) -> list[str]:
        rows = [(name, active, reason) for name, active, reason in self.notes]
        for cb in trainer.callbacks:  # type: ignore[attr-defined]  # set on the Trainer by Lightning's CallbackConnector at init, not declared on the class
            if isinstance(cb, SpeedupCallback) and cb is not self and cb.status is not None:
                state, reason = cb.status
                tip = f" ({cb.tip})" if cb.tip else ""
                rows.append((f"{cb.part}{tip}", state == "active", reason))
        width = max((len(name) for name, _, _ in rows), default=0)
        return [f"  {'on ' if active else 'off'}  {name:<{width}}  {reason}" for name, active, reason in rows]

    def _print(self, trainer: pl.Trainer) -> None:
        if self.lines:
            return
        self.lines = self.summarize(trainer)
        if self.lines:
            rank_zero_info("lightning_speedups:\n" + "\n".join(self.lines))

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print(trainer)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.training and trainer.state.fn != "fit":
            self._print(trainer)

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print(trainer)

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print(trainer)
