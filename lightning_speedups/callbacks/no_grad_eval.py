"""T17: warn when validation, test or prediction steps build autograd graphs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.eval_grads import (
    EvalGradWatch,
    tensors_requiring_grad,
)

_STAGES = ("validate", "test", "predict")
_STAGE_WORD = {"validate": "validation", "test": "test", "predict": "prediction"}


class NoGradEvalCheck(SpeedupCallback):
    """Warn when validation, test or prediction steps build autograd graphs (tip T17 ``no-grad-eval``).

    Lightning runs evaluation under ``torch.inference_mode`` (or ``no_grad``), but user code can
    turn gradients back on (``torch.enable_grad()``, ``torch.set_grad_enabled(True)``, a custom
    loop). For the first ``check_batches`` batches of each evaluation run the check looks at:
    grad mode at batch start, forward hooks on the model's sub-modules (a forward with grad mode on
    whose output requires grad is building a graph), and the step's outputs. Grad mode on with
    nothing requiring grad (a frozen model) costs nothing and is not reported. Warns once per stage
    with the evidence; then removes its hooks, so later batches run untouched.

    Card: tip T17 ``no-grad-eval``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        check_batches: how many batches of each evaluation run to inspect.
        stages: which of ``"validate"``, ``"test"``, ``"predict"`` to check.

    Examples:
        >>> check = NoGradEvalCheck(check_batches=2)
        >>> # after trainer.validate(model): check.findings lists what was found
    """

    tip = "T17"
    part = "no_grad_eval_check"

    def __init__(self, check_batches: int = 2, stages: Iterable[str] = _STAGES) -> None:
        super().__init__()
        if not isinstance(check_batches, int) or isinstance(check_batches, bool) or check_batches < 1:
            raise SettingError(f"`NoGradEvalCheck(check_batches=...)` must be an int >= 1, got {check_batches!r}.")
        if isinstance(stages, str):
            stages = (stages,)
        stages = tuple(stages)
        bad = [s for s in stages if s not in _STAGES]
        if bad:
            raise SettingError(f"`NoGradEvalCheck(stages=...)` has unknown stages {bad}; choose from {_STAGES}.")
        self.check_batches = check_batches
        self.stages = frozenset(stages)
        self.findings: list[dict[str, Any]] = []
        self._warned: set[str] = set()
        self._watch: Optional[EvalGradWatch] = None
        self._seen_batches = 0
        self._grad_at_start = False

    # -- core ---------------------------------------------------------------------------------------
    def _start(self, stage: str, pl_module: LightningModule) -> None:
        self._stop()
        if stage not in self.stages or stage in self._warned:
            return
        self._watch = EvalGradWatch(pl_module).attach()
        self._seen_batches = 0
        if not self.findings:
            self.report(True, f"checking the first {self.check_batches} batches of each evaluation for autograd")

    def _batch_start(self) -> None:
        if self._watch is not None:
            self._grad_at_start = torch.is_grad_enabled()

    def _batch_end(self, stage: str, trainer: Trainer, outputs: Any, batch_idx: int) -> None:
        watch = self._watch
        if watch is None:
            return
        self._seen_batches += 1
        grad_outputs = tensors_requiring_grad(outputs)
        if watch.events or grad_outputs:
            word = _STAGE_WORD[stage] + (" (sanity check)" if getattr(trainer, "sanity_checking", False) else "")
            evidence = [e.describe() for e in watch.events[:3]]
            if grad_outputs:
                evidence.append(", ".join(p for p, _ in grad_outputs[:3]) + " returned by the step require grad")
            if self._grad_at_start:
                evidence.append("torch.is_grad_enabled() was already True when the batch started")
            finding = {
                "tip": "T17",
                "slug": "no-grad-eval",
                "severity": "medium",
                "stage": stage,
                "evidence": f"{word} batch {batch_idx} ran with gradients: " + "; ".join(evidence),
                "fix": "remove torch.enable_grad() / set_grad_enabled(True) / requires_grad_() from the"
                f" {_STAGE_WORD[stage]} step and keep Trainer(inference_mode=True); if the gradients are"
                f" needed there, drop {stage!r} from NoGradEvalCheck(stages=...)",
            }
            self.findings.append(finding)
            self._warned.add(stage)
            rank_zero_warn(
                f"NoGradEvalCheck (tip T17): {finding['evidence']}. Fix: {finding['fix']}.",
                category=PossibleUserWarning,
            )
            self.report(True, f"{_STAGE_WORD[stage]} steps build autograd graphs")
            self._stop()
        elif self._seen_batches >= self.check_batches:
            self._stop()

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.detach()
            self._watch = None

    # -- hooks --------------------------------------------------------------------------------------
    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("validate", pl_module)

    @override
    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("test", pl_module)

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("predict", pl_module)

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_test_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("validate", trainer, outputs, batch_idx)

    @override
    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("test", trainer, outputs, batch_idx)

    @override
    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("predict", trainer, outputs, batch_idx)

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._stop()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.status is None:
            self.report(False, "skipped, no evaluation ran (no validation, test or predict loop to watch)")
        self._stop()
