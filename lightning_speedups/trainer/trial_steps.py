"""One way to take trial steps and leave the run as it found them (Lightning's finder shape: dump, run,
restore), in three nested contexts:

- :func:`trial_steps`: the weights, buffers, module modes, plain training attributes and optimizer state kept on
  the host (:class:`~lightning_speedups.functional.snapshot.TrainingSnapshot`), the random generators isolated by
  Lightning's own ``isolate_rng``;
- :func:`step_trial`: steps taken outside the fit loop on a Trainer's model (the Safeguard's trial, the start-up
  probe): that, plus the schedulers' and the precision plugin's state, the batch's tensors, ``self.log`` dropped;
- :func:`fit_loop_trials`: steps taken through the Trainer's own fit loop (the LR range test, the batch-size
  search): that, plus the loops' progress and restart flags, the Trainer settings (:class:`TrainerSettings`), the
  strategy's optimizers and scheduler configs, the loaders (built afresh) and the logged results.

Each caller keeps only what is its own (the sweep's scheduler, the trial batch size, the probe's options).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers.logger import DummyLogger
from lightning.pytorch.loops.loop import _Loop  # private: the loops' base class, to find every nested loop
from lightning.pytorch.utilities.seed import isolate_rng

from lightning_speedups.functional.snapshot import TrainingSnapshot, to_host
from lightning_speedups.functional.tree import tensors_in
from lightning_speedups.trainer.attributes import set_at_init

__all__ = [
    "FitLoopState",
    "FitLoopTrials",
    "TrainerSettings",
    "drop_loaders",
    "fit_loop_trials",
    "step_trial",
    "trial_steps",
]


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


def root_module(trainer: pl.Trainer, pl_module: pl.LightningModule) -> torch.nn.Module:
    """The module the strategy trains (a DDP / FSDP wrapper holds the LightningModule), or the LightningModule."""
    model = trainer.strategy.model
    return model if isinstance(model, torch.nn.Module) else pl_module


def drop_loaders(trainer: pl.Trainer) -> None:
    """Drop the fit loop's built loaders, so that they are built again on first use."""
    # private: what Lightning's own ``_reset_dataloaders`` (and its LR finder) does; there is no public way to drop them
    trainer.fit_loop._combined_loader = None
    trainer.fit_loop.epoch_loop.val_loop._combined_loader = None


def _drop(*args: Any, **kwargs: Any) -> None:
    return None


@contextmanager
def step_trial(
    trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any = None, weights: bool = True
) -> Iterator[TrainingSnapshot]:
    """Steps on the Trainer's model outside the fit loop, nothing kept: :func:`trial_steps`' state (the weights and
    the optimizers only with ``weights=True``: a trial that takes no optimizer step leaves them as they are and
    needs no host copy of the model), the schedulers' and the precision plugin's state, the tensors of ``batch`` (a
    ``training_step`` that changes its batch in place must leave it as the loader gave it; read, never rebuilt), and
    the steps' ``self.log`` calls dropped (they are not training)."""
    inputs = tensors_in(batch) if batch is not None else []
    saved_inputs = [t.detach().clone() for t in inputs]
    schedulers = [
        (config.scheduler, to_host(config.scheduler.state_dict()))
        for config in getattr(trainer, "lr_scheduler_configs", ())
        if hasattr(config.scheduler, "state_dict")
    ]
    plugin = trainer.strategy.precision_plugin
    precision_state = to_host(plugin.state_dict())
    optimizers = trainer.optimizers if weights else ()
    with isolate_rng(include_cuda=True):
        snapshot = TrainingSnapshot.capture(root_module(trainer, pl_module), optimizers, weights=weights)
        patched = {name: vars(pl_module).get(name) for name in ("log", "log_dict")}
        for name in patched:
            object.__setattr__(pl_module, name, _drop)
        try:
            yield snapshot
        finally:
            for name, value in patched.items():
                if value is None:
                    vars(pl_module).pop(name, None)
                else:
                    object.__setattr__(pl_module, name, value)
            snapshot.restore()
            for scheduler, state in schedulers:
                scheduler.load_state_dict(state)
            plugin.load_state_dict(precision_state)
            with torch.no_grad():
                for t, saved in zip(inputs, saved_inputs):
                    if t.shape == saved.shape and not torch.equal(t, saved):
                        t.copy_(saved)


def _loops(loop: Any) -> list[Any]:
    found = [loop]
    for value in vars(loop).values():
        if isinstance(value, _Loop):
            found.extend(_loops(value))
    return found


#: the loops' restart flags; loading a loop state sets them (as on a resume)
_RESTART_FLAGS = ("_restarting", "_loaded_from_state_dict", "_resuming_from_checkpoint")


@dataclass
class FitLoopState:
    """What steps through the fit loop change in the Trainer beside the model and the Trainer settings: the loops'
    progress and restart flags (a fresh run stays fresh, a resumed one stays resumed), the precision plugin's
    state, the schedulers' state, the strategy's optimizers and scheduler configs, ``should_stop``."""

    loop: dict[str, Any]
    flags: list[tuple[Any, dict[str, bool]]]
    precision: Any
    schedulers: list[Any]
    optimizers: list[Any] = field(default_factory=list)
    scheduler_configs: list[Any] = field(default_factory=list)

    @classmethod
    def dump(cls, trainer: pl.Trainer) -> FitLoopState:
        return cls(
            loop=copy.deepcopy(trainer.fit_loop.state_dict()),
            # private: the loops' restart flags, which ``load_state_dict`` sets and nothing public puts back
            flags=[
                (lp, {f: getattr(lp, f) for f in _RESTART_FLAGS if hasattr(lp, f)}) for lp in _loops(trainer.fit_loop)
            ],
            precision=to_host(trainer.precision_plugin.state_dict()),
            schedulers=[to_host(cfg.scheduler.state_dict()) for cfg in trainer.lr_scheduler_configs],
            optimizers=list(trainer.strategy.optimizers),
            scheduler_configs=list(trainer.strategy.lr_scheduler_configs),
        )

    def rewind(self, trainer: pl.Trainer) -> None:
        """Everything above back as it was (between trials and after them), the loaders built afresh on first use."""
        trainer.strategy.optimizers = list(self.optimizers)
        trainer.strategy.lr_scheduler_configs = list(self.scheduler_configs)
        for cfg, state in zip(trainer.lr_scheduler_configs, self.schedulers):
            cfg.scheduler.load_state_dict(state)
        trainer.precision_plugin.load_state_dict(self.precision)
        trainer.fit_loop.load_state_dict(copy.deepcopy(self.loop))
        for lp, flags in self.flags:
            for name, value in flags.items():
                setattr(lp, name, value)
        trainer.should_stop = False
        drop_loaders(trainer)


@dataclass
class FitLoopTrials:
    """Inside :func:`fit_loop_trials`: ``rewind()`` puts the model, optimizers, generators and the fit loop back
    as they were at the start (between trials)."""

    trainer: pl.Trainer
    model: TrainingSnapshot
    state: FitLoopState

    def rewind(self) -> None:
        self.model.restore()
        self.state.rewind(self.trainer)


@contextmanager
def fit_loop_trials(
    trainer: pl.Trainer, pl_module: pl.LightningModule, max_steps: int, callbacks: Sequence[Any] = ()
) -> Iterator[FitLoopTrials]:
    """Steps through the Trainer's own fit loop (``trainer.fit_loop.run()``: precision, strategy, accumulation and
    the model's hooks as in training), at most ``max_steps`` of them, with only ``callbacks`` running, no validation,
    loggers logging nothing; on the way out everything those steps touched is back: :func:`trial_steps`' state
    (model, optimizers, the DataModule's plain attributes, random generators), :class:`FitLoopState`,
    :class:`TrainerSettings`, the progress bar, and the logged results (they must not leak into the run)."""
    datamodule = getattr(trainer, "datamodule", None)  # a Trainer property Lightning's stubs do not declare
    extra = [datamodule] if datamodule is not None else []
    with trial_steps(root_module(trainer, pl_module), trainer.optimizers, extra=extra) as model:
        state = FitLoopState.dump(trainer)
        settings = TrainerSettings.dump(trainer)
        bar = trainer.progress_bar_callback
        if bar is not None:
            bar.disable()
        try:
            settings.reset(trainer, max_steps=max_steps, callbacks=callbacks)
            state.rewind(trainer)
            yield FitLoopTrials(trainer, model, state)
        finally:
            state.rewind(trainer)
            settings.restore(trainer)
            if bar is not None:
                bar.enable()
            connector = trainer._logger_connector  # private: the trials' logged results; no public reset
            connector.reset_results()
            connector.reset_metrics()
