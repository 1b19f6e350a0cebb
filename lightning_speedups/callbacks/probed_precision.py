"""T05 on a CPU with bf16 units: bf16-mixed against fp32 timed on the model by the start-up probe."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, no_op, probe_pending
from lightning_speedups.functional.probe import Axis, Option
from lightning_speedups.trainer.namespace import package_of


class ProbedPrecision(SpeedupCallback):
    """``precision: auto`` on a CPU that has bf16 units (AMX, AMD avx512_bf16): measured, not assumed.

    Such a CPU *can* run bf16 faster, but whether a given model gains depends on how much of its step is
    matrix products (a small MLP or a model dominated by element-wise work pays the casts and gains
    nothing). The Trainer starts in ``32-true``; at the first batch the start-up probe
    (:class:`~lightning_speedups.callbacks.AutoProbe`) times the model's steps under bf16 autocast
    against fp32, and only when bf16 is faster beyond the noise is the strategy's precision plugin
    switched to Lightning's ``MixedPrecision("bf16-mixed", "cpu")`` for the run (no loss scaler is
    involved, so the switch carries no state). Without an ``AutoProbe`` the run stays in fp32.

    Example::

        trainer = Trainer(precision="32-true", callbacks=[ProbedPrecision(), AutoProbe()])
    """

    tip = "T05"
    part = "precision"

    def __init__(self) -> None:
        super().__init__()
        self._awaiting = False
        self._trainer: Any = None
        self._plain: Any = None

    @property
    def uses_probe(self) -> bool:
        return True

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        plugin = trainer.precision_plugin
        if trainer.strategy.root_device.type != "cpu" or trainer.precision not in ("32-true", "32"):
            self.report(False, f"skipped, {trainer.precision} on {trainer.strategy.root_device.type} is not probed")
            return
        self._awaiting = stage == "fit" and type(plugin).__name__ == "Precision"
        self._trainer = trainer
        self.report(False, "auto: 32-true until the start-up probe times bf16-mixed at the first batch")

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._awaiting and not probe_pending(trainer):
            self._awaiting = False
            self.report(False, "32-true: auto without the start-up probe (AutoProbe callback)")

    @override
    def probe_axes(self, trainer: Any, pl_module: Any) -> list[Axis]:
        if not self._awaiting:
            return []
        self._awaiting = False

        def autocast() -> Any:
            return torch.autocast("cpu", dtype=torch.bfloat16)

        option = Option("bf16-mixed", _nothing, _nothing, context=autocast)
        return [Axis("precision", "32-true", [option], self._decide)]

    def _decide(self, option: Any, reason: str) -> None:
        if option is None:
            self.report(False, f"32-true, {reason}")
            return
        # the Trainer's own package's plugin: lightning.pytorch's skips clipping for a pytorch_lightning module
        plugins = importlib.import_module(f"{package_of(self._trainer).__name__}.plugins.precision")
        self._plain = self._trainer.strategy.precision_plugin
        self._trainer.strategy.precision_plugin = plugins.MixedPrecision(precision="bf16-mixed", device="cpu")
        self.report(True, reason)

    @property
    def changes_step(self) -> bool:
        return self.active and self._plain is not None

    @override
    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        if self._plain is None or trainer.strategy.precision_plugin is self._plain:
            return no_op
        chosen = trainer.strategy.precision_plugin
        trainer.strategy.precision_plugin = self._plain

        def resume() -> None:
            trainer.strategy.precision_plugin = chosen

        return resume

    @property
    def aside_advice(self) -> str:
        return ": 32-true (keep speedups.precision: auto, or set 32-true)"

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._awaiting, self._trainer, self._plain = False, None, None


def _nothing() -> None:
    return None
