"""What a few trial steps change, kept on the host and put back: the snapshot the LR range test, the
batch-size search and the start-up probe take before their trial steps (through
:func:`lightning_speedups.trainer.trial_steps.trial_steps`, which also isolates the random generators
with Lightning's ``isolate_rng``).

Weights, buffers and optimizer state are copied to the host, not cloned on the device: a trial must not
need twice the model's device memory (a model that fits a GPU alone would run out of memory in the test).
"""

from __future__ import annotations

import collections
import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

__all__ = ["TrainingSnapshot", "to_host"]


def to_host(value: Any) -> Any:
    """A deep copy of ``value`` (a tensor, or a state dict / list / tuple of them, e.g. an optimizer's
    ``state_dict()``) with every tensor copied to the host memory (device memory stays untouched).

    Examples:
        >>> state = {"state": {0: {"momentum_buffer": torch.ones(2)}}, "param_groups": [{"lr": 0.1}]}
        >>> to_host(state)["state"][0]["momentum_buffer"].device.type
        'cpu'
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        items = [(k, to_host(v)) for k, v in value.items()]
        out: Any  # a state dict's OrderedDict carries `_metadata`, which dict does not declare
        out = collections.OrderedDict(items) if isinstance(value, collections.OrderedDict) else dict(items)
        if hasattr(value, "_metadata"):  # nn.Module.state_dict() versions
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, list):
        return [to_host(v) for v in value]
    if isinstance(value, tuple):
        items_t = [to_host(v) for v in value]
        kind = type(value)
        return kind._make(items_t) if hasattr(kind, "_make") and hasattr(kind, "_fields") else tuple(items_t)
    return copy.deepcopy(value)


_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training"})


_SCALARS = (bool, int, float, complex, str, bytes, type(None))


class _Saved:
    """A saved plain attribute that is not its own copy: a tensor on the host (with its device), a generator's
    state, or an immutable object kept as it is."""

    __slots__ = ("kind", "payload", "device")

    def __init__(self, kind: str, payload: Any, device: Any = None) -> None:
        self.kind, self.payload, self.device = kind, payload, device


def _immutable(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` cannot change in place: scalars, and tuples / frozensets of them (any tuple subclass:
    an irreducible-representation tuple, a shape), so keeping the object itself keeps its value."""
    if isinstance(value, _SCALARS):
        return True
    if depth < 8 and isinstance(value, (tuple, frozenset)):
        return all(_immutable(v, depth + 1) for v in value)
    return False


def _copy_value(value: Any) -> Any:
    """A copy of a plain attribute that training may change (tensors, numbers, containers of them),
    or :data:`_KEEP` for anything else (modules, callables, the trainer, config objects): those are
    references, not training state.

    Containers are copied only when they are of the exact built-in type (``list``, ``dict``, ``tuple``, a named
    tuple, ...): a subclass may have a constructor of its own (a tuple of irreducible representations built from a
    string), so it is never rebuilt, only kept as it is (when immutable) or left out of the snapshot.
    """
    if isinstance(value, torch.Tensor):  # on the host, with the device to go back to
        if isinstance(value, torch.nn.Parameter) or type(value) not in (torch.Tensor,):
            return _KEEP  # parameters are snapshot as such; tensor subclasses may not survive a copy
        return _Saved("tensor", value.detach().to("cpu", copy=True), value.device)
    if _immutable(value):
        return value if isinstance(value, _SCALARS) else _Saved("same", value)
    if isinstance(value, torch.Generator):
        return _Saved("generator", value.get_state())
    kind = type(value)
    named = isinstance(value, tuple) and hasattr(kind, "_make") and hasattr(kind, "_fields")
    if kind in (list, tuple, set, collections.deque) or named:
        items = [_copy_value(v) for v in value]
        if any(v is _KEEP for v in items):
            return _KEEP
        if kind is collections.deque:
            return collections.deque(items, maxlen=value.maxlen)
        return kind._make(items) if named else kind(items)
    if kind in (dict, collections.OrderedDict):
        copied = {k: _copy_value(v) for k, v in value.items()}
        if any(v is _KEEP for v in copied.values()):
            return _KEEP
        return kind(copied)
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value) is numpy.ndarray:
        return value.copy()
    return _KEEP


_KEEP = object()


def _plain_attributes(obj: Any) -> dict[str, Any]:
    out = {}
    for name, value in vars(obj).items():
        if name in _MODULE_INTERNALS or isinstance(value, torch.nn.Module):
            continue
        copied = _copy_value(value)
        if copied is not _KEEP:
            out[name] = copied
    return out


def _set_attributes(obj: Any, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        if isinstance(value, _Saved) and value.kind == "generator":
            getattr(obj, name).set_state(value.payload)
        else:
            # a fresh copy (the snapshot stays restorable), through the instance dict when the class guards the
            # attribute with a property of its own (nn.Module's __setattr__ is kept for tensors and modules)
            new = _restored(value)
            if isinstance(getattr(type(obj), name, None), property):
                vars(obj)[name] = new
            else:
                setattr(obj, name, new)


def _restored(value: Any) -> Any:
    """A saved plain attribute back in its original form (tensors on their device again)."""
    if isinstance(value, _Saved):
        if value.kind == "tensor":
            return value.payload.to(value.device, copy=True)
        return value.payload  # "same": an immutable object, kept as it was
    kind = type(value)
    named = isinstance(value, tuple) and hasattr(kind, "_make") and hasattr(kind, "_fields")
    if kind in (list, tuple, set, collections.deque) or named:
        items = [_restored(v) for v in value]
        if kind is collections.deque:
            return collections.deque(items, maxlen=value.maxlen)
        return kind._make(items) if named else kind(items)
    if kind in (dict, collections.OrderedDict):
        return kind({k: _restored(v) for k, v in value.items()})
    numpy = sys.modules.get("numpy")
    if numpy is not None and kind is numpy.ndarray:
        return value.copy()
    return value


@dataclass
class TrainingSnapshot:
    """Everything a few trial steps change, kept in memory and put back by :meth:`restore`: every
    sub-module's parameters (values and ``requires_grad``), buffers (persistent or not), train / eval
    mode and plain training attributes (tensors, numbers, lists / dicts / deques of them, generators,
    numpy arrays: a sampler's replay buffer, a step counter); the optimizers' state and hyper-parameters.
    Every tensor is copied to the host (:meth:`device_tensors` is empty); the random generators are the
    caller's to isolate (``trial_steps`` uses Lightning's ``isolate_rng``).

    Nothing goes through ``torch.save`` / ``torch.load``: the user's hyper-parameters (config objects,
    ``functools.partial`` optimizers, their own classes) are never pickled. Attributes that are neither
    state nor copied (modules, callables, config objects) are kept as they are.

    Examples:
        >>> class Net(torch.nn.Module):  # a user's module: its plain attributes are training state
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.body = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
        ...         self.seen = [1, 2]
        ...     def forward(self, x):
        ...         return self.body(x)
        >>> net = Net()
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        >>> snap = TrainingSnapshot.capture(net, [opt])
        >>> net(torch.randn(4, 2)).sum().backward(); opt.step(); net.seen.append(3); _ = net.eval()
        >>> snap.restore()
        >>> net.seen, net.training, opt.state_dict()["state"]
        ([1, 2], True, {})
    """

    modules: list[tuple[torch.nn.Module, bool, dict[str, Any], dict[str, Any]]]
    params: list[tuple[torch.nn.Parameter, Optional[torch.Tensor], bool]]
    buffers: list[tuple[torch.nn.Module, str, Optional[torch.Tensor], Optional[torch.device]]]
    optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]]
    objects: list[tuple[Any, dict[str, Any]]]

    @classmethod
    def capture(
        cls,
        module: torch.nn.Module,
        optimizers: Sequence[torch.optim.Optimizer] = (),
        extra: Sequence[Any] = (),
        weights: bool = True,
    ) -> TrainingSnapshot:
        """Snapshot ``module`` (and its sub-modules), ``optimizers`` and the plain attributes of the ``extra``
        objects (a DataModule), on the host.

        With ``weights=False`` the parameters' values are not copied (a trial that takes no optimizer step leaves
        them as they are; only their gradients are cleared on restore): a forward and backward pass can be tried
        without a host copy of the model."""
        mods = []
        buffers = []
        for m in module.modules():
            # torch's own modules (layers, the DDP / FSDP wrappers) keep their state in parameters and
            # buffers; their plain attributes are configuration and wrapper bookkeeping, left alone
            attrs = {} if type(m).__module__.startswith("torch.") else _plain_attributes(m)
            mods.append((m, m.training, attrs, dict(m._buffers)))
            for name, buf in m._buffers.items():
                saved = None if buf is None else buf.detach().to("cpu", copy=True)
                buffers.append((m, name, saved, None if buf is None else buf.device))
        params = [
            (p, p.detach().to("cpu", copy=True) if weights else None, p.requires_grad) for p in module.parameters()
        ]
        opts = [(opt, to_host(opt.state_dict())) for opt in optimizers]
        return cls(mods, params, buffers, opts, [(o, _plain_attributes(o)) for o in extra])

    def device_tensors(self) -> list[torch.Tensor]:
        """The tensors the snapshot holds off the host (none: it never doubles the run's device memory)."""
        held: list[Any] = [w for _, w, _ in self.params if w is not None] + [b for _, _, b, _ in self.buffers]
        held += [t for _, state in self.optimizers for t in _tensors_in(state)]
        held += [t for _, attrs in self.objects for t in _tensors_in(attrs)]
        held += [t for _, _, attrs, _ in self.modules for t in _tensors_in(attrs)]
        return [t for t in held if isinstance(t, torch.Tensor) and t.device.type != "cpu"]

    def restore(self) -> None:
        with torch.no_grad():
            for p, weights, requires_grad in self.params:
                if weights is not None:
                    p.copy_(weights)
                p.grad = None
                p.requires_grad_(requires_grad)
            for m, name, saved, device in self.buffers:
                current = m._buffers.get(name)
                if saved is None or current is None or current.shape != saved.shape:
                    # reassigned (a queue grown by torch.cat): a copy of the saved one back, on its device
                    m._buffers[name] = None if saved is None else saved.to(device, copy=True)
                else:
                    current.copy_(saved)
        for m, training, attrs, registered in self.modules:
            m.training = training
            for name in set(m._buffers) - set(registered):
                del m._buffers[name]  # a buffer registered during the trial steps
            _set_attributes(m, attrs)
        for obj, attrs in self.objects:
            _set_attributes(obj, attrs)
        for opt, state in self.optimizers:
            opt.load_state_dict(copy.deepcopy(state))  # load_state_dict moves the state to each parameter's device


def _tensors_in(value: Any) -> list[Any]:
    if isinstance(value, _Saved):
        return [value.payload] if value.kind == "tensor" else []
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        return [t for v in value for t in _tensors_in(v)]
    return []
