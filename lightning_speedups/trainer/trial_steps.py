"""One way to take trial steps and leave the run as it found them (Lightning's finder shape: dump, run,
restore): the weights, buffers, module modes, plain training attributes and optimizer state kept on the
host (:class:`~lightning_speedups.functional.snapshot.TrainingSnapshot`), the random generators isolated
by Lightning's own ``isolate_rng``. The LR range test (:func:`~lightning_speedups.callbacks.lr_range_test.run_range_test`)
and the start-up probe (:class:`~lightning_speedups.callbacks.auto_probe.AutoProbe`) take their steps inside it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers.logger import DummyLogger
from lightning.pytorch.utilities.seed import isolate_rng

from lightning_speedups.functional.snapshot import TrainingSnapshot
from lightning_speedups.trainer.attributes import set_at_init

__all__ = ["TrainerSettings", "trial_steps"]


def _rank_zero_log() -> logging.Logger:
    """The logger Lightning's start-up and stop lines go through now (the two packages share it)."""
    import lightning_utilities.core.rank_zero as shared

    return shared.log


@dataclass
class TrainerSettings:
    """The trainer settings trial steps change, dumped, reset for the trials and restored (the shape of
    Lightning's own finders): callbacks, loggers, the step and batch limits, accumulation, ``should_stop``
    and the rank-zero log level (no "``Trainer.fit`` stopped" line per trial).

    Examples:
        >>> trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
        ...                      enable_model_summary=False, max_steps=1000)
        >>> settings = TrainerSettings.dump(trainer)
        >>> settings.reset(trainer, max_steps=5)
        >>> trainer.fit_loop.epoch_loop.max_steps, trainer.callbacks, trainer.limit_val_batches
        (5, [], 0)
        >>> settings.restore(trainer)
        >>> trainer.fit_loop.epoch_loop.max_steps, trainer.limit_val_batches
        (1000, 1.0)
    """

    callbacks: list[Any]
    loggers: list[Any]
    max_steps: int
    limit_train_batches: Any
    limit_val_batches: Any
    accumulate_grad_batches: int
    should_stop: bool
    log_level: int

    @classmethod
    def dump(cls, trainer: pl.Trainer) -> TrainerSettings:
        return cls(
            callbacks=set_at_init(trainer).callbacks,
            loggers=trainer.loggers,
            max_steps=trainer.fit_loop.epoch_loop.max_steps,
            limit_train_batches=trainer.limit_train_batches,
            limit_val_batches=trainer.limit_val_batches,
            accumulate_grad_batches=trainer.accumulate_grad_batches,
            should_stop=trainer.should_stop,
            log_level=_rank_zero_log().level,
        )

    def reset(self, trainer: pl.Trainer, max_steps: int, callbacks: Sequence[Any] = ()) -> None:
        """Only ``callbacks`` run, loggers log nothing, no validation, at most ``max_steps`` steps, quietly."""
        _rank_zero_log().setLevel(max(logging.WARNING, _rank_zero_log().level))
        trainer.loggers = [DummyLogger()] if trainer.loggers else []
        set_at_init(trainer).callbacks = list(callbacks)
        trainer.limit_val_batches = 0  # validation would be thrown away
        trainer.fit_loop.epoch_loop.max_steps = max_steps

    def restore(self, trainer: pl.Trainer) -> None:
        set_at_init(trainer).callbacks = self.callbacks
        trainer.loggers = self.loggers
        trainer.fit_loop.epoch_loop.max_steps = self.max_steps
        trainer.limit_train_batches = self.limit_train_batches
        trainer.limit_val_batches = self.limit_val_batches
        trainer.accumulate_grad_batches = self.accumulate_grad_batches
        trainer.should_stop = self.should_stop
        _rank_zero_log().setLevel(self.log_level)


@contextmanager
def trial_steps(
    module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer] = (), extra: Sequence[Any] = ()
) -> Iterator[TrainingSnapshot]:
    """Inside, train as you like; on the way out ``module``, ``optimizers``, the plain attributes of ``extra``
    (a DataModule) and every random generator (torch, CUDA, Python, numpy) are back as they were.

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        >>> before = net.weight.clone()
        >>> _ = torch.manual_seed(0); draw = torch.rand(1); _ = torch.manual_seed(0)
        >>> with trial_steps(net, [opt]) as snapshot:  # the steps draw random numbers and change everything
        ...     net(torch.randn(4, 2)).sum().backward(); opt.step()
        >>> torch.equal(net.weight, before), opt.state_dict()["state"], torch.equal(torch.rand(1), draw)
        (True, {}, True)
        >>> snapshot.device_tensors()
        []
    """
    with isolate_rng(include_cuda=True):
        snapshot = TrainingSnapshot.capture(module, optimizers, extra)
        try:
            yield snapshot
        finally:
            snapshot.restore()
