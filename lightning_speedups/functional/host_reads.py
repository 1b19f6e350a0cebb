"""T08 on any device: count the host reads of device values made during training steps.

On CUDA, :class:`~lightning_speedups.functional.syncs.SyncWatcher` is the ground truth: torch itself
warns at every synchronising call. Elsewhere (a CPU run, a laptop) nothing synchronises, yet the
same code will on a GPU. :class:`HostReadCounter` finds those calls by running the steps under a
``TorchFunctionMode`` that sees every tensor method and torch function, and keeps track of which
tensors would live on the accelerator in a GPU run (*device values*):

- the model's parameters and buffers, the batch Lightning handed to the step (it is moved to the
  device before ``on_train_batch_start``), and tensors made with an explicit ``device=`` or moved with
  ``.to(device)`` / ``.cuda()`` / ``.type_as(device_value)``;
- every result of a torch call that had a device value among its inputs (``loss = f(model(x))``,
  ``p.grad``, ``torch.zeros_like(p)``, ``x.new_zeros(...)``);
- not: a tensor made without a device (``torch.tensor([1, 2])``, Adam's ``step`` counter), nor the
  result of ``.cpu()`` / ``.to("cpu")``.

A host read is any call that needs a device value's data on the host:

- explicit: ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()`` / ``.to("cpu")``, ``float(t)`` /
  ``int(t)`` / ``bool(t)``, formatting or printing a tensor;
- implicit: a tensor as a condition (``if loss > 0:``), and data-dependent shapes: boolean-mask
  indexing (``x[mask]``, ``x[mask] = v``), ``nonzero`` / ``argwhere`` / one-argument ``where``,
  ``masked_select``, ``unique``, ``repeat_interleave`` with tensor repeats.

Each read is attributed from the Python stack as the sync watcher does
(:func:`~lightning_speedups.functional.syncs.classify_sync_frame`: the user's ``file:line``, through
helpers in other files, or Lightning's own read named by the setting that causes it), and counted
with the training steps it ran in: a read seen in 1 step of 20 is not "every batch".

What it cannot know on a CPU: where a value would really live. A device given as a variable is
read from the source line (``.to("cpu")`` / ``device="cpu"`` written out is the host; anything else
is the accelerator).
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, Optional

import torch
from torch.overrides import TorchFunctionMode

from lightning_speedups.functional.syncs import SyncSite, _file_class, classify_sync_frame, short_path

__all__ = ["HostRead", "HostReadCounter", "count_host_reads"]

#: Tensor methods that read the tensor's data on the host, with how a report names them.
_READ_METHODS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "cpu": ".cpu()",
    "__bool__": "a tensor as a condition (bool(t), if/while/and/or)",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__index__": "a tensor as an index or size (operator.index)",
    "__complex__": "complex(t)",
    "__format__": "a tensor formatted into a string",
    "__repr__": "a tensor printed or formatted (repr)",
    "__array__": "a tensor converted to numpy (np.asarray)",
}
#: Torch calls whose output shape depends on the data: the host must read it to size the result.
_DATA_SHAPES = {
    "nonzero": "nonzero (output size depends on the data)",
    "argwhere": "argwhere (output size depends on the data)",
    "masked_select": "masked_select (output size depends on the data)",
    "unique": "unique (output size depends on the data)",
    "unique_consecutive": "unique_consecutive (output size depends on the data)",
    "bincount": "bincount (output size depends on the largest value)",
}
_MASK_DTYPES = (torch.bool, torch.uint8)
#: Not a host read: ``self.log(..., sync_dist=True)`` of a per-step value (a collective under DDP).
_SYNC_DIST = "sync_dist=True on a per-step value (an all-reduce per step under DDP)"


class HostRead(NamedTuple):
    """One place in the code that read device values on the host, with how it read them."""

    site: SyncSite
    what: str
    via: str = ""


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 3 and isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x, depth + 1)


def _caller_says_cpu() -> bool:
    """Whether the source line that made the current torch call writes the host out (``"cpu"``)."""
    frame = sys._getframe(3)  # _caller_says_cpu <- _device_target <- __torch_function__ <- the call site
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return "cpu" in line


def _device_target(args: tuple, kwargs: dict) -> Optional[bool]:
    """For ``.to(...)`` / a factory's ``device=``: True to the accelerator, False to the host, None: no device."""
    dev = kwargs.get("device")
    if dev is None:
        for a in args[1:]:
            if isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
                dev = a
                break
    if dev is None:
        return None
    kind = dev.type if isinstance(dev, torch.device) else str(dev).split(":")[0]
    if kind != "cpu":
        return True
    return not _caller_says_cpu()


class _ReadMode(TorchFunctionMode):
    def __init__(self, counter: HostReadCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        counter = self.counter
        name = getattr(func, "__name__", "")
        on_device = any(counter.is_device(t) for t in _tensors(args)) or any(
            counter.is_device(t) for t in _tensors(kwargs)
        )
        what: Optional[str] = None
        to_device: Optional[bool] = None
        if name == "to" or name == "cuda" or "device" in kwargs:
            to_device = True if name == "cuda" else _device_target(args, kwargs)
            other = [a for a in args[1:] if isinstance(a, torch.Tensor)]
            if name == "to" and other:  # x.to(other): where `other` lives
                to_device = counter.is_device(other[0])
            if on_device and to_device is False:
                what = ".to('cpu')" if name == "to" else None
        elif on_device and name in _READ_METHODS:
            what = _READ_METHODS[name]
            to_device = False if name in ("cpu", "numpy", "tolist") else None
        elif on_device and name in _DATA_SHAPES:
            what = _DATA_SHAPES[name]
        elif on_device and name == "where" and len(args) + len(kwargs) == 1:
            what = "where(condition) with one argument (output size depends on the data)"
        elif on_device and name == "repeat_interleave" and "output_size" not in kwargs:
            if len(args) > 1 and isinstance(args[1], torch.Tensor) or isinstance(kwargs.get("repeats"), torch.Tensor):
                what = "repeat_interleave with tensor repeats (output size depends on the data)"
        elif on_device and name in ("__getitem__", "__setitem__") and len(args) > 1:
            index = [t for t in _tensors(args[1]) if t.dtype in _MASK_DTYPES]
            if any(counter.is_device(t) for t in index):
                what = "boolean-mask indexing (output size depends on the data)"
        if what is not None:
            counter._record(what, sys._getframe(1))
        out = func(*args, **kwargs)
        if to_device is False and on_device and isinstance(out, torch.Tensor) and counter.is_device(out):
            # on the CPU, `.cpu()` / `.to("cpu")` hand back the value itself: a GPU run gets a host copy,
            # so the result becomes a new tensor object (a view of the same data) that is a host value
            out = out.view_as(out)
        if to_device is True or (on_device and to_device is None):
            for t in _tensors(out):
                counter.mark(t)
        return out


class HostReadCounter:
    """Count and attribute the host reads of device values inside windows of code (tip T08, any device).

    Mark what lives on the device (:meth:`mark_module`, :meth:`mark_all`), then run each training
    step inside :meth:`window` (or :meth:`start` / :meth:`stop`).

    Examples:
        >>> import torch
        >>> counter = HostReadCounter()
        >>> w = torch.nn.Parameter(torch.ones(2))
        >>> counter.mark_all([w])
        >>> for step in range(4):
        ...     with counter.window():
        ...         loss = (w * 2).sum()
        ...         if step == 0:
        ...             _ = loss.item()
        >>> counter.total, counter.windows
        (1, 4)
        >>> [(r.what, counter.steps_of[r]) for r in counter.reads]
        [('.item()', {0})]
    """

    def __init__(self) -> None:
        self._device: dict[int, weakref.ref[torch.Tensor]] = {}
        self.reads: Counter[HostRead] = Counter()
        self.steps_of: dict[HostRead, set[int]] = {}
        self.windows = 0
        self._mode: Optional[_ReadMode] = None
        self._step = -1
        self._paused = 0
        self.error: Optional[str] = None

    # -- which tensors are device values ------------------------------------------------------------
    def is_device(self, t: torch.Tensor) -> bool:
        ref = self._device.get(id(t))
        return ref is not None and ref() is t

    def mark(self, t: torch.Tensor) -> None:
        """Take ``t`` for a value that lives on the accelerator in a GPU run."""
        key = id(t)
        if self.is_device(t):
            return
        try:
            self._device[key] = weakref.ref(t, functools.partial(self._forget, key))
        except TypeError:  # pragma: no cover - a tensor subclass without weak references
            pass

    def _forget(self, key: int, ref: weakref.ref[torch.Tensor]) -> None:
        if self._device.get(key) is ref:
            del self._device[key]

    def mark_all(self, objs: Iterable[Any]) -> None:
        """Mark every tensor in ``objs`` (tensors, lists, tuples, dicts of them)."""
        for obj in objs:
            for t in _tensors(obj):
                self.mark(t)

    def mark_module(self, module: torch.nn.Module) -> None:
        """Mark a model's parameters and buffers."""
        self.mark_all(module.parameters())
        self.mark_all(module.buffers())

    # -- windows ------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._mode is not None

    def start(self) -> None:
        """Open a window: one training step (idempotent while open)."""
        if self._mode is not None:
            return
        self.windows += 1
        self._step += 1
        self._mode = _ReadMode(self)
        self._mode.__enter__()

    def stop(self) -> None:
        """Close the window (idempotent). A mode pushed after ours and still open is an error to report."""
        mode, self._mode = self._mode, None
        if mode is None:
            return
        try:
            mode.__exit__(None, None, None)
        except Exception as err:  # another torch-function mode entered inside the window and still open
            self.error = f"could not close the host-read window cleanly: {type(err).__name__}: {err}"

    @contextmanager
    def window(self) -> Iterator[HostReadCounter]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside (a monitor's own reads are not the run's); device values are still tracked."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _record(self, what: str, frame: Any, name: str = "") -> None:
        if self._paused:
            return
        site = classify_sync_frame(frame)
        if name:
            site = site._replace(kind=f"self.log({name!r}, ..., sync_dist=True)")
        if site.owner == "lightning":
            site = _lightning_setting(frame) or site
        read = HostRead(site, what, _via(frame) if site.owner == "user" else "")
        self.reads[read] += 1
        self.steps_of.setdefault(read, set()).add(self._step)

    # -- Lightning's per-step collectives ---------------------------------------------------------
    @contextmanager
    def watching_log(self, module: Any) -> Iterator[None]:
        """While open, each ``module.log(..., sync_dist=True)`` of a per-step value is counted at the user's
        line: an all-reduce (and a barrier) per step under DDP / FSDP, which one device never runs."""
        real = module.log

        def log(name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("sync_dist") and kwargs.get("on_step") in (None, True) and self._mode is not None:
                self._record(_SYNC_DIST, sys._getframe(1), name)
            return real(name, value, *args, **kwargs)

        module.__dict__["log"] = log
        try:
            yield
        finally:
            if module.__dict__.get("log") is log:
                del module.__dict__["log"]

    # -- results ------------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return sum(n for r, n in self.reads.items() if r.what != _SYNC_DIST)

    def count(self, owner: str) -> int:
        return sum(n for r, n in self.reads.items() if r.site.owner == owner and r.what != _SYNC_DIST)

    @property
    def user_reads(self) -> int:
        return self.count("user")

    def rows(self) -> list[tuple[HostRead, int, int]]:
        """``(read, times, steps it ran in)``, the busiest first."""
        out = [(r, n, len(self.steps_of.get(r, ()))) for r, n in self.reads.items()]
        return sorted(out, key=lambda x: (-x[2], -x[1], x[0].site.location))

    def at(self, path: str, line: int) -> tuple[int, int]:
        """``(reads, steps)`` made at ``path:line`` by any frame attributed there."""
        want = os.path.normcase(os.path.realpath(path))
        reads, steps = 0, set()
        for r, n in self.reads.items():
            loc = r.site.location.rsplit(" in ", 1)[0]
            file, _, num = loc.rpartition(":")
            if num.isdigit() and int(num) == line and os.path.normcase(os.path.realpath(file)) == want:
                reads += n
                steps |= self.steps_of.get(r, set())
        return reads, len(steps)

    def summary(self) -> str:
        """One line: totals and the busiest sites."""
        steps = max(self.windows, 1)
        head = (
            f"{self.total} host reads of device values in {self.windows} training steps"
            f" ({self.total / steps:.1f} per step; each would synchronise with a GPU)"
        )
        rows = self.rows()
        if not rows:
            return head
        top = "; ".join(f"{_describe(r)}: {n} in {s} of {self.windows} steps" for r, n, s in rows[:5])
        more = f"; and {len(rows) - 5} more" if len(rows) > 5 else ""
        return f"{head}: {top}{more}"

    def table(self) -> list[str]:
        """The reads as a Markdown table (the doctor's run-time view)."""
        lines = ["| where | read | owner | times | steps |", "|---|---|---|---|---|"]
        for r, n, s in self.rows():
            where = (
                r.site.location + (f" `{r.site.code}`" if r.site.code else "") + (f" (via {r.via})" if r.via else "")
            )
            owner = r.site.owner if r.site.owner != "lightning" else f"lightning: {r.site.kind}"
            lines.append(f"| {where} | {r.what} | {owner} | {n} | {s} of {self.windows} |")
        return lines

    def findings(self) -> list[dict[str, Any]]:
        """One finding per place in the user's code or a library (Lightning's own reads are named, not findings)."""
        out = []
        for r, n, s in self.rows():
            if r.site.owner in ("lightning", "debug"):
                continue
            every = s >= self.windows
            if r.what == _SYNC_DIST:
                out.append(
                    {
                        "tip": "T08",
                        "slug": "no-sync",
                        "severity": "low",
                        "evidence": f"{r.site.kind} every step at {r.site.location} (ran in {s} of {self.windows}"
                        " training steps): an all-reduce and a barrier per step under DDP / FSDP (one device"
                        " skips it)",
                        "fix": "log the per-step value without sync_dist (each rank's own), or with on_step=False,"
                        " on_epoch=True so it is reduced once per epoch",
                        "owner": r.site.owner,
                        "location": r.site.location,
                    }
                )
                continue
            out.append(
                {
                    "tip": "T08",
                    "slug": "no-sync",
                    "severity": "medium" if every else "low",
                    "evidence": f"{n} host read{'s' if n != 1 else ''} in {s} of {self.windows} training steps"
                    f" ({r.what})"
                    f" at {r.site.describe()}"
                    + (f" via {r.via}" if r.via else "")
                    + ("" if every else ": not every step"),
                    "fix": "keep the value on the device (log tensors, not .item()/.cpu()/print; accumulate with"
                    " .detach()), or read it every N steps",
                    "owner": r.site.owner,
                    "location": r.site.location,
                }
            )
        return out


def _via(frame: Any) -> str:
    """The first user frame in another file on the way out (a helper's caller), as ``path:line in name``."""
    first: Optional[str] = None
    f = frame
    while f is not None:
        file = f.f_code.co_filename
        if _file_class(file)[0] == "user":
            if first is None:
                first = file
            elif file != first:
                return f"{short_path(file)}:{f.f_lineno} in {f.f_code.co_name}"
        f = f.f_back
    return ""


def _lightning_setting(frame: Any) -> Optional[SyncSite]:
    """Lightning's own read, named by the setting that causes it (``None``: not one we know)."""
    f = frame
    while f is not None:
        code, file = f.f_code, os.path.basename(f.f_code.co_filename)
        if code.co_name == "metrics" and file == "result.py" and "forked_name" in f.f_locals:
            name = f.f_locals.get("forked_name")
            return SyncSite(
                "lightning",
                f"self.log({name!r}, ..., prog_bar=True): Lightning converts the value to a number every step"
                " for the progress bar (log it with prog_bar=False, or on_step=False)",
                "progress bar",
            )
        if code.co_name == "log_metrics" and file == "logger_connector.py":
            every = getattr(getattr(f.f_locals.get("self"), "trainer", None), "log_every_n_steps", None)
            return SyncSite(
                "lightning",
                "values logged on_step, converted for the logger every log_every_n_steps"
                + (f" (={every})" if every is not None else ""),
                "logger",
            )
        if file in ("model_checkpoint.py", "early_stopping.py") and code.co_name.startswith("_"):
            return SyncSite("lightning", "the monitored value read by ModelCheckpoint / EarlyStopping", file)
        f = f.f_back
    return None


def _describe(read: HostRead) -> str:
    via = f" via {read.via}" if read.via else ""
    return f"{read.site.describe()}{via} ({read.what})"


@contextmanager
def count_host_reads(*device_values: Any) -> Iterator[HostReadCounter]:
    """Count the host reads of one block of code; ``device_values`` are modules or tensors on the device.

    Examples:
        >>> import torch
        >>> model = torch.nn.Linear(2, 1)
        >>> with count_host_reads(model) as reads:
        ...     loss = model(torch.ones(3, 2)).mean()
        ...     print(f"{loss.item():.0f}" if loss.abs() > 1e6 else "small")
        small
        >>> sorted(r.what for r in reads.reads)
        ['a tensor as a condition (bool(t), if/while/and/or)']
    """
    counter = HostReadCounter()
    for v in device_values:
        if isinstance(v, torch.nn.Module):
            counter.mark_module(v)
        else:
            counter.mark_all([v])
    with counter.window():
        yield counter
