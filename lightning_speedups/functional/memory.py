"""T04 memory: budgets in bytes, and the peak memory of real training steps on any device.

* **Memory budgets** — :func:`parse_memory_budget` turns ``2_000_000_000``, ``"2GiB"``, ``"512MB"``,
  ``0.25``, ``"0.25"`` or ``"25%"`` (a fraction of the machine's RAM, or of the GPU's memory) into bytes,
  with clear errors for negative, zero and too-large budgets.
* **Peak memory of real steps** — :class:`LiveTensorMemory` measures, on any device, the peak number
  of bytes held by live tensor storages while code runs; :func:`measure_peak_memory` uses it on the CPU
  and ``torch.cuda.max_memory_allocated`` on CUDA.

Why a live-tensor count on the CPU: the default CPU allocator keeps no statistics that PyTorch
exposes (there is no CPU twin of ``torch.cuda.max_memory_allocated`` in torch 2.4), the process RSS
high-water mark never goes down within a process (so it cannot compare two batch sizes one after the
other) and includes the interpreter, libraries and the data set, and a subprocess per trial would
need the model, data and training step to be picklable. :class:`LiveTensorMemory` is a
``TorchDispatchMode``: every ATen operation that runs while it is active reports its output tensors;
their storages are counted (once each, views share their base's storage) until they are freed. Seed
tensors (parameters, buffers, gradients, optimizer state) are counted from the start; other tensors
that existed before (a data set held in memory, constants) are not counted, nor are views of them
(indexing a ``TensorDataset`` does not count the whole data set), but new tensors computed from them
are. The result is
deterministic (it does not depend on the allocator, other threads or the OS) and covers activations,
saved tensors, gradients, optimizer state, the collated batch (when collated in this process) and
temporaries. Its limits: scratch memory allocated inside a kernel and freed before it returns (e.g.
a convolution's workspace) and allocator fragmentation are not seen; batches made by worker processes
are not seen until an operation produces a tensor from them; compiled (``torch.compile``) code is
not measured op by op. The margin of the callback covers the first two.
"""

from __future__ import annotations

import gc
import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode  # private: no public dispatch-mode base
from torch.utils._pytree import tree_flatten  # private: no public pytree flatten guaranteed since torch 2.4

from lightning_speedups.errors import SettingError, SettingTypeError

__all__ = [
    "release_device_memory",
    "LiveTensorMemory",
    "MemoryBudget",
    "MemoryBudgetExceeded",
    "format_bytes",
    "is_out_of_memory",
    "measure_peak_memory",
    "parse_memory_budget",
    "total_memory_bytes",
]

MemoryBudget = Union[int, float, str]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class MemoryBudgetExceeded(RuntimeError):
    """Raised by :class:`LiveTensorMemory` as soon as live tensors exceed its ``limit``.

    The message contains ``"DefaultCPUAllocator: can't allocate memory"`` so that code which
    recognises a CPU out-of-memory error (e.g. Lightning's ``is_oom_error``) treats it as one.
    """


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: a human-readable size with binary units."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _cgroup_limit() -> Optional[int]:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def total_memory_bytes(device: Union[str, torch.device, None] = None) -> int:
    """The memory a budget fraction refers to: the GPU's total memory for a CUDA device, else the
    machine's physical RAM (or the container's cgroup limit when that is lower)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    total: Optional[int] = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        try:
            import psutil

            total = int(psutil.virtual_memory().total)
        except (ImportError, OSError, AttributeError):  # no psutil either: total memory unknown
            total = None
    limit = _cgroup_limit()
    if limit is not None:
        total = min(total, limit) if total else limit
    if not total:  # pragma: no cover
        raise SettingError("Cannot tell how much memory this machine has; pass `memory_budget` in bytes.")
    return int(total)


def _budget_error(budget: Any, why: str) -> SettingError:
    return SettingError(
        f"`memory_budget={budget!r}` {why}. Pass a positive number of bytes (an int, or a string such as "
        "'2GiB' or '512MB') or a fraction of the memory in (0, 1] (a float such as 0.25, or '25%')."
    )


def parse_memory_budget(budget: MemoryBudget, total: Optional[int] = None) -> int:
    """Turn a memory budget into bytes.

    Accepted forms: an ``int`` (bytes); a ``float`` in ``(0, 1]`` (a fraction of ``total``); a string
    holding either (``"0.25"`` is a fraction, ``"4000000000"`` bytes), a percentage (``"25%"``) or a size
    with a unit (``"2GiB"``, ``"2G"`` and ``"2048M"`` are binary, ``"2GB"`` is decimal).

    Args:
        budget: the budget.
        total: the memory a fraction refers to, and that the budget may not exceed (e.g.
            :func:`total_memory_bytes`); ``None`` to skip that check (fractions then fail).

    Raises:
        ValueError: naming ``memory_budget`` and the fix, for a malformed, negative, zero or too large
            budget. TypeError for a value that is not a number or a string.

    Example::

        >>> parse_memory_budget("2GiB")
        2147483648
        >>> parse_memory_budget(0.25, total=8 * 2**30) == 2 * 2**30
        True
    """
    fraction: Optional[float] = None
    nbytes: Optional[float] = None
    if isinstance(budget, bool) or not isinstance(budget, (int, float, str)):
        raise SettingTypeError(
            f"`memory_budget` must be an int (bytes), a float fraction of the memory in (0, 1], or a string such "
            f"as '2GiB' or '25%'; got {type(budget).__name__} {budget!r}."
        )
    if isinstance(budget, int):
        nbytes = budget
    elif isinstance(budget, float):
        if not math.isfinite(budget):
            raise _budget_error(budget, "is not a finite number")
        if budget > 1:
            raise _budget_error(
                budget, "is a float above 1: a float is read as a fraction of the memory, an int as bytes"
            )
        fraction = budget
    else:
        text = budget.strip()
        if text.endswith("%"):
            try:
                fraction = float(text[:-1]) / 100
            except ValueError:
                raise _budget_error(budget, "is not a percentage") from None
        else:
            if text.startswith("-"):
                raise _budget_error(budget, "is negative")
            match = _SIZE_RE.match(text)
            if match is None or match.group(2).lower() not in _UNITS:
                raise _budget_error(budget, "cannot be read as a size")
            value, unit = float(match.group(1)), match.group(2).lower()
            if unit == "" and "." in match.group(1) and value <= 1:
                fraction = value
            elif unit == "" and value != int(value):
                raise _budget_error(budget, "is a number above 1 that is not a whole number of bytes")
            else:
                nbytes = value * _UNITS[unit]
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise _budget_error(budget, "is not a fraction in (0, 1]")
        if total is None:
            raise _budget_error(budget, "is a fraction, but the total memory is unknown here")
        return int(fraction * total)
    assert nbytes is not None
    if nbytes <= 0:
        raise _budget_error(budget, "is negative or zero" if nbytes < 0 else "is zero")
    if total is not None and nbytes > total:
        raise _budget_error(
            budget,
            f"is larger than the memory available here ({format_bytes(total)}); a budget must fit in it",
        )
    return int(nbytes)


class LiveTensorMemory(TorchDispatchMode):
    """Count the bytes held by live tensor storages while code runs, and their peak.

    A ``TorchDispatchMode``: the outputs of every ATen operation run under it are recorded (by
    storage, so views are not counted twice) until their storage is freed. Tensors that exist before
    (parameters, optimizer state, ...) are counted when passed as ``seed``. See the module docstring
    for what this sees and what it does not.

    Args:
        seed: tensors alive at the start that belong to the measurement.
        device: count only tensors on this device type (``"cpu"`` by default); ``None`` for all.
        limit: when given, raise :class:`MemoryBudgetExceeded` as soon as the live bytes exceed it, so
            that a too large trial stops before it takes the machine's memory.

    Example::

        >>> with LiveTensorMemory() as mem:
        ...     a = torch.ones(1024)          # 4 KiB
        ...     b = a * 2                     # 8 KiB live
        ...     del a, b
        ...     c = torch.ones(256)           # 1 KiB
        >>> mem.peak, mem.current
        (8192, 1024)
    """

    def __init__(
        self,
        seed: Iterable[Tensor] = (),
        *,
        device: Optional[str] = "cpu",
        limit: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.device_type = device
        self.limit = limit
        self.current = 0
        self.peak = 0
        self.exceeded = False
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        for t in seed:
            self._add(t)
        self.peak = self.current

    def _storage(self, t: Any) -> Any:
        if not isinstance(t, Tensor) or t.is_sparse or t.device.type == "meta":
            return None
        if self.device_type is not None and t.device.type != self.device_type:
            return None
        try:
            return t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, some subclasses)
            return None

    def _add(self, t: Any, skip: frozenset[int] = frozenset()) -> None:
        storage = self._storage(t)
        if storage is None:
            return
        key = storage._cdata  # private: a storage's identity (what views share); no public id for it
        entry = self._live.get(key)
        if entry is None:
            if key in skip:  # a view of (or in-place on) an input this mode does not count, e.g. a data set
                return
            nbytes = storage.nbytes()
            self._live[key] = (StorageWeakRef(storage), nbytes)
            self.current += nbytes
        else:
            nbytes = storage.nbytes()
            if entry[1] != nbytes:  # resized in place
                self._live[key] = (entry[0], nbytes)
                self.current += nbytes - entry[1]

    def _sweep(self) -> None:
        dead = [key for key, (ref, _) in self._live.items() if ref.expired()]
        for key in dead:
            self.current -= self._live.pop(key)[1]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._sweep()
        inputs = set()
        for t in tree_flatten((args, kwargs))[0]:
            storage = self._storage(t)
            if storage is not None:
                inputs.add(storage._cdata)
        untracked_inputs = frozenset(k for k in inputs if k not in self._live)
        for t in tree_flatten(out)[0]:
            self._add(t, untracked_inputs)
        if self.current > self.peak:
            self.peak = self.current
            if self.limit is not None and self.peak > self.limit and not self.exceeded:
                self.exceeded = True
                raise MemoryBudgetExceeded(
                    f"DefaultCPUAllocator: can't allocate memory: live tensors reached {format_bytes(self.peak)}, "
                    f"over the budget of {format_bytes(self.limit)} (simulated out-of-memory)"
                )
        return out


def is_out_of_memory(exception: BaseException) -> bool:
    """Whether ``exception`` is an out-of-memory error (CUDA, CPU allocator, or a budget exceeded)."""
    if isinstance(exception, MemoryBudgetExceeded):
        return True
    oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exception, oom_type):
        return True
    if not isinstance(exception, RuntimeError) or not exception.args or not isinstance(exception.args[0], str):
        return False
    msg = exception.args[0]
    return (
        ("CUDA" in msg and "out of memory" in msg)
        or "DefaultCPUAllocator: can't allocate memory" in msg
        or "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED." in msg
    )


def measure_peak_memory(
    fn: Callable[[], Any],
    *,
    device: Union[str, torch.device] = "cpu",
    seed: Iterable[Tensor] = (),
    limit: Optional[int] = None,
) -> int:
    """Run ``fn()`` and return the peak memory it used, in bytes.

    On CUDA: ``torch.cuda.max_memory_allocated`` after a reset of the peak statistics (everything
    allocated on the device counts, ``seed`` is ignored). Elsewhere: the peak of
    :class:`LiveTensorMemory` with ``seed`` counted from the start.

    Raises:
        MemoryBudgetExceeded: (not on CUDA) as soon as the live bytes exceed ``limit``.

    Example::

        >>> measure_peak_memory(lambda: torch.ones(1024) * 2)
        8192
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    with LiveTensorMemory(seed, device=device.type, limit=limit) as mem:
        fn()
    return mem.peak


def release_device_memory(device: Union[str, torch.device, None] = None, *, reset_peak: bool = True) -> None:
    """Give memory that nothing references back, and start the peak statistics afresh.

    ``gc.collect()`` first (reference cycles, e.g. a caught exception's traceback frames that hold
    a trial's activations), then on CUDA ``torch.cuda.empty_cache()`` and, with ``reset_peak``,
    ``torch.cuda.reset_peak_memory_stats``: after a search of trial runs, the run's own
    ``max_memory_allocated`` must not report the largest trial's peak. Call it only after leaving
    any ``except`` block: inside one, the exception still holds its frames' tensors.
    """
    gc.collect()
    dev = torch.device(device) if device is not None else None
    if (dev is None or dev.type == "cuda") and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        if reset_peak:
            torch.cuda.reset_peak_memory_stats(dev)
