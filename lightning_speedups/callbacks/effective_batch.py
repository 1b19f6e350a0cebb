"""T10: accumulate gradients to reach a target effective batch size."""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError


def loader_batch_size(loader: Any) -> Optional[int]:
    """The per-step batch size of a DataLoader (or the first loader of a Lightning CombinedLoader)."""
    if loader is None:
        return None
    flattened = getattr(loader, "flattened", None)
    if flattened:
        loader = flattened[0]
    elif isinstance(loader, dict) and loader:
        loader = next(iter(loader.values()))
    elif isinstance(loader, (list, tuple)) and loader:
        loader = loader[0]
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(size) if size is not None else None


def accumulation_for(effective_batch_size: int, batch_size: int, world_size: int) -> int:
    """``accumulate_grad_batches`` that reaches ``effective_batch_size`` = batch x world x accumulation.

    Raises:
        ValueError: naming ``effective_batch_size`` and the values that would divide, when it does not divide.
    """
    per_step = batch_size * world_size
    if effective_batch_size % per_step:
        lower = max(per_step, effective_batch_size // per_step * per_step)
        raise SettingError(
            f"`speedups.effective_batch_size={effective_batch_size}` is not a multiple of batch size {batch_size}"
            f" x {world_size} process(es) = {per_step}. Use {lower} or {lower + per_step}, or change the batch size."
        )
    return effective_batch_size // per_step


class EffectiveBatchSize(SpeedupCallback):
    """T10: set ``accumulate_grad_batches`` so that batch x devices x nodes x accumulation = a target.

    What it does: gradients of several micro-batches are summed before one optimizer step, simulating a large
    batch that does not fit.

    Card: tip T10 ``grad-accumulation``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    The processes are every rank of every node: ``trainer.world_size`` (``devices x num_nodes``, as
    Lightning's launchers, torchrun and SLURM set it), so the same setting gives the same effective
    batch on one machine and across nodes; the summary says how many nodes it counted.

    Args:
        effective_batch_size: samples per optimizer step across all processes of all nodes.

    Example::

        trainer = Trainer(devices=2, callbacks=[EffectiveBatchSize(256)])  # loader batch 32 -> accumulate 4
    """

    tip = "T10"
    part = "grad_accumulation"

    def __init__(self, effective_batch_size: int) -> None:
        super().__init__()
        if (
            not isinstance(effective_batch_size, int)
            or isinstance(effective_batch_size, bool)
            or effective_batch_size < 1
        ):
            raise SettingError(f"`effective_batch_size` must be a positive integer; got {effective_batch_size!r}.")
        self.effective_batch_size = effective_batch_size

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not pl_module.automatic_optimization:
            # Lightning refuses Trainer(accumulate_grad_batches != 1) under manual optimization
            self.report(
                False,
                f"skipped: the model uses manual optimization, where Lightning does not accumulate; reach"
                f" {self.effective_batch_size} samples per step by hand in training_step (call opt.step() and"
                " opt.zero_grad() every N batches, dividing the loss by N)",
                echo=True,
            )
            return
        if trainer.train_dataloader is None:
            trainer.fit_loop.setup_data()
        batch_size = loader_batch_size(trainer.train_dataloader)
        if batch_size is None:
            raise SettingError(
                "`speedups.effective_batch_size` needs the train loader's batch size, but the loader has none"
                " (an iterable dataset batching by itself?). Set `trainer.accumulate_grad_batches` instead."
            )
        world = trainer.world_size  # every rank of every node: devices x num_nodes
        accumulate = accumulation_for(self.effective_batch_size, batch_size, world)
        if trainer.accumulate_grad_batches not in (1, accumulate):
            raise SettingError(
                f"Both `trainer.accumulate_grad_batches={trainer.accumulate_grad_batches}` and"
                f" `speedups.effective_batch_size={self.effective_batch_size}` are set and disagree"
                f" (the latter needs {accumulate}). Remove one of them."
            )
        trainer.accumulate_grad_batches = accumulate
        nodes = getattr(trainer, "num_nodes", 1) or 1
        where = f" on {nodes} nodes" if nodes > 1 else ""
        self.report(
            True,
            f"accumulate_grad_batches={accumulate}: {batch_size} per batch x {world} process(es)"
            f" x {accumulate} = {self.effective_batch_size}{where}",
        )
