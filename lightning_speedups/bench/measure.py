"""What one bench run measures (:class:`BenchProbe`), and how runs are summarised per variant.

Per run (one process, one variant, one repeat):

* ``warmup`` batches first (compilation, cuDNN autotuning, worker start-up happen there); their
  cost is reported apart: ``warmup_s`` is the time from ``trainer.fit`` to the end of the last
  warm-up batch, ``warmup_excess_s`` that minus ``warmup`` ordinary steps (the one-off cost).
* ``steps`` timed batches: each step's time runs from the end of the previous batch to the end of
  this one, so it holds the wait for the batch (loading, transfer) and the compute. The wait
  (end of the previous batch to ``on_train_batch_start``) over the step time is the data-wait
  share. On CUDA the probe synchronises at the batch boundaries (the same for every variant).
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

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning.pytorch.callbacks import Callback

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
    except Exception:
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
    try:
        import torch

        if isinstance(outputs, torch.Tensor) and outputs.numel() == 1:
            return outputs.detach()
    except Exception:
        pass
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
            raise ValueError(f"`warmup` must be >= 0 and `steps` >= 1, got {warmup} and {steps}.")
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
        self.rss_before: Optional[int] = None
        self.peak_rss: Optional[int] = None
        self.hwm_reset = False
        self.cuda_base: Optional[int] = None
        self.cuda_peak: Optional[int] = None
        self.cpu_peak: Optional[int] = None
        self.mem_error: Optional[str] = None
        self._alloc: Optional[CpuAllocationPeak] = None
        self.done = False

    # --- time
    def _mark(self) -> Any:
        """A point on the run's timeline: on CUDA an event recorded on the current stream (no sync, so the
        overlap that pinned memory, ``non_blocking`` copies and asynchronous launches buy stays visible);
        elsewhere the host clock."""
        if self._cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    @staticmethod
    def _seconds(a: Any, b: Any) -> float:
        """Seconds from mark ``a`` to mark ``b`` (CUDA events: once both have completed)."""
        if isinstance(a, float):
            return b - a
        return float(a.elapsed_time(b)) / 1000.0

    def _reset_cuda_peak(self) -> None:
        import torch

        torch.cuda.synchronize(self._device)  # once, outside the timed window
        torch.cuda.reset_peak_memory_stats(self._device)
        self.cuda_base = torch.cuda.memory_allocated(self._device)

    def _close_window(self) -> None:
        """Turn the timed window's marks into step and wait times (on CUDA: one sync for the whole window)."""
        if self._cuda:
            import torch

            torch.cuda.synchronize(self._device)
        for prev_end, start, end in self._window:
            self.wait_times.append(self._seconds(prev_end, start))
            self.step_times.append(self._seconds(prev_end, end))
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

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.t_train_start = time.perf_counter()
        if self.warmup == 0 and self._cuda:
            self._reset_cuda_peak()
        self._prev_end = self._mark()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        n = self.batches
        if n == 0:
            self.rss_before = rss_bytes()
            self.hwm_reset = reset_peak_rss()
        if self.warmup <= n < self.warmup + self.steps:
            self._start = self._mark()
            self.samples.append(_batch_size(batch))
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
        if self._alloc is not None:
            self._alloc.stop()
            self._alloc = None

    # --- results
    def losses(self) -> list[Optional[float]]:
        out: list[Optional[float]] = []
        for loss in self._losses:
            try:
                out.append(None if loss is None else float(loss))
            except Exception:
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
            train_mem, mem_source = self.cuda_peak - self.cuda_base, "cuda peak allocated above the start of the timed steps"
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
            "warmup_excess_s": (warmup_s - self.warmup * median_step) if warmup_s is not None and median_step else warmup_s,
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


def _batch_size(batch: Any) -> Optional[int]:
    try:
        import warnings

        from lightning.pytorch.utilities.data import extract_batch_size

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return int(extract_batch_size(batch))
    except Exception:
        return None


# ------------------------------------------------------------------------------------- summaries


@dataclass
class Spread:
    """Median and range of one figure over repeats."""

    median: Optional[float]
    low: Optional[float]
    high: Optional[float]
    values: list[float] = field(default_factory=list)

    @property
    def pct(self) -> Optional[float]:
        """Half the range as a percentage of the median (``±x%``)."""
        if self.median in (None, 0) or self.low is None or self.high is None:
            return None
        return 100.0 * (self.high - self.low) / (2.0 * abs(self.median))  # type: ignore[arg-type]

    @classmethod
    def of(cls, values: Sequence[Optional[float]]) -> Spread:
        vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not vals:
            return cls(None, None, None, [])
        return cls(statistics.median(vals), min(vals), max(vals), vals)

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high, "spread_pct": self.pct, "values": self.values}


def sanity_check(loss: Optional[float], baseline_loss: Optional[float], tolerance: float) -> tuple[bool, str]:
    """Whether a variant's loss after the timed steps is finite and close to the baseline's.

    ``tolerance`` is relative to the baseline's loss (with a floor of 0.05 absolute, so a loss
    near zero does not turn noise into a failure).

    Example:
        >>> sanity_check(2.10, 2.00, 0.25)
        (True, 'loss 2.1 vs baseline 2 (+5.0%)')
        >>> sanity_check(float("nan"), 2.0, 0.25)[0]
        False
    """
    if loss is None:
        return True, "no loss to compare (training_step returned none)"
    if not math.isfinite(loss):
        return False, f"loss is {loss}"
    if baseline_loss is None or not math.isfinite(baseline_loss):
        return True, f"loss {loss:.4g} (no baseline loss to compare)"
    diff = loss - baseline_loss
    limit = max(tolerance * abs(baseline_loss), 0.05)
    rel = f"{100.0 * diff / abs(baseline_loss):+.1f}%" if baseline_loss else f"{diff:+.3g}"
    text = f"loss {loss:.4g} vs baseline {baseline_loss:.4g} ({rel})"
    if abs(diff) > limit:
        return False, text + f": further than the tolerance {tolerance:.0%}"
    return True, text


@dataclass
class VariantSummary:
    """The figures of one variant over its repeats, and how they compare with the baseline."""

    runs_ok: int
    runs_failed: int
    samples_per_s: Spread
    step_s: Spread
    data_wait: Spread
    warmup_s: Spread
    warmup_excess_s: Spread
    train_mem: Spread
    peak_rss: Spread
    cuda_peak: Spread
    loss: Spread
    speedup: Optional[float] = None
    speedup_range: tuple[Optional[float], Optional[float]] = (None, None)
    speedup_ci: tuple[Optional[float], Optional[float]] = (None, None)
    mem_ratio: Optional[float] = None
    sane: bool = True
    sanity: str = ""
    failure: Optional[str] = None
    target_time: Spread = field(default_factory=lambda: Spread(None, None, None))
    target_steps: Spread = field(default_factory=lambda: Spread(None, None, None))
    target_reached: int = 0
    target_missed: int = 0
    picked_why: str = ""

    @classmethod
    def empty(cls) -> VariantSummary:
        """A summary with no figures (tests fill in what they need)."""
        none = Spread(None, None, None)
        return cls(1, 0, none, none, none, none, none, none, none, none, none)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs_ok": self.runs_ok, "runs_failed": self.runs_failed}
        for name in ("samples_per_s", "step_s", "data_wait", "warmup_s", "warmup_excess_s", "train_mem", "peak_rss", "cuda_peak", "loss"):
            out[name] = getattr(self, name).to_dict()
        out.update(
            speedup=self.speedup,
            speedup_min=self.speedup_range[0],
            speedup_max=self.speedup_range[1],
            speedup_ci95=list(self.speedup_ci),
            target_time_s=self.target_time.to_dict(),
            target_steps=self.target_steps.to_dict(),
            target_reached=self.target_reached,
            target_missed=self.target_missed,
            picked_why=self.picked_why,
            mem_ratio=self.mem_ratio,
            sane=self.sane,
            sanity=self.sanity,
            failure=self.failure,
        )
        return out


def _rate(run: Mapping[str, Any]) -> Optional[float]:
    return run.get("samples_per_s") or run.get("steps_per_s")


def summarize(runs: Sequence[Mapping[str, Any]]) -> VariantSummary:
    """Summarise the raw results of one variant's runs (failed runs are counted, not averaged)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    failed = [r for r in runs if r.get("status") != "ok"]
    s = VariantSummary(
        runs_ok=len(ok),
        runs_failed=len(failed),
        samples_per_s=Spread.of([_rate(r) for r in ok]),
        step_s=Spread.of([r.get("step_s") for r in ok]),
        data_wait=Spread.of([r.get("data_wait_fraction") for r in ok]),
        warmup_s=Spread.of([r.get("warmup_s") for r in ok]),
        warmup_excess_s=Spread.of([r.get("warmup_excess_s") for r in ok]),
        train_mem=Spread.of([r.get("train_mem_bytes") for r in ok]),
        peak_rss=Spread.of([r.get("peak_rss_bytes") for r in ok]),
        cuda_peak=Spread.of([r.get("cuda_peak_bytes") for r in ok]),
        loss=Spread.of([r.get("loss") for r in ok]),
    )
    if any("reached" in r for r in ok):
        s.target_time = Spread.of([r.get("time_to_target_s") for r in ok if r.get("reached")])
        s.target_steps = Spread.of([r.get("steps_to_target") for r in ok if r.get("reached")])
        s.target_reached = sum(1 for r in ok if r.get("reached"))
        s.target_missed = len(ok) - s.target_reached
    if failed and not ok:
        s.failure = str(failed[0].get("reason") or "failed")
        s.sane = False
        s.sanity = "no run completed"
    elif any(r.get("loss") is not None and not math.isfinite(float(r["loss"])) for r in ok):
        s.sane = False
        s.sanity = "a run ended with a non-finite loss"
    return s


def _time_to_target(run: Mapping[str, Any]) -> Optional[float]:
    return run.get("time_to_target_s") if run.get("reached") else None


def compare_target(summary: VariantSummary, runs: Sequence[Mapping[str, Any]], baseline: VariantSummary,
                   baseline_runs: Sequence[Mapping[str, Any]]) -> None:
    """Time-to-target mode: the speed-up is the baseline's median time to the target over the
    variant's, with a 95% interval from the repeats paired by seed; a miss leaves no ratio."""
    if summary.target_missed or not summary.target_reached or not baseline.target_reached:
        return
    if summary.target_time.median and baseline.target_time.median:
        summary.speedup = baseline.target_time.median / summary.target_time.median
    paired = paired_ratios(runs, baseline_runs, _time_to_target, higher_is_better=False)
    if paired:
        summary.speedup_range = (min(paired), max(paired))
        _, lo, hi = ratio_interval(paired)
        summary.speedup_ci = (lo, hi)


def compare(summary: VariantSummary, runs: Sequence[Mapping[str, Any]], baseline: VariantSummary,
            baseline_runs: Sequence[Mapping[str, Any]], tolerance: float) -> None:
    """Fill in the speed-up, its range over paired repeats, the memory ratio and the sanity verdict."""
    base = baseline.samples_per_s.median
    if summary.samples_per_s.median is not None and base:
        summary.speedup = summary.samples_per_s.median / base
        by_repeat = {r.get("repeat"): _rate(r) for r in baseline_runs if r.get("status") == "ok"}
        paired = [
            _rate(r) / by_repeat[r.get("repeat")]  # type: ignore[operator]
            for r in runs
            if r.get("status") == "ok" and _rate(r) and by_repeat.get(r.get("repeat"))
        ]
        if paired:
            summary.speedup_range = (min(paired), max(paired))
            _, lo, hi = ratio_interval(paired)
            summary.speedup_ci = (lo, hi)
    if summary.train_mem.median is not None and baseline.train_mem.median:
        summary.mem_ratio = summary.train_mem.median / baseline.train_mem.median
    if summary.runs_ok and summary.sane:
        summary.sane, summary.sanity = sanity_check(summary.loss.median, baseline.loss.median, tolerance)


# ------------------------------------------------------------------------------ confidence intervals

#: two-sided 95% quantiles of Student's t, by degrees of freedom (1..30; above: the normal's 1.96)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    """The two-sided 95% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"`dof` must be >= 1, got {dof}")
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def ratio_interval(ratios: Sequence[float]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """``(geometric mean, low, high)``: a 95% confidence interval of a ratio from paired repeats.

    Each repeat pairs a variant with the baseline of the same repeat (same seed, run side by side), so
    the ratios are independent draws; the interval is Student's t on their logarithms, back-transformed
    (a ratio of 2 and one of 0.5 are equally far from 1). One ratio gives no interval (``None``s).

    Example:
        >>> g, lo, hi = ratio_interval([1.10, 1.12, 1.08])
        >>> round(g, 3), round(lo, 3), round(hi, 3)
        (1.1, 1.051, 1.151)
        >>> ratio_interval([1.2])
        (1.2, None, None)
    """
    logs = [math.log(r) for r in ratios if r is not None and r > 0 and math.isfinite(r)]
    if not logs:
        return None, None, None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None, None
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def paired_ratios(
    runs: Sequence[Mapping[str, Any]], baseline_runs: Sequence[Mapping[str, Any]], figure: Callable[[Mapping[str, Any]], Optional[float]],
    higher_is_better: bool = True,
) -> list[float]:
    """Per repeat, the variant's figure over the baseline's of the same repeat (inverted when lower is
    better, so a ratio above 1 is always a gain)."""
    base = {r.get("repeat"): figure(r) for r in baseline_runs if r.get("status") == "ok"}
    out = []
    for r in runs:
        if r.get("status") != "ok":
            continue
        mine, theirs = figure(r), base.get(r.get("repeat"))
        if mine and theirs:
            out.append(mine / theirs if higher_is_better else theirs / mine)
    return out


def noise_floor(aa: Optional[VariantSummary]) -> float:
    """How far from 1.0 an A/A pair (the baseline against itself) landed: the gain noise alone gives."""
    if aa is None or aa.speedup is None:
        return 0.0
    return abs(aa.speedup - 1.0)


def pick_verdict(summary: Optional[VariantSummary], min_gain: float, noise: float = 0.0) -> tuple[bool, str]:
    """Whether a variant may be picked, and why (not): every run completed (and reached the target),
    it passed the sanity check, its confidence interval lies above 1.0, and its gain clears both
    ``min_gain`` and the A/A noise floor.

    Example:
        >>> s = VariantSummary.empty(); s.speedup, s.speedup_ci = 1.05, (1.01, 1.09)
        >>> pick_verdict(s, min_gain=0.02, noise=0.06)
        (False, 'gain 1.05x is within the noise floor (A/A pair off by 6.0%)')
        >>> pick_verdict(s, min_gain=0.02, noise=0.01)
        (True, 'gain 1.05x, 95% CI 1.01-1.09')
    """
    if summary is None or not summary.runs_ok:
        return False, "no run completed"
    if summary.runs_failed:
        return False, f"{summary.runs_failed} run(s) failed"
    if summary.target_missed:
        return False, f"missed the target in {summary.target_missed} of {summary.runs_ok} run(s)"
    if not summary.sane:
        return False, f"failed the sanity check ({summary.sanity})"
    g = summary.speedup
    lo, hi = summary.speedup_ci
    if g is None:
        return False, "no ratio to the baseline"
    if lo is None or hi is None:
        return False, f"gain {g:.2f}x has no confidence interval (one paired repeat; use --repeats 2 or more)"
    if lo <= 1.0:
        return False, f"95% CI {lo:.2f}-{hi:.2f} includes 1.0"
    if g < 1.0 + min_gain:
        return False, f"gain {g:.2f}x is below --min-gain {min_gain:.0%}"
    if g - 1.0 <= noise:
        return False, f"gain {g:.2f}x is within the noise floor (A/A pair off by {100 * noise:.1f}%)"
    return True, f"gain {g:.2f}x, 95% CI {lo:.2f}-{hi:.2f}"


# ------------------------------------------------------------------------------------- time to target

#: metric-name fragments that mean "lower is better"
LOWER_IS_BETTER = ("loss", "err", "perplexity", "ppl", "mse", "mae", "rmse", "nll", "time", "wer", "cer")


@dataclass(frozen=True)
class Target:
    """A goal: ``metric`` reaching ``value`` (``mode="max"``: at least, ``"min"``: at most)."""

    metric: str
    value: float
    mode: str

    def reached(self, value: Optional[float]) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return value >= self.value if self.mode == "max" else value <= self.value

    def text(self) -> str:
        return f"{self.metric} {'>=' if self.mode == 'max' else '<='} {self.value:g}"


def infer_mode(metric: str) -> str:
    """``"min"`` for a name that reads like a loss or an error, else ``"max"`` (accuracy, F1, ...).

    Example:
        >>> infer_mode("val_acc"), infer_mode("val_loss"), infer_mode("valid/perplexity")
        ('max', 'min', 'min')
    """
    low = metric.lower()
    return "min" if any(word in low for word in LOWER_IS_BETTER) else "max"


def parse_target(text: str, mode: Optional[str] = None) -> Target:
    """``"val_acc=0.90"`` (direction from the name), ``"val_loss<=0.3"`` or ``"val_acc>=0.9"``.

    Raises:
        ValueError: not ``METRIC=VALUE`` / ``METRIC>=VALUE`` / ``METRIC<=VALUE`` with a number.

    Example:
        >>> parse_target("val_acc=0.90")
        Target(metric='val_acc', value=0.9, mode='max')
        >>> parse_target("val_loss<=0.35").mode
        'min'
    """
    given = None
    for op, m in ((">=", "max"), ("<=", "min"), ("=", None)):
        if op in text:
            name, _, value = text.partition(op)
            given = m
            break
    else:
        raise ValueError(f"--target {text!r}: write METRIC=VALUE, e.g. val_acc=0.90 (or val_loss<=0.3).")
    name = name.strip()
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--target {text!r}: {value.strip()!r} is not a number.") from None
    if not name or not math.isfinite(number):
        raise ValueError(f"--target {text!r}: write METRIC=VALUE, e.g. val_acc=0.90.")
    if mode is not None and given is not None and mode != given:
        raise ValueError(f"--target {text!r} says {given} but --target-mode says {mode}.")
    return Target(name, number, given or mode or infer_mode(name))


class TargetProbe(Callback):
    """Trains until a logged metric reaches a target, read at every validation; times it.

    The training clock runs from ``fit`` start (so a range test at the start counts) and stops during
    validation (the check is the instrument, not the training). It stops the run when the target is
    reached, or when the training clock passes ``max_time``.

    Args:
        target: the goal.
        max_time: seconds of training after which the run gives up (a miss).
        clock: seconds (tests pass a fake one).
    """

    def __init__(self, target: Target, max_time: float = math.inf, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.target = target
        self.max_time = max_time
        self._clock = clock
        self.t_fit: Optional[float] = None
        self._val_start: Optional[float] = None
        self.val_s = 0.0
        self.checks: list[dict[str, Any]] = []
        self.reached_at: Optional[dict[str, Any]] = None
        self.timed_out = False
        self.samples = 0
        self.batch_size: Optional[int] = None

    def train_s(self) -> float:
        if self.t_fit is None:
            return 0.0
        running = self._clock() - self._val_start if self._val_start is not None else 0.0
        return self._clock() - self.t_fit - self.val_s - running

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.t_fit is None:
            self.t_fit = self._clock()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        n = _batch_size(batch)
        if n is not None:
            self.samples += n
            self.batch_size = n
        if self.reached_at is None and self.train_s() > self.max_time:
            self.timed_out = True
            trainer.should_stop = True

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._val_start = self._clock()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or self._val_start is None:
            return
        self.val_s += self._clock() - self._val_start
        self._val_start = None
        raw = trainer.callback_metrics.get(self.target.metric)
        value = None if raw is None else float(raw)
        check = {"step": int(trainer.global_step), "train_s": self.train_s(), "samples": self.samples, "value": value}
        self.checks.append(check)
        if self.reached_at is None and self.target.reached(value):
            self.reached_at = check
            trainer.should_stop = True

    def results(self) -> dict[str, Any]:
        hit = self.reached_at
        seen = [c["value"] for c in self.checks if c["value"] is not None]
        best = (max(seen) if self.target.mode == "max" else min(seen)) if seen else None
        return {
            "target": self.target.text(),
            "reached": hit is not None,
            "time_to_target_s": None if hit is None else hit["train_s"],
            "steps_to_target": None if hit is None else hit["step"],
            "samples_to_target": None if hit is None else hit["samples"],
            "best_value": best,
            "checks": list(self.checks),
            "train_s": self.train_s(),
            "val_s": self.val_s,
            "timed_out": self.timed_out,
            "metric_seen": any(c["value"] is not None for c in self.checks),
            "batch_size": self.batch_size,
        }
