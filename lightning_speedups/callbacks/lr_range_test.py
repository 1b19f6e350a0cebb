"""T01's learning-rate range test: a sweep through the trainer's own fit loop, taken as trial steps and undone
(weights, buffers, optimizer, generators, loaders), whose lr / loss lists
:func:`~lightning_speedups.functional.lr_range.pick_peak_lr` reads. The schedule's callback
(:class:`~lightning_speedups.callbacks.lr_schedule.LRSchedule`) runs it for ``max_lr="auto"``."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_speedups.functional.divergence import DIVERGENCE_BETA, DIVERGENCE_THRESHOLD
from lightning_speedups.trainer.trial_steps import fit_loop_trials

#: the learning rates a range test (``max_lr="auto"``) sweeps, exponentially
RANGE_MIN_LR, RANGE_MAX_LR = 1e-6, 1.0


class _RangeSweep(Callback):
    """The range test's only callback: the lr before each optimizer step, the loss after it; stops when
    the loss (smoothed as Lightning's finder smooths it) passes ``early_stop`` times the best."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        early_stop: float = DIVERGENCE_THRESHOLD,
        beta: float = DIVERGENCE_BETA,
    ) -> None:
        self.optimizer = optimizer
        self.early_stop, self.beta = early_stop, beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self._avg, self._best = 0.0, math.inf

    def _stepping(self, trainer: pl.Trainer) -> bool:
        return (trainer.fit_loop.batch_idx + 1) % trainer.accumulate_grad_batches == 0

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._stepping(trainer):
            self.lrs.append(float(self.optimizer.param_groups[0]["lr"]))

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._stepping(trainer):
            return
        loss = outputs if isinstance(outputs, torch.Tensor) else (outputs or {}).get("loss")
        if loss is None:
            self.losses.append(float("nan"))
            return
        value = float(loss.detach())
        self.losses.append(value)
        n = len(self.losses)
        self._avg = self.beta * self._avg + (1 - self.beta) * value
        smoothed = self._avg / (1 - self.beta**n)
        if n > 1 and smoothed > self.early_stop * self._best or not math.isfinite(value):
            trainer.should_stop = True
        trainer.should_stop = trainer.strategy.broadcast(trainer.should_stop)
        self._best = min(self._best, smoothed)


def run_range_test(
    trainer: pl.Trainer, pl_module: pl.LightningModule, steps: int, min_lr: float, max_lr: float
) -> tuple[list[float], list[float]]:
    """Train ``steps`` optimizer steps with the lr growing exponentially from ``min_lr`` to ``max_lr``,
    through the trainer's own fit loop (precision, strategy, accumulation and the model's hooks as in
    training), then put back everything those steps touched; returns ``(lrs, raw losses)`` (rank zero's,
    broadcast).

    The state is kept in host memory and put back by
    :func:`~lightning_speedups.trainer.trial_steps.fit_loop_trials` (weights, buffers, module modes, plain
    attributes of the model and datamodule, optimizer state, random generators, the loops' progress, the
    precision plugin's state, the Trainer's settings and the data loaders, built afresh so that the first epoch
    starts at its first batch in the order a run without the test draws). Lightning's own finder restores from
    a checkpoint with ``torch.load(weights_only=True)``, which refuses hyper-parameters holding config objects,
    ``functools.partial`` or user classes; nothing here is pickled.
    """

    optimizer = trainer.optimizers[0]
    sweep = _RangeSweep(optimizer)
    with fit_loop_trials(trainer, pl_module, max_steps=steps + trainer.global_step, callbacks=[sweep]):
        for group in optimizer.param_groups:
            group["lr"] = min_lr
        ratio = max_lr / min_lr
        sweep_sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: ratio ** min(i / steps, 1.0))
        trainer.strategy.lr_scheduler_configs = [LRSchedulerConfig(sweep_sched, interval="step")]
        trainer.fit_loop.run()
        lrs, losses = trainer.strategy.broadcast((sweep.lrs, sweep.losses))
    return list(lrs), list(losses)


#: The fewest optimizer steps a range test can take: one range for the callback and the
#: ``speedups.lr_schedule.range_test_steps`` record (tips/t01_lr_schedule.py reads it).
RANGE_TEST_MIN_STEPS = 10
