"""Which Lightning package a Trainer, module or callback comes from, found at run time.

Lightning ships the same code under two names: ``lightning.pytorch`` (``import lightning as L``) and the
older ``pytorch_lightning``, which many libraries and code bases still import. Their classes are distinct:
a ``pytorch_lightning.LightningModule`` is not a ``lightning.pytorch.LightningModule``, and Lightning's own
helpers (``is_overridden`` without a parent, ``isinstance`` checks in the Trainer) only know their own
package. The pack's callbacks work in a Trainer of either package: they ask this module, with the user's
objects in hand, instead of importing one package's classes for checks.

Examples:
    >>> import torch
    >>> from lightning.pytorch import LightningModule
    >>> class Net(LightningModule):
    ...     def configure_model(self): ...
    >>> namespace_of(Net())
    'lightning.pytorch'
    >>> is_overridden("configure_model", Net()), is_overridden("on_fit_start", Net())
    (True, False)
    >>> namespace_of(torch.nn.Linear(1, 1)) is None
    True
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Optional

from lightning_utilities.core.overrides import is_overridden as _is_overridden

from lightning_speedups.errors import SettingTypeError

#: the two names Lightning's trainer package is installed under
NAMESPACES = ("lightning.pytorch", "pytorch_lightning")
#: the classes whose methods a user overrides, by name
_BASES = ("LightningModule", "LightningDataModule", "Callback")


def _package_of(module: str) -> Optional[str]:
    for ns in NAMESPACES:
        if module == ns or module.startswith(ns + "."):
            return ns
    return None


def lightning_base(obj: Any) -> Optional[type]:
    """The Lightning class ``obj`` derives from (``LightningModule``, ``LightningDataModule`` or ``Callback``
    of either package), or ``None`` for anything else."""
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in cls.__mro__:
        if klass.__name__ in _BASES and _package_of(klass.__module__) is not None:
            return klass
    return None


def is_lightning(obj: Any, *names: str) -> bool:
    """Whether ``obj`` is an instance of a Lightning class of one of ``names`` (``"Trainer"``,
    ``"LightningDataModule"``, ...), from either package."""
    return any(klass.__name__ in names and _package_of(klass.__module__) is not None for klass in type(obj).__mro__)


def lightning_class_name(obj: Any) -> str:
    """The name of the first Lightning class ``obj`` is built on (``"DDPStrategy"`` for the pack's DDP strategy)."""
    return next((k.__name__ for k in type(obj).__mro__ if _package_of(k.__module__) is not None), "")


def namespace_of(obj: Any) -> Optional[str]:
    """``"lightning.pytorch"`` or ``"pytorch_lightning"``: the package whose Lightning classes ``obj`` is built
    on (a Trainer, a module, a data module, a callback, a strategy), or ``None``."""
    cls = obj if isinstance(obj, type) else type(obj)
    for klass in cls.__mro__:
        ns = _package_of(klass.__module__)
        if ns is not None:
            return ns
    return None


def package_of(obj: Any) -> ModuleType:
    """The Lightning package of ``obj`` (``lightning.pytorch`` when ``obj`` is built on neither)."""
    ns = namespace_of(obj) or NAMESPACES[0]
    return sys.modules.get(ns) or importlib.import_module(ns)


def is_overridden(method_name: str, instance: Any) -> bool:
    """Whether ``instance`` overrides ``method_name`` of its Lightning base class, in either package.

    Lightning's own ``is_overridden`` without a ``parent`` only knows its own package's classes and raises
    ``ValueError("Expected a parent")`` for the other's. ``None`` and objects built on no Lightning class
    override nothing.
    """
    if instance is None:
        return False
    parent = lightning_base(instance)
    if parent is None or not hasattr(parent, method_name):
        return False
    return _is_overridden(method_name, instance, parent)


def foreign_objects(trainer: Any, own: type) -> list[tuple[str, Any]]:
    """``(what, object)`` for each callback, model or data module in ``trainer`` built on the other Lightning
    package than the Trainer's (Lightning mixes them up silently or fails mid-fit). ``own`` is the pack's
    callback base class: its callbacks work in either package and are never reported."""
    ns = namespace_of(trainer)
    if ns is None:
        return []
    out: list[tuple[str, Any]] = []
    for cb in getattr(trainer, "callbacks", ()) or ():
        # a plain Callback subclass works in either Trainer (hooks are called by name); Lightning's own callbacks
        # (checkpointing, early stopping, progress bars, ...) are found by isinstance, and silently ignored or
        # doubled by the other package's Trainer
        builtin = [k for k in type(cb).__mro__ if _package_of(k.__module__) is not None and k.__name__ != "Callback"]
        if not isinstance(cb, own) and builtin and namespace_of(cb) != ns:
            out.append(("callback", cb))
    for what, obj in (
        ("model", getattr(trainer, "lightning_module", None)),
        ("data module", getattr(trainer, "datamodule", None)),
    ):
        if obj is not None and lightning_base(obj) is not None and namespace_of(obj) != ns:
            out.append((what, obj))
    return out


class MixedLightningError(SettingTypeError):
    """A Lightning built-in callback, model or data module of the other Lightning package than the Trainer's (bad
    input: the user's import to fix, never a part stepping aside)."""


def mixed_namespace_error(trainer: Any, own: type) -> Optional[str]:
    """One line naming the first object of the other Lightning package in ``trainer`` and the fix, or ``None``."""
    found = foreign_objects(trainer, own)
    if not found:
        return None
    ns = namespace_of(trainer)
    what, obj = found[0]
    other = namespace_of(obj)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (
        f"the {what} {type(obj).__name__} is built on `{other}` but the Trainer is a `{ns}` Trainer{more}:"
        f" Lightning does not mix the two packages; fix: import it from `{ns}` (one import style, as the Trainer's)"
    )


_TWINS: dict[tuple[type, str], type] = {}


def for_namespace(cls: type, ns: Optional[str]) -> type:
    """``cls`` built on package ``ns``'s Lightning class instead of ``lightning.pytorch``'s.

    ``cls`` is declared as ``class X(_Body, <a lightning.pytorch class>)``: its code lives in the body, a
    mixin whose ``super()`` calls reach whichever Lightning class follows it, so the same code serves a
    ``pytorch_lightning`` Trainer (which accepts only its own package's strategies) as a class made once.
    """
    if ns is None or namespace_of(cls) == ns:
        return cls
    key = (cls, ns)
    if key not in _TWINS:
        body, base = cls.__bases__
        home = _package_of(base.__module__) or NAMESPACES[0]
        module = importlib.import_module(ns + base.__module__[len(home) :])
        attrs = {
            "__module__": cls.__module__,
            "__doc__": cls.__doc__,
            "__qualname__": cls.__qualname__,
            "__speedups_origin__": cls,
            "__reduce_ex__": _reduce_twin,  # pickled by its origin and package (a spawn launcher pickles strategies)
        }
        _TWINS[key] = type(cls.__name__, (body, getattr(module, base.__name__)), attrs)
    return _TWINS[key]


def _twin_instance(origin: type, ns: str) -> Any:
    return object.__new__(for_namespace(origin, ns))


def _reduce_twin(self: Any, protocol: Any) -> tuple:
    cls = type(self)
    return (_twin_instance, (cls.__speedups_origin__, namespace_of(cls)), self.__getstate__())
