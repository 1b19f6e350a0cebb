"""T24 channels-last as a callback: convert the model in ``setup`` and every batch once it is on the device."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, no_op, probe_pending
from lightning_speedups.errors import SettingTypeError
from lightning_speedups.functional.channels_last import (
    DEFAULT_EXCLUDE_KEYS,
    batch_to_channels_last,
    channels_last_candidates,
    to_channels_last_undoable,
)
from lightning_speedups.functional.probe import Axis, Option
from lightning_speedups.trainer.hooks import forget_after_configure_model, run_after_configure_model
from lightning_speedups.trainer.namespace import is_overridden

_HOOK = "on_after_batch_transfer"
_MARK = "_lightning_speedups_channels_last"


class ChannelsLast(SpeedupCallback):
    """T24: train in channels-last memory format (NHWC for 4D tensors, NDHWC for 5D).

    What it does: in ``setup`` the model's 4D parameters become ``torch.channels_last`` and its 5D ones
    ``torch.channels_last_3d`` (:func:`~lightning_speedups.functional.channels_last.to_channels_last`); each
    batch's floating-point 4D / 5D tensors are converted right after they reach the device
    (:func:`~lightning_speedups.functional.channels_last.batch_to_channels_last`); labels, masks, integer
    tensors and entries whose key names a label / target / mask are left alone. Only the memory layout
    changes: outputs equal the contiguous model's within the dtype tolerance. A model with no 4D / 5D
    convolution is left untouched and the part reports ``"skipped, model has no 4D/5D convolutions"``.

    Card: tip T24 ``channels-last``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    How batches are converted: ``on_after_batch_transfer`` is a LightningModule / DataModule hook,
    not a callback hook. In ``setup`` this callback wraps the hook on the LightningModule (and on the
    DataModule when that one overrides it) with a ``functools.wraps`` wrapper, so Lightning still
    picks the same implementation (its override check looks through ``__wrapped__``); the user's
    own hook runs first and the conversion is applied to what it returns. ``teardown`` removes the
    wrappers. This covers fit, validate, test and predict, on every strategy.

    With ``auto=True`` the layout is measured instead of assumed: the start-up probe
    (:class:`~lightning_speedups.callbacks.AutoProbe`) times the model's steps in both layouts at the
    first batch and the model is converted only when channels_last is faster beyond the noise. Without
    an ``AutoProbe`` in the callbacks (or outside ``fit``) ``auto`` keeps the contiguous layout.

    Args:
        exclude_keys: substrings of dict keys / dataclass or namedtuple field names whose values are
            never converted (default: ``("label", "target", "mask")``).
        auto: leave the decision to the start-up probe.

    Example::

        trainer = Trainer(callbacks=[ChannelsLast()], precision="bf16-mixed")
        trainer = Trainer(callbacks=[ChannelsLast(auto=True), AutoProbe()])  # kept only if faster here
    """

    tip = "T24"
    part = "channels_last"

    def __init__(self, exclude_keys: Iterable[str] = DEFAULT_EXCLUDE_KEYS, auto: bool = False) -> None:
        super().__init__()
        if not isinstance(auto, bool):
            raise SettingTypeError(f"`auto` must be True or False; got {auto!r}.")
        self.auto = auto
        self._awaiting = False
        self._undo: Any = None
        self._where: Any = None
        if isinstance(exclude_keys, str) or not all(isinstance(k, str) for k in exclude_keys):
            raise SettingTypeError(
                f"`exclude_keys` must be a list of strings (e.g. ['label', 'mask']); got {exclude_keys!r}."
            )
        self.exclude_keys = tuple(exclude_keys)
        self._wrapped: list[Any] = []
        self._paused = False
        self._back: Optional[Callable[[], None]] = None

    def _wrap_hook(self, owner: Any) -> None:
        current = getattr(owner, _HOOK)
        if getattr(current, _MARK, False):  # already wrapped (idempotent)
            return
        exclude = self.exclude_keys

        @functools.wraps(current)
        def on_after_batch_transfer(batch: Any, dataloader_idx: int) -> Any:
            batch = current(batch, dataloader_idx)
            if self._paused:  # suspended or stepped aside: the batch as the user's hook gave it
                return batch
            return batch_to_channels_last(batch, exclude_keys=exclude)

        setattr(on_after_batch_transfer, _MARK, True)
        # a plain instance attribute shadows the class method; ``teardown`` deletes it again
        object.__setattr__(owner, _HOOK, on_after_batch_transfer)
        self._wrapped.append(owner)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # layers built in the model's configure_model exist only after it: the surgery runs right then
        if not run_after_configure_model(pl_module, self, lambda: self._apply(trainer, pl_module, stage)):
            self._apply(trainer, pl_module, stage)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not channels_last_candidates(pl_module):
            self.report(False, "skipped, model has no 4D/5D convolutions", echo=True)
            return
        if self.auto:
            self._where = (trainer, pl_module)
            self._awaiting = stage == "fit"
            why = "waits for the start-up probe at the first batch" if self._awaiting else "decided only in fit"
            self.report(False, f"auto: {why}; contiguous until then")
            return
        self._convert(trainer, pl_module, "")

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._awaiting and not probe_pending(trainer):
            self._awaiting = False
            self.report(False, "auto without the start-up probe (AutoProbe callback): stays contiguous")

    @property
    def uses_probe(self) -> bool:
        return self.auto

    @override
    def probe_axes(self, trainer: Any, pl_module: Any) -> list[Axis]:
        if not self._awaiting:
            return []
        wrapper = trainer.strategy.model
        if isinstance(wrapper, torch.nn.Module) and wrapper is not pl_module:
            # DDP's gradient buckets (and FSDP's flat parameters) took the layout the model had when it was
            # wrapped: converting it now would make every gradient a strided copy
            self._awaiting = False
            self.report(
                False,
                f"auto: not probed under {type(wrapper).__name__} (the layout must be chosen before the model is"
                " wrapped); stays contiguous, set channels_last: true to convert it in setup",
            )
            return []
        exclude = self.exclude_keys

        def apply() -> None:
            self._undo = to_channels_last_undoable(pl_module)

        def undo() -> None:
            self._undo()

        option = Option(
            "channels_last", apply, undo, batch=functools.partial(batch_to_channels_last, exclude_keys=exclude)
        )
        return [Axis("channels_last", "contiguous", [option], self._decide)]

    def _decide(self, option: Any, reason: str) -> None:
        self._awaiting = False
        if option is None:
            self.report(False, reason)
            return
        trainer, pl_module = self._where
        self._convert(trainer, pl_module, reason)

    def _convert(self, trainer: pl.Trainer, pl_module: pl.LightningModule, reason: str) -> None:
        self._back = to_channels_last_undoable(pl_module)
        self._paused = False
        self._wrap_hook(pl_module)
        datamodule: pl.LightningDataModule | None = getattr(trainer, "datamodule", None)
        if datamodule is not None and is_overridden(_HOOK, datamodule):
            self._wrap_hook(datamodule)
        n = len(channels_last_candidates(pl_module))
        self.report(
            True,
            f"model ({n} modules with 4D/5D weights) and batches in channels_last" + (f"; {reason}" if reason else ""),
        )

    @property
    def changes_step(self) -> bool:
        return self.active and not self._paused and self._back is not None

    @override
    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        back, self._back = self._back, None
        if back is None or self._paused:
            return no_op
        back()  # the model's tensors in the layout they had
        self._paused = True

        def resume() -> None:
            self._back = to_channels_last_undoable(pl_module)
            self._paused = False

        return resume

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        forget_after_configure_model(pl_module, self)
        self._awaiting, self._where, self._undo, self._back = False, None, None, None
        for owner in self._wrapped:
            hook = owner.__dict__.get(_HOOK)
            if hook is not None and getattr(hook, _MARK, False):
                del owner.__dict__[_HOOK]
        self._wrapped.clear()
