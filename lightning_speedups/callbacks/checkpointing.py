"""T09 activation checkpointing as a callback: wrap the chosen sub-modules in ``setup``."""

from __future__ import annotations

from collections.abc import Iterable

import lightning.pytorch as pl
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.callbacks.hooks import forget_after_configure_model, run_after_configure_model
from lightning_speedups.functional.checkpointing import (
    Target,
    auto_checkpoint_targets,
    checkpoint_modules,
    normalize_targets,
)


class ActivationCheckpointing(SpeedupCallback):
    """T09: recompute the activations of chosen blocks in the backward pass instead of storing them.

    What it does: in ``setup`` (before the optimizer and the DDP wrapper exist) the matching sub-modules are
    wrapped with non-reentrant :func:`torch.utils.checkpoint.checkpoint`
    (:func:`~lightning_speedups.functional.checkpointing.checkpoint_modules`). Outputs, gradients, dropout
    masks, BatchNorm statistics and ``state_dict`` keys are unchanged, so checkpoints load both ways. Works
    with DDP and with ``torch.compile`` (``CompileModules``).

    Card: tip T09 ``activation-checkpointing``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        targets: ``"auto"`` (default: the repeated blocks, i.e. the most frequent block class among
            the children of the model's ``nn.ModuleList`` / ``nn.Sequential`` containers, see
            :func:`~lightning_speedups.functional.checkpointing.auto_checkpoint_targets`), or one or
            a list of: an ``nn.Module`` subclass, a class name, a glob on qualified module names
            (``"model.layers.*"``) or ``"re:<regex>"``. An explicit target that matches nothing stops
            ``setup`` with an error that lists the class names present; ``"auto"`` finding nothing
            reports the part as skipped.

    Example::

        trainer = Trainer(callbacks=[ActivationCheckpointing("auto")])
        trainer = Trainer(callbacks=[ActivationCheckpointing([nn.TransformerEncoderLayer])])
    """

    tip = "T09"
    part = "activation_checkpointing"

    def __init__(self, targets: Target | Iterable[Target] = "auto") -> None:
        super().__init__()
        self.targets = normalize_targets(targets, argument="targets")

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # layers built in the model's configure_model exist only after it: the surgery runs right then
        if not run_after_configure_model(pl_module, self, lambda: self._apply(trainer, pl_module, stage)):
            self._apply(trainer, pl_module, stage)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.targets == ["auto"] and not auto_checkpoint_targets(pl_module):
            self.report(
                False,
                "skipped, no repeated blocks found for targets='auto' (name the modules to checkpoint)",
                echo=True,
            )
            return
        names = checkpoint_modules(pl_module, self.targets)
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        self.report(True, f"{len(names)} modules checkpointed ({shown})")

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        forget_after_configure_model(pl_module, self)
