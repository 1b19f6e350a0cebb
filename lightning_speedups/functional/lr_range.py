"""T01: read a learning-rate range test (Smith 2015/2017) and pick the peak of a one-cycle schedule.

A range test trains a few steps while the learning rate grows exponentially and records the (smoothed)
loss at each. The test itself is run by Lightning's ``LearningRateFinder`` (see
:class:`lightning_speedups.callbacks.LRSchedule` with ``max_lr="auto"``); this module only reads its
``lr`` / ``loss`` lists, so the choice is testable on made-up curves.

Examples:
    >>> lrs = [10 ** (-5 + i / 10) for i in range(50)]            # 1e-5 .. ~8e-1
    >>> losses = [2.3 - 1.5 * min(1.0, max(0.0, (i - 10) / 25)) + (0.5 * (i - 40) if i > 40 else 0) for i in range(50)]
    >>> pick = pick_peak_lr(lrs, losses)
    >>> round(pick.min_loss_lr, 4), round(pick.lr, 5)
    (0.0316, 0.00316)
"""

from __future__ import annotations

import collections
import copy
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from lightning_speedups.errors import SettingError

__all__ = ["PEAK_DIVISOR", "RangePick", "TrainingSnapshot", "pick_peak_lr", "resmooth", "steepest_lr"]

#: the peak is the learning rate of the lowest loss divided by this (a decade below it: the classic "min/10")
PEAK_DIVISOR = 10.0


def resmooth(losses: Sequence[float], window: int = 5) -> list[float]:
    """A centred moving average over ``window`` points (fewer at the ends; non-finite points skipped)."""
    half = window // 2
    out = []
    for i in range(len(losses)):
        vals = [v for v in losses[max(0, i - half) : i + half + 1] if math.isfinite(v)]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


@dataclass(frozen=True)
class RangePick:
    """What a range test chose.

    Attributes:
        lr: the peak learning rate to use.
        min_loss_lr: the learning rate at the lowest (smoothed) loss.
        steepest_lr: the learning rate of the steepest descent (Lightning's ``suggestion()``), if any.
        points: how many finite points the test had.
        rule: how ``lr`` was chosen, in words.
    """

    lr: float
    min_loss_lr: float
    steepest_lr: Optional[float]
    points: int
    rule: str


def _finite(lrs: Sequence[float], losses: Sequence[float]) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in zip(lrs, losses) if a > 0 and math.isfinite(a) and math.isfinite(b)]


def steepest_lr(
    lrs: Sequence[float], losses: Sequence[float], skip_begin: int = 10, skip_end: int = 1
) -> Optional[float]:
    """The learning rate where the loss falls fastest per decade (``None`` with too few points).

    Examples:
        >>> steepest_lr([1e-4, 1e-3, 1e-2, 1e-1], [2.0, 1.9, 1.0, 3.0], skip_begin=0, skip_end=0)
        0.001
    """
    pts = _finite(lrs, losses)
    pts = pts[skip_begin : len(pts) - skip_end if skip_end else None]
    if len(pts) < 3:
        return None
    best, best_slope = None, math.inf
    for (a, la), (b, lb) in zip(pts, pts[1:]):
        if b <= a:
            continue
        slope = (lb - la) / (math.log10(b) - math.log10(a))
        if slope < best_slope:
            best, best_slope = a, slope
    return best


def pick_peak_lr(lrs: Sequence[float], losses: Sequence[float], divisor: float = PEAK_DIVISOR) -> RangePick:
    """The peak learning rate of a one-cycle schedule from a range test.

    The lowest loss marks the edge of stability; the peak is ``divisor`` below it (a decade by default,
    the classic "min/10" rule), or the steepest-descent point when that lies between the two and at
    least ``sqrt(divisor)`` below the lowest loss (half a decade): a steep drop right next to the minimum
    is the noise of the last steps before the edge, not a peak to train at. (Measured: on the
    Fashion-MNIST reference, one seed's loss kept falling to lr 0.50 with its steepest drop at 0.44;
    peaking there is at the edge of divergence.)

    Examples:
        >>> lrs = [10 ** (-4 + i / 10) for i in range(40)]               # 1e-4 .. ~8e-1
        >>> losses = [2.0 - 0.02 * i for i in range(38)] + [1.0, 1.5]     # steepest drop at i=37: 0.5 -> 0.63
        >>> pick_peak_lr(lrs, losses).lr < 0.1                            # not 0.5: half a decade from the edge
        True

    Raises:
        ValueError: fewer than 3 finite points (the test diverged at once, or did not run).
    """
    pts = _finite(lrs, losses)
    if len(pts) < 3:
        raise SettingError(
            f"the learning-rate range test has {len(pts)} finite point(s); it needs at least 3 (it diverged at"
            " once: lower its start, or give lr_schedule.max_lr a number)."
        )
    low = min(range(len(pts)), key=lambda i: pts[i][1])
    min_lr = pts[low][0]
    before = pts[: low + 1]  # the steepest descent on the way down, not a noisy drop after the minimum
    steep = steepest_lr(
        [p[0] for p in before], [p[1] for p in before], skip_begin=min(10, len(before) // 5), skip_end=0
    )
    lr = min_lr / divisor
    rule = f"the lowest loss's lr / {divisor:.3g}"
    if steep is not None and steep > lr and steep <= min_lr / math.sqrt(divisor):
        lr, rule = steep, "the steepest descent (above the lowest loss's lr / divisor)"
    return RangePick(lr=lr, min_loss_lr=min_lr, steepest_lr=steep, points=len(pts), rule=rule)


# ------------------------------------------------------------------ the state a range test must give back
_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training"})


def _copy_value(value: Any) -> Any:
    """A copy of a plain attribute that training may change (tensors, numbers, containers of them),
    or :data:`_KEEP` for anything else (modules, callables, the trainer, config objects): those are
    references, not training state."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone() if not isinstance(value, torch.nn.Parameter) else _KEEP
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
            setattr(obj, name, _copy_value(value))  # a fresh copy: the snapshot stays restorable


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:  # pragma: no cover
        pass
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


@dataclass
class TrainingSnapshot:
    """Everything a few trial steps change, kept in memory and put back by :meth:`restore`: every
    sub-module's parameters (values and ``requires_grad``), buffers (persistent or not), train / eval
    mode and plain training attributes (tensors, numbers, lists / dicts / deques of them, generators,
    numpy arrays: a sampler's replay buffer, a step counter); the optimizers' state and hyper-parameters;
    the torch (CPU and CUDA), Python and numpy random generators.

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
    buffers: list[tuple[torch.nn.Module, str, Optional[torch.Tensor]]]
    optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]]
    rng: dict[str, Any]
    objects: list[tuple[Any, dict[str, Any]]]

    @classmethod
    def capture(
        cls, module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer] = (), extra: Sequence[Any] = ()
    ) -> TrainingSnapshot:
        """Snapshot ``module`` (and its sub-modules), ``optimizers``, the random generators and the plain
        attributes of the ``extra`` objects (a DataModule)."""
        mods = []
        buffers = []
        for m in module.modules():
            # torch's own modules (layers, the DDP / FSDP wrappers) keep their state in parameters and
            # buffers; their plain attributes are configuration and wrapper bookkeeping, left alone
            attrs = {} if type(m).__module__.startswith("torch.") else _plain_attributes(m)
            mods.append((m, m.training, attrs, dict(m._buffers)))
            for name, buf in m._buffers.items():
                buffers.append((m, name, None if buf is None else buf.detach().clone()))
        params = [(p, p.detach().clone(), p.requires_grad) for p in module.parameters()]
        opts = [(opt, copy.deepcopy(opt.state_dict())) for opt in optimizers]
        return cls(mods, params, buffers, opts, _rng_state(), [(o, _plain_attributes(o)) for o in extra])

    def restore(self) -> None:
        with torch.no_grad():
            for p, weights, requires_grad in self.params:
                p.copy_(weights)
                p.grad = None
                p.requires_grad_(requires_grad)
            for m, name, saved in self.buffers:
                current = m._buffers.get(name)
                if saved is None or current is None or current.shape != saved.shape:
                    # reassigned (a queue grown by torch.cat): a copy of the saved one back
                    m._buffers[name] = None if saved is None else saved.clone()
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
            opt.load_state_dict(copy.deepcopy(state))
        _set_rng_state(self.rng)
