"""Instance-level patches of Lightning hook methods, undone at teardown, shared by the data callbacks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lightning.pytorch import LightningModule, Trainer

from lightning_speedups.trainer.attributes import set_at_init
from lightning_speedups.trainer.namespace import is_overridden

#: marks a function as the pack's wrapper (an attribute of the function object, in its ``__dict__``)
_PATCHED = "__speedups_patch__"


class HookPatches:
    """Instance-attribute patches of hook methods, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, bool, Any]] = []
        self._originals: dict[tuple[int, str], Callable] = {}

    def wrap(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)
        original = getattr(obj, name)
        wrapper = functools.wraps(original)(make(original))
        vars(wrapper)[_PATCHED] = True
        setattr(obj, name, wrapper)
        self._undo.append((obj, name, had, old))
        self._originals.setdefault((id(obj), name), original)

    def original(self, obj: Any, name: str) -> Callable:
        """What ``obj.name`` was before this object wrapped it (the attribute itself when it did not)."""
        return self._originals.get((id(obj), name)) or getattr(obj, name)

    def is_patched(self, obj: Any, name: str) -> bool:
        return getattr(vars(obj).get(name), _PATCHED, False)

    def undo(self) -> None:
        self._originals.clear()
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
    dm = set_at_init(trainer).datamodule
    if dm is not None and is_overridden(hook, dm):
        return dm
    return pl_module


_AFTER = "__speedups_after_configure_model__"


def run_after_configure_model(pl_module: LightningModule, key: Any, fn: Callable[[], None]) -> bool:
    """Run ``fn`` right after the module's own ``configure_model``; ``False`` when it has none.

    Lightning calls ``configure_model`` after the callbacks' ``setup`` and before the optimizers and
    the strategy's wrapper exist (``Trainer._run``: setup hooks, then ``configure_model``, then
    ``strategy.setup``), with no callback hook in between. Layers built there do not exist yet in
    ``setup``, so model surgery registers itself here instead: one ``functools.wraps`` wrapper per
    module (Lightning's override check looks through ``__wrapped__``, so it still calls it) runs the
    registered functions in registration order (the callbacks' order) after the user's method.
    Registering the same ``key`` again replaces its function; :func:`forget_after_configure_model`
    removes it, and the wrapper goes with the last one.
    """
    if not is_overridden("configure_model", pl_module):
        return False
    state = vars(pl_module).get(_AFTER)
    if state is None:
        had = "configure_model" in vars(pl_module)
        old = vars(pl_module).get("configure_model")
        original = pl_module.configure_model
        after: dict[Any, Callable[[], None]] = {}

        @functools.wraps(original)
        def configure_model(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            for then in list(after.values()):
                then()
            return out

        vars(configure_model)[_PATCHED] = True
        state = (after, had, old)
        object.__setattr__(pl_module, "configure_model", configure_model)
        object.__setattr__(pl_module, _AFTER, state)
    state[0][key] = fn
    return True


def forget_after_configure_model(pl_module: LightningModule, key: Any) -> None:
    """Undo :func:`run_after_configure_model` for ``key`` (the original method is back after the last)."""
    state = vars(pl_module).get(_AFTER)
    if state is None:
        return
    after, had, old = state
    after.pop(key, None)
    if after:
        return
    del vars(pl_module)[_AFTER]
    if had:
        object.__setattr__(pl_module, "configure_model", old)
    else:
        vars(pl_module).pop("configure_model", None)
