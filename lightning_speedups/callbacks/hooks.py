"""Instance-level patches of Lightning hook methods, undone at teardown, shared by the data callbacks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities.model_helpers import is_overridden


class HookPatches:
    """Instance-attribute patches of hook methods, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, bool, Any]] = []

    def wrap(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)
        original = getattr(obj, name)
        wrapper = functools.wraps(original)(make(original))
        wrapper.__speedups_patch__ = True  # type: ignore[attr-defined]
        setattr(obj, name, wrapper)
        self._undo.append((obj, name, had, old))

    def is_patched(self, obj: Any, name: str) -> bool:
        return getattr(vars(obj).get(name), "__speedups_patch__", False)

    def undo(self) -> None:
        while self._undo:
            obj, name, had, old = self._undo.pop()
            if had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass


def batch_hook_owner(trainer: Trainer, pl_module: LightningModule, hook: str) -> Any:
    """The object whose batch hook Lightning calls: the DataModule when it overrides it, else the model."""
    dm = trainer.datamodule
    if dm is not None and is_overridden(hook, dm):
        return dm
    return pl_module
