"""T09 activation checkpointing as a callback: wrap the chosen sub-modules in ``setup``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import lightning.pytorch as pl
from torch import nn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.functional.checkpointing import (
    CheckpointWatch,
    Target,
    auto_checkpoint_targets,
    checkpoint_modules,
    normalize_targets,
    unwrap_module,
    watch_checkpointed,
    wrap_module,
)
from lightning_speedups.trainer.hooks import forget_after_configure_model, run_after_configure_model


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
        self.wrapped: dict[str, nn.Module] = {}
        self._watch: Optional[CheckpointWatch] = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # layers built in the model's configure_model exist only after it: the surgery runs right then
        if not run_after_configure_model(pl_module, self, lambda: self._apply(trainer, pl_module, stage)):
            self._apply(trainer, pl_module, stage)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.targets == ["auto"] and not auto_checkpoint_targets(pl_module):
            frozen = auto_checkpoint_targets(pl_module, trainable_only=False)
            why = (
                f"the repeated blocks ({_shown([n for n, _ in frozen])}) are frozen (requires_grad=False):"
                " recomputing them saves no memory"
                if frozen
                else "no repeated blocks found for targets='auto'"
            )
            self.report(False, f"skipped, {why} (name the modules to checkpoint)", echo=True)
            return
        names = checkpoint_modules(pl_module, self.targets)
        self.wrapped = {name: pl_module.get_submodule(name) for name in names}
        self.report(True, f"{len(names)} modules checkpointed ({_shown(names)})")

    @property
    def changes_step(self) -> bool:
        return self.active and bool(self.wrapped)

    @property
    def needs_trial(self) -> bool:
        """Checkpointing is tried on the first batch before the run takes it: a block that changes its inputs in
        place, or whose output takes no gradient, is left alone (see :meth:`after_trial`)."""
        return self.changes_step

    @override
    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        taken = [module for module in self.wrapped.values() if unwrap_module(module)]

        def resume() -> None:
            for module in taken:
                wrap_module(module)

        return resume

    def trial_watch(self, trainer: Any, pl_module: Any) -> contextlib.AbstractContextManager[Any]:
        """The trial step runs inside :func:`~lightning_speedups.functional.checkpointing.watch_checkpointed`."""
        if not self.changes_step:
            return contextlib.nullcontext()
        watch = watch_checkpointed()

        @contextlib.contextmanager
        def watching() -> Iterator[None]:
            with watch as seen:
                self._watch = seen
                yield

        return watching()

    def after_trial(self, trainer: Any, pl_module: Any, error: Optional[BaseException]) -> bool:
        """Leave alone every block the trial found unsafe or useless to checkpoint; ``True`` when it changed
        something (the trial is then taken again)."""
        watch, self._watch = self._watch, None
        if watch is None:
            return False
        names = {id(m): n for n, m in self.wrapped.items()}
        out = {names[id(m)]: why for m, why in watch.problems.items() if id(m) in names}
        if error is None:  # a whole step ran: a block it never called with gradients is not on their path
            seen = {id(m) for m in watch.seen}
            out.update(
                {n: "not run with gradients in the training step" for n, m in self.wrapped.items() if id(m) not in seen}
            )
        if not out:
            return False
        for name in out:
            unwrap_module(self.wrapped.pop(name))
        first, why = next(iter(out.items()))
        left = f"{len(out)} left alone ({first}: {why}" + (f"; and {len(out) - 1} more" if len(out) > 1 else "") + ")"
        if self.wrapped:
            self.report(True, f"{len(self.wrapped)} modules checkpointed ({_shown(list(self.wrapped))}); {left}")
        else:
            self.report(
                False, f"skipped after a trial step of the first batch: {left}; name other modules to checkpoint"
            )
        return True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        forget_after_configure_model(pl_module, self)


def _shown(names: list[str]) -> str:
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
