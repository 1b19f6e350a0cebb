"""T04 trial steps for :class:`~lightning_speedups.callbacks.LargestBatch`: a few real training steps at one batch
size through the fit loop and their peak memory (inside
:func:`~lightning_speedups.trainer.trial_steps.fit_loop_trials`, which puts everything back); and the
trainer-level helpers of the callback (learning-rate scaling of its optimizers, the search's errors)."""

from __future__ import annotations

import math
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.parsing import lightning_setattr

from lightning_speedups.errors import BadInput, SettingError
from lightning_speedups.functional.batch_size import SCHEDULER_LR_ATTRS, scale_lr_scheduler, scale_optimizer_lrs
from lightning_speedups.functional.memory import format_bytes, measure_peak_memory
from lightning_speedups.trainer.refusal import SetupRefused
from lightning_speedups.trainer.trial_steps import drop_loaders


def train_set_length(trainer: pl.Trainer) -> Optional[int]:
    """The length of the smallest training data set, or ``None`` when a loader's data set has none."""
    fit_loop = trainer.fit_loop
    try:
        fit_loop.setup_data()
        loader = fit_loop._combined_loader  # private: the built loaders, no public accessor before fit runs
        if loader is None:
            return None
        lengths = [len(dl.dataset) for dl in loader.flattened]
    except (TypeError, AttributeError, NotImplementedError):
        return None
    finally:
        drop_loaders(trainer)
    return min(lengths) if lengths else None


def measure_trial_peak(
    trainer: pl.Trainer,
    pl_module: pl.LightningModule,
    batch_arg_name: str,
    batch_size: int,
    accumulate_grad_batches: int,
    limit: Optional[int],
) -> int:
    """Run the fit loop (inside :func:`~lightning_speedups.trainer.trial_steps.fit_loop_trials`) at ``batch_size``;
    return its peak memory in bytes."""
    lightning_setattr(pl_module, batch_arg_name, batch_size)
    trainer.accumulate_grad_batches = accumulate_grad_batches
    drop_loaders(trainer)
    device = trainer.strategy.root_device
    seed: list[torch.Tensor] = [*pl_module.parameters(), *pl_module.buffers()]
    seed += [p.grad for p in pl_module.parameters() if p.grad is not None]
    for opt in trainer.optimizers:
        for state in opt.state.values():
            seed += [v for v in state.values() if isinstance(v, torch.Tensor)]
    fit_loop = trainer.fit_loop
    fit_loop.setup_data()  # build the loader (and whatever data set ``train_dataloader()`` makes) unmeasured
    peak = measure_peak_memory(fit_loop.run, device=device, seed=seed, limit=limit)
    if fit_loop.epoch_loop.global_step == 0:
        raise RuntimeError(
            f"LargestBatch: no training step ran at batch size {batch_size} (is the training set smaller than the "
            "batch, with drop_last=True?); set `max_batch_size`."
        )
    return peak


def multi_process_error(trainer: pl.Trainer) -> SetupRefused:
    """The error for a search that cannot run: several processes, or a strategy that restores checkpoints late."""
    where = (
        f"a multi-process run (world size {trainer.world_size}): the trial steps would need every process in lockstep"
        if trainer.world_size > 1
        else f"a run with {type(trainer.strategy).__name__}, which restores checkpoints after setup"
    )
    return SetupRefused(
        f"LargestBatch cannot search for a batch size in {where}. Run the search once single-process on one "
        "device (`devices=1, num_nodes=1`, default strategy, e.g. with `max_steps=1`), note the batch size it "
        "prints, then pass `LargestBatch(batch_size=<that size>, ...)` to this run (or resume from a checkpoint "
        "of a run that searched)."
    )


def scale_trainer_lrs(
    trainer: pl.Trainer, factor: float, length_factor: Optional[float]
) -> tuple[list[list[float]], list[str]]:
    """Scale the learning rates of the trainer's optimizers and schedulers; return the new rates and the changed lengths."""
    lrs = []
    for optimizer in trainer.optimizers:
        if factor != 1.0:
            scale_optimizer_lrs(optimizer, factor)
        lrs.append([float(group["lr"]) for group in optimizer.param_groups])
    lengths_changed: list[str] = []
    for config in trainer.lr_scheduler_configs:
        lengths = length_factor if config.interval == "step" else None
        changed = scale_lr_scheduler(config.scheduler, factor, lengths)
        lengths_changed += [c for c in changed if c.rsplit(".", 1)[-1] not in SCHEDULER_LR_ATTRS]
    return lrs, lengths_changed


def too_small_error(
    memory_budget: Any,
    budget_bytes: Optional[int],
    limit: Optional[int],
    margin: float,
    multiple: int,
    peak: Optional[int],
) -> BadInput:
    """The error when not even a batch of ``multiple`` fits: in the device memory, or in the budget (``limit``)."""
    if limit is None:
        return SetupRefused(
            f"LargestBatch: a batch of {multiple} does not fit in the device memory; lower `multiple`, use "
            "activation checkpointing or mixed precision."
        )
    need = (
        f"needs {format_bytes(peak)} at peak, so at least memory_budget={math.ceil(peak / (1 - margin))} "
        f"(~{format_bytes(peak / (1 - margin))}) with margin {margin:g}"
        if peak
        else "needs more than that"
    )
    return SettingError(
        f"`memory_budget={memory_budget!r}` ({format_bytes(budget_bytes or 0)}, "
        f"{format_bytes(limit)} after the margin of {margin:g}) is too small for a batch of {multiple}: "
        f"one training step {need}. Raise `memory_budget`, lower `margin` or `multiple`."
    )
