"""What one bench run measures (:class:`BenchProbe`); summaries and intervals are in :mod:`~lightning_speedups.bench.stats`,
time to a target in :mod:`~lightning_speedups.bench.target`.

Per run (one process, one variant, one repeat):

* ``warmup`` batches first (compilation, cuDNN autotuning, worker start-up happen there); their
  cost is reported apart: ``warmup_s`` is the time from ``trainer.fit`` to the end of the last
  warm-up batch, ``warmup_excess_s`` that minus ``warmup`` ordinary steps (the one-off cost).
* ``steps`` timed batches: each step's time runs from the end of the previous batch to the end of
  this one, so it holds the wait for the batch (loading, transfer) and the compute. The wait
  (end of the previous batch to ``on_train_batch_start``) over the step time is the data-wait
  share. On CUDA the batch boundaries are CUDA events, read after one synchronisation at the end of
  the timed window (no sync per batch, so asynchronous copies and launches keep overlapping).
* the loss of every timed batch; the sanity figure is the mean of the last five.
* memory, in the figure each device measures best:

  - ``train_mem_bytes`` (the memory ratio uses this one): on CUDA, the peak allocated during the
    timed steps above what was allocated when they started; on CPU, the peak of live bytes of the
    CPU allocator during one extra profiled batch after the timed ones, above what was live when it
    started (``torch.profiler`` with ``profile_memory=True``: exact allocator accounting, blind to
    the C library's caching and to other processes). Parameters, optimizer state and the data set
    are not in it; activations, gradients and temporaries are, which is what checkpointing and
    16-bit activations change.
  - ``peak_rss_bytes`` / ``rss_train_bytes`` (CPU): the peak resident memory of the process during
    the steps (the kernel's high-water mark, reset before the first batch) and that peak above the
    resident memory right before the first batch. Coarser: freed memory stays resident.
  - ``cuda_peak_bytes``: ``torch.cuda.max_memory_allocated`` during the timed steps.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping
from typing import Any, Optional

from lightning.pytorch.callbacks import Callback

from lightning_speedups.errors import SettingError
from lightning_speedups.functional.timing import Timeline

SANITY_WINDOW = 5


# ------------------------------------------------------------------------------------- memory


def rss_bytes() -> Optional[int]:
    """Resident memory of this process now (Linux ``/proc``; ``None`` elsewhere)."""
    return _status_field("VmRSS")


def peak_rss_bytes() -> Optional[int]:
    """High-water mark of the resident memory (``VmHWM``, or ``ru_maxrss`` where ``/proc`` is absent)."""
    value = _status_field("VmHWM")
    if value is not None:
        return value
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)
    except (ImportError, OSError):  # no `resource` module (Windows): peak host memory unknown
        return None


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark of the resident memory (Linux >= 4.0); ``False`` if not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _status_field(name: str) -> Optional[int]:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class CpuAllocationPeak:
    """Peak live bytes of the CPU allocator between :meth:`start` and :meth:`stop` (``torch.profiler``)."""

    def __init__(self) -> None:
        self._prof: Any = None
        self.peak: Optional[int] = None
        self.error: Optional[str] = None

    def start(self) -> None:
        try:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        except Exception as err:
            self._prof = None
            self.error = f"{type(err).__name__}: {err}"

    def stop(self) -> Optional[int]:
        if self._prof is None:
            return None
        try:
            self._prof.__exit__(None, None, None)
            events = [e for e in self._prof.profiler.kineto_results.events() if e.name() == "[memory]"]
            events.sort(key=lambda e: e.start_ns())
            live = peak = 0
            for e in events:
                if getattr(e.device_type(), "name", "CPU") != "CPU":
                    continue
                live += e.nbytes()
                peak = max(peak, live)
            self.peak = peak
        except Exception as err:
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self._prof = None
        return self.peak


# ------------------------------------------------------------------------------------- the probe


def _loss_of(outputs: Any) -> Any:
    if outputs is None:
        return None
    if isinstance(outputs, Mapping):
        outputs = outputs.get("loss")
    import torch

    if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
        return outputs.detach()
    if isinstance(outputs, (int, float)):
        return float(outputs)
    return None


class BenchProbe(Callback):
    """Times a training run batch by batch and stops it after ``warmup + steps`` (+1 memory) batches.

    Args:
        warmup: batches before the timed ones.
        steps: timed batches.
        memory_step: on CPU, profile one more batch for the allocator's peak (see the module doc).

    The figures are in :meth:`results` once ``fit`` has returned.
    """

    def __init__(self, warmup: int, steps: int, memory_step: bool = True) -> None:
        super().__init__()
        if warmup < 0 or steps < 1:
            raise SettingError(f"`warmup` must be >= 0 and `steps` >= 1, got {warmup} and {steps}.")
        self.warmup = warmup
        self.steps = steps
        self.memory_step = memory_step
        self.t_fit: Optional[float] = None
        self.t_train_start: Optional[float] = None
        self.t_warm_end: Optional[float] = None
        self.batches = 0
        self.step_times: list[float] = []
        self.wait_times: list[float] = []
        self.samples: list[Optional[int]] = []
        self._losses: list[Any] = []
        self._prev_end: Any = None  # the mark at the end of the previous batch
        self._start: Any = None  # the mark at the start of the current timed batch
        self._window: list[tuple[Any, Any, Any]] = []  # (previous end, start, end) of each timed batch
        self._cuda = False
        self._device: Any = None
        self._timeline = Timeline()
        self.rss_before: Optional[int] = None
        self.peak_rss: Optional[int] = None
        self.hwm_reset = False
        self.cuda_base: Optional[int] = None
        self.cuda_peak: Optional[int] = None
        self.cpu_peak: Optional[int] = None
        self.mem_error: Optional[str] = None
        self._alloc: Optional[CpuAllocationPeak] = None
        self.done = False
        self._frozen = False  # the objects of the warm-up moved out of the collector's reach (:meth:`_settle`)

    # --- time: marks on the run's timeline (functional.timing.Timeline, the timer the start-up probe uses too)
    def _mark(self) -> Any:
        """A point on the run's timeline: on CUDA an event recorded on the current stream (no sync, so the
        overlap that pinned memory, ``non_blocking`` copies and asynchronous launches buy stays visible);
        elsewhere the host clock."""
        return self._timeline.mark()

    def _settle(self) -> None:
        """At the end of the warm-up: a full garbage collection, then every object alive moved to the permanent
        generation (``gc.freeze``), so no full collection over the process's million objects (torch, Lightning and
        their imports) lands inside the timed window. One did, in some variants and not others: a 250 ms pause at
        one timed step made a baseline's samples/s 4.5x lower than a variant whose own allocations had triggered
        it during the warm-up (T16 on the embedded digits model; benchmarks/RESULTS.md)."""
        if self._frozen:
            return
        gc.collect()
        gc.freeze()
        self._frozen = True

    def _unsettle(self) -> None:
        """Give the frozen objects back to the collector (a script goes on after the timed fit)."""
        if self._frozen:
            gc.unfreeze()
            self._frozen = False

    def _reset_cuda_peak(self) -> None:
        import torch

        torch.cuda.synchronize(self._device)  # once, outside the timed window
        torch.cuda.reset_peak_memory_stats(self._device)
        self.cuda_base = torch.cuda.memory_allocated(self._device)

    def _close_window(self) -> None:
        """Turn the timed window's marks into step and wait times (on CUDA: one sync for the whole window)."""
        self._timeline.sync()
        for prev_end, start, end in self._window:
            self.wait_times.append(self._timeline.seconds(prev_end, start))
            self.step_times.append(self._timeline.seconds(prev_end, end))
        self._window = []

    @property
    def total_batches(self) -> int:
        return self.warmup + self.steps + (1 if self._memory_batch else 0)

    @property
    def _memory_batch(self) -> bool:
        return self.memory_step and not self._cuda

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.t_fit is None:
            self.t_fit = time.perf_counter()
        self._cuda = pl_module.device.type == "cuda"
        self._device = pl_module.device
        self._timeline = Timeline(pl_module.device)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.t_train_start = time.perf_counter()
        if self.warmup == 0:
            self._settle()
            if self._cuda:
                self._reset_cuda_peak()
        self._prev_end = self._mark()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        n = self.batches
        if n == 0:
            self.rss_before = rss_bytes()
            self.hwm_reset = reset_peak_rss()
        if self.warmup <= n < self.warmup + self.steps:
            self._start = self._mark()
            self.samples.append(batch_size_of(batch))
        if n == self.warmup + self.steps and self._memory_batch:
            self._alloc = CpuAllocationPeak()
            self._alloc.start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        n = self.batches
        if self.warmup <= n < self.warmup + self.steps:
            end = self._mark()
            self._window.append((self._prev_end, self._start, end))
            self._losses.append(_loss_of(outputs))
            self._prev_end = end
        if n == self.warmup - 1:
            self.t_warm_end = time.perf_counter()
            self._settle()
            if self._cuda:
                self._reset_cuda_peak()
        if n == self.warmup + self.steps - 1:
            self._close_window()
            self.peak_rss = peak_rss_bytes()
            if self._cuda:
                import torch

                self.cuda_peak = torch.cuda.max_memory_allocated(self._device)
        if self._alloc is not None and n == self.warmup + self.steps:
            self.cpu_peak = self._alloc.stop()
            self.mem_error = self._alloc.error
            self._alloc = None
        self.batches += 1
        if not self.warmup <= n < self.warmup + self.steps:
            self._prev_end = self._mark()
        if self.batches >= self.total_batches:
            self.done = True
            trainer.should_stop = True

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._unsettle()
        if self._alloc is not None:
            self._alloc.stop()
            self._alloc = None

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._unsettle()

    # --- results
    def losses(self) -> list[Optional[float]]:
        out: list[Optional[float]] = []
        for loss in self._losses:
            try:
                out.append(None if loss is None else float(loss))
            except (TypeError, ValueError, RuntimeError):  # not a number (a tensor of several values): no loss
                out.append(None)
        return out

    def results(self) -> dict[str, Any]:
        """The raw figures of this run (all times in seconds, memory in bytes)."""
        steps = list(self.step_times)
        timed = sum(steps)
        known = [s for s in self.samples if s is not None]
        samples = sum(known) if len(known) == len(self.samples) and known else None
        median_step = statistics.median(steps) if steps else None
        losses = self.losses()
        tail = [x for x in losses[-SANITY_WINDOW:] if x is not None]
        warmup_s = None
        if self.t_fit is not None:
            end = self.t_warm_end if self.warmup > 0 else self.t_train_start
            warmup_s = None if end is None else end - self.t_fit
        train_mem = None
        mem_source = None
        if self.cuda_peak is not None and self.cuda_base is not None:
            train_mem, mem_source = (
                self.cuda_peak - self.cuda_base,
                "cuda peak allocated above the start of the timed steps",
            )
        elif self.cpu_peak is not None:
            train_mem, mem_source = self.cpu_peak, "cpu allocator peak during one profiled batch"
        elif self.peak_rss is not None and self.rss_before is not None and self.hwm_reset:
            train_mem, mem_source = self.peak_rss - self.rss_before, "peak rss above the rss before the first batch"
        return {
            "completed": self.done,
            "batches": self.batches,
            "step_times": steps,
            "wait_times": list(self.wait_times),
            "samples": list(self.samples),
            "losses": losses,
            "timed_s": timed,
            "step_s": median_step,
            "samples_per_s": (samples / timed) if samples and timed > 0 else None,
            "steps_per_s": (len(steps) / timed) if steps and timed > 0 else None,
            "data_wait_fraction": (sum(self.wait_times) / timed) if timed > 0 else None,
            "loss": statistics.fmean(tail) if tail else None,
            "warmup_s": warmup_s,
            "setup_s": (self.t_train_start - self.t_fit) if self.t_train_start and self.t_fit else None,
            "warmup_excess_s": (warmup_s - self.warmup * median_step)
            if warmup_s is not None and median_step
            else warmup_s,
            "train_mem_bytes": train_mem,
            "mem_source": mem_source,
            "mem_error": self.mem_error,
            "rss_before_bytes": self.rss_before,
            "peak_rss_bytes": self.peak_rss if self.hwm_reset else None,
            "rss_train_bytes": (self.peak_rss - self.rss_before)
            if self.hwm_reset and self.peak_rss is not None and self.rss_before is not None
            else None,
            "cuda_peak_bytes": self.cuda_peak,
            "batch_size": self.samples[0] if self.samples else None,
        }


def batch_size_of(batch: Any) -> Optional[int]:
    try:
        import warnings

        from lightning.fabric.utilities.exceptions import MisconfigurationException
        from lightning.pytorch.utilities.data import extract_batch_size

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return int(extract_batch_size(batch))
    except (MisconfigurationException, TypeError, ValueError):  # no tensor in the batch to count samples by
        return None
