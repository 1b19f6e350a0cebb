"""What a training step pays per operation, whatever the op computes: the operations one step runs, and this
device's fixed cost of one operation.

* :class:`OpCounter`: the top-level operator calls (``aten::`` ops not called from inside another one) between
  :meth:`OpCounter.start` and :meth:`OpCounter.stop`, from ``torch.profiler`` on the CPU activity: the forward
  ops, the backward ops (the autograd engine's, on its own threads too) and the optimizer's. It sees what a
  ``TorchDispatchMode`` counter would without changing how the ops run (a compiled region stays compiled: its
  fused kernels are not ``aten::`` calls, so they are not counted).
* :func:`op_fixed_cost`: the seconds one operation costs on ``device`` when it computes nothing: one-element
  tensors through the same path a training step's ops take (recorded for autograd, then run backward), as the
  difference of a long and a short chain, so what a chain pays once (the backward call) drops out. On CUDA it
  is the host's time to launch them (a step that launches faster than the device computes hides it).

``ops x fixed cost`` is then the part of a step that a larger batch does not make longer, and that fusing ops
(``torch.compile``; CUDA graphs on a GPU) removes.

Examples:
    >>> import torch
    >>> x = torch.ones(3)
    >>> counter = OpCounter()
    >>> counter.start()
    >>> y = x.add(1).mul(2)
    >>> counter.stop()
    2
    >>> 0 < op_fixed_cost(repeats=3) < 1e-3
    True
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Optional

import torch

__all__ = ["OpCounter", "count_top_level_ops", "op_fixed_cost"]


def count_top_level_ops(events: Iterable[Any]) -> int:
    """How many of the profiler's ``events`` are ``aten::`` calls with no ``aten::`` call above them (an op that a
    composite op calls inside itself, such as the ``addmm`` of a ``linear``, is part of that op's cost)."""
    n = 0
    for event in events:
        if not str(getattr(event, "name", "")).startswith("aten::"):
            continue
        parent = getattr(event, "cpu_parent", None)
        while parent is not None and not str(parent.name).startswith("aten::"):
            parent = parent.cpu_parent
        n += parent is None
    return n


@contextlib.contextmanager
def _muted_stderr() -> Iterator[None]:
    """Nothing written to the process's stderr inside (some torch builds' profiler prints a line when it starts and
    one when it stops: those are no part of the user's run). Held only around the profiler's own start and stop."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no file descriptor 2 to hold (an embedded interpreter)
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


class OpCounter:
    """The top-level operator calls between :meth:`start` and :meth:`stop` (see the module docstring).

    The profiler slows what runs inside: time nothing in the counted stretch. :meth:`start` raises what the
    profiler raises (another profiler already on, a build without it)."""

    def __init__(self) -> None:
        self._profile: Any = None
        self.count: Optional[int] = None

    @property
    def running(self) -> bool:
        return self._profile is not None

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU])
        with _muted_stderr():
            prof.start()
        self._profile = prof

    def stop(self) -> int:
        """Stop counting; the count (also kept in :attr:`count`)."""
        prof, self._profile = self._profile, None
        if prof is None:
            raise RuntimeError("OpCounter.stop() without start()")
        with _muted_stderr():
            prof.stop()
        self.count = count_top_level_ops(prof.events())
        return self.count

    def discard(self) -> None:
        """Stop without counting (the counted stretch failed)."""
        if self._profile is not None:
            self.stop()
            self.count = None


def _chain(leaf: torch.Tensor, length: int) -> None:
    y = leaf
    for _ in range(length):
        y = torch.mul(y, 1.0)
    y.backward()


def op_fixed_cost(device: Any = None, repeats: int = 20, short: int = 8, long: int = 24) -> float:
    """Seconds per operation that computes nothing on ``device`` (default CPU): the median time of a chain of
    ``long`` one-element multiplications run forward and backward, less that of ``short`` ones, over the
    ``2 * (long - short)`` operations between them (each forward op and its backward op). A few milliseconds in all.

    Examples:
        >>> cost = op_fixed_cost(repeats=5)
        >>> 1e-8 < cost < 1e-3
        True
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    cuda = device.type == "cuda"
    with torch.inference_mode(False), torch.enable_grad():
        leaf = torch.ones(1, device=device, requires_grad=True)
        for _ in range(3):  # warm-up: the first calls allocate and, on a GPU, load kernels
            _chain(leaf, short)
            _chain(leaf, long)
        if cuda:
            torch.cuda.synchronize(device)
        times: dict[int, list[float]] = {short: [], long: []}
        for _ in range(max(1, repeats)):
            for length in (short, long):  # interleaved: a drift of the machine touches both alike
                t0 = time.perf_counter()
                _chain(leaf, length)
                times[length].append(time.perf_counter() - t0)
        if cuda:
            torch.cuda.synchronize(device)
    spread = statistics.median(times[long]) - statistics.median(times[short])
    return max(spread, 0.0) / (2 * (long - short)) or statistics.median(times[long]) / (2 * long)
