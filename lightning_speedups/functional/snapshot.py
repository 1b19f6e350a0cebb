"""What a few trial steps change, kept on the host and put back: the snapshot the LR range test, the
batch-size search and the start-up probe take before their trial steps (through
:func:`lightning_speedups.callbacks.trial_steps.trial_steps`, which also isolates the random generators
with Lightning's ``isolate_rng``).

Weights, buffers and optimizer state are copied to the host, not cloned on the device: a trial must not
need twice the model's device memory (a model that fits a GPU alone would run out of memory in the test).
"""

from __future__ import annotations

import collections
import copy
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
        out: Any  # the dict's own class: a state dict's OrderedDict carries `_metadata`, which dict does not declare
        try:
            out = type(value)(items)
        except TypeError:  # e.g. defaultdict
            out = dict(items)
        if hasattr(value, "_metadata"):  # nn.Module.state_dict() versions
            out._metadata = copy.deepcopy(value._metadata)
        return out
    if isinstance(value, list):
        return [to_host(v) for v in value]
    if isinstance(value, tuple):
        items_t = [to_host(v) for v in value]
        return type(value)(*items_t) if hasattr(value, "_fields") else tuple(items_t)
    return copy.deepcopy(value)


_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training"})


def _copy_value(value: Any) -> Any:
    """A copy of a plain attribute that training may change (tensors, numbers, containers of them),
    or :data:`_KEEP` for anything else (modules, callables, the trainer, config objects): those are
    references, not training state."""
    if isinstance(value, torch.Tensor):  # on the host, with the device to go back to
        return (
            ("tensor", value.device, value.detach().to("cpu", copy=True))
            if not isinstance(value, torch.nn.Parameter)
            else _KEEP
        )
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return value
    if isinstance(value, torch.Generator):
        return ("generator", value.get_state())
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        items = [_copy_value(v) for v in value]
        if any(v is _KEEP for v in items):
            return _KEEP
        if isinstance(value, collections.deque):
            return collections.deque(items, maxlen=value.maxlen)
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if type(value) in (dict, collections.OrderedDict):
        copied = {k: _copy_value(v) for k, v in value.items()}
        if any(v is _KEEP for v in copied.values()):
            return _KEEP
        return type(value)(copied)
    try:
        import numpy as np

        if isinstance(value, np.ndarray):
            return value.copy()
    except ImportError:  # pragma: no cover
        pass
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
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "generator":
            getattr(obj, name).set_state(value[1])
        else:
            setattr(obj, name, _restored(value))  # a fresh copy: the snapshot stays restorable


def _restored(value: Any) -> Any:
    """A saved plain attribute back in its original form (tensors on their device again)."""
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "tensor":
        return value[2].to(value[1], copy=True)
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        items = [_restored(v) for v in value]
        if isinstance(value, collections.deque):
            return collections.deque(items, maxlen=value.maxlen)
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if type(value) in (dict, collections.OrderedDict):
        return type(value)({k: _restored(v) for k, v in value.items()})
    if hasattr(value, "copy") and type(value).__module__ == "numpy":
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
    params: list[tuple[torch.nn.Parameter, torch.Tensor, bool]]
    buffers: list[tuple[torch.nn.Module, str, Optional[torch.Tensor], Optional[torch.device]]]
    optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]]
    objects: list[tuple[Any, dict[str, Any]]]

    @classmethod
    def capture(
        cls, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer] = (), extra: Sequence[Any] = ()
    ) -> TrainingSnapshot:
        """Snapshot ``module`` (and its sub-modules), ``optimizers`` and the plain attributes of the ``extra``
        objects (a DataModule), on the host."""
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
        params = [(p, p.detach().to("cpu", copy=True), p.requires_grad) for p in module.parameters()]
        opts = [(opt, to_host(opt.state_dict())) for opt in optimizers]
        return cls(mods, params, buffers, opts, [(o, _plain_attributes(o)) for o in extra])

    def device_tensors(self) -> list[torch.Tensor]:
        """The tensors the snapshot holds off the host (none: it never doubles the run's device memory)."""
        held: list[Any] = [w for _, w, _ in self.params] + [b for _, _, b, _ in self.buffers]
        held += [t for _, state in self.optimizers for t in _tensors_in(state)]
        held += [t for _, attrs in self.objects for t in _tensors_in(attrs)]
        held += [t for _, _, attrs, _ in self.modules for t in _tensors_in(attrs)]
        return [t for t in held if isinstance(t, torch.Tensor) and t.device.type != "cpu"]

    def restore(self) -> None:
        with torch.no_grad():
            for p, weights, requires_grad in self.params:
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
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        return [t for v in value for t in _tensors_in(v)]
    return []
