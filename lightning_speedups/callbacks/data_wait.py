"""T02, T19: the share of each training step spent waiting for the next batch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.trainer.attributes import set_at_init


class DataWaitMonitor(SpeedupCallback):
    """Measure how much of each training step waits for the next batch (tips T02, T19).

    Card: tip T02 ``loader-workers``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** Per step, the time from the end of the previous step (or the start of the
      epoch) to the start of this one — fetching the batch from the loader, moving it to the
      device — against the whole step (wait plus compute). Validation that runs in between is
      excluded. Logs ``speedups/data_wait_fraction`` per step, keeps the running figure in
      :attr:`data_wait_fraction`, and at the end of fit says whether the run was input-bound.
    * **Caveats.** Costs two clock reads (or, on CUDA, three event records) per step.

    On CUDA the default (``timer="auto"``) times the *device*: CUDA events recorded at the step
    boundaries, read a step later without synchronising. The wait is then the time the GPU had
    nothing queued between the end of one step and the start of the next. Host time would count a
    GPU-bound step drained by a later ``.item()`` (the progress bar's, a logger's) as data wait and
    call a compute-bound run input-bound. ``timer="host"`` keeps host time; ``sync_cuda=True`` makes
    host time exact at the cost of a synchronisation per step.

    The wait also includes Lightning's per-step bookkeeping after ``on_train_batch_end``
    (logging, checkpoint callbacks that run later in the list), which is small next to a fetch.

    Args:
        log: log ``speedups/data_wait_fraction`` every step.
        warmup_steps: steps left out of the running figure (the first one pays one-off costs).
        input_bound_threshold: the running fraction above which the run counts as input-bound.
        sync_cuda: with ``timer="host"`` (or ``"auto"``), synchronise CUDA at the step boundaries and
            time the host.
        prog_bar: also show the fraction in the progress bar.
        clock: the seconds counter read at the step boundaries (``time.perf_counter``; tests pass a fake).
        timer: ``"auto"`` (CUDA events on a CUDA device unless ``sync_cuda``, else the host clock),
            ``"host"`` or ``"cuda_events"``.
        event_factory: makes one timing event (``torch.cuda.Event(enable_timing=True)``; tests pass a fake
            with ``record()``, ``query()``, ``synchronize()`` and ``elapsed_time(other)`` in ms).

    Examples:
        >>> monitor = DataWaitMonitor(log=True)
        >>> monitor.data_wait_fraction is None
        True
    """

    tip = "T02"
    part = "data_wait"

    def __init__(
        self,
        log: bool = True,
        warmup_steps: int = 1,
        input_bound_threshold: float = 0.3,
        sync_cuda: bool = False,
        prog_bar: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        timer: Literal["auto", "host", "cuda_events"] = "auto",
        event_factory: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__()
        if timer not in ("auto", "host", "cuda_events"):
            raise SettingError(f"`timer` must be 'auto', 'host' or 'cuda_events', got {timer!r}.")
        if not isinstance(log, bool):
            raise SettingTypeError(f"`log` must be True or False, got {log!r}.")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise SettingError(f"`warmup_steps` must be an int >= 0, got {warmup_steps!r}.")
        if not 0.0 < float(input_bound_threshold) < 1.0:
            raise SettingError(f"`input_bound_threshold` must be between 0 and 1, got {input_bound_threshold!r}.")
        self.log = log
        self.warmup_steps = warmup_steps
        self.input_bound_threshold = float(input_bound_threshold)
        self.sync_cuda = sync_cuda
        self.prog_bar = prog_bar
        self.clock = clock
        self.timer = timer
        self.event_factory = event_factory
        self.timed_with = "host"
        self._events = False
        self._ev_mark: Any = None
        self._ev_start: Any = None
        self._pending: list[tuple[Any, Any, Any]] = []
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self.steps = 0
        self.last_fraction: float | None = None
        self._seen = 0
        self._mark: float | None = None
        self._start: float | None = None
        self._wait: float = 0.0
        self._excluded = 0.0
        self._val_start: float | None = None
        self._cuda = False
        self._interval_wait = self._interval_step = 0.0

    @property
    def data_wait_fraction(self) -> float | None:
        """Share of step time spent waiting for data over the steps after warm-up (``None`` before)."""
        if self.step_seconds <= 0:
            return None
        return self.wait_seconds / self.step_seconds

    @property
    def input_bound(self) -> bool | None:
        """Whether :attr:`data_wait_fraction` is above ``input_bound_threshold``."""
        f = self.data_wait_fraction
        return None if f is None else f > self.input_bound_threshold

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return self.clock()

    def _record(self) -> Any:
        event = self.event_factory() if self.event_factory is not None else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    @staticmethod
    def _device_type(pl_module: LightningModule) -> str:
        return pl_module.device.type

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        cuda = self._device_type(pl_module) == "cuda"
        self._events = self.timer == "cuda_events" or (self.timer == "auto" and cuda and not self.sync_cuda)
        self._cuda = self.sync_cuda and cuda and not self._events
        self.timed_with = "cuda events" if self._events else ("host, synchronised" if self._cuda else "host")
        self._pending = []
        self._ev_mark = self._ev_start = None
        self.wait_seconds = self.step_seconds = 0.0
        self._interval_wait = self._interval_step = 0.0
        self.steps = self._seen = 0
        self.last_fraction = None

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._events:
            self._ev_mark = self._record()
            return
        self._mark = self._now()
        self._excluded = 0.0

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._events:
            self._ev_start = self._record()
            return
        now = self._now()
        self._start = now
        self._wait = max(0.0, now - self._mark - self._excluded) if self._mark is not None else 0.0
        self._excluded = 0.0

    @override
    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._events:
            end = self._record()
            if self._ev_mark is not None and self._ev_start is not None:
                self._pending.append((self._ev_mark, self._ev_start, end))
            self._ev_mark, self._ev_start = end, None
            self._drain(block=False)
            self._maybe_log(trainer, pl_module)
            return
        now = self._now()
        if self._start is None:
            return
        step = self._wait + (now - self._start)
        self._mark = now
        self._start = None
        self._account(self._wait, step)
        self._maybe_log(trainer, pl_module)

    def _drain(self, block: bool) -> None:
        """Account the steps whose end event the device has passed (all of them with ``block``)."""
        while self._pending:
            mark, start, end = self._pending[0]
            if block:
                end.synchronize()
            elif not end.query():
                return
            self._pending.pop(0)
            wait = max(0.0, mark.elapsed_time(start) / 1000.0)
            step = max(wait, mark.elapsed_time(end) / 1000.0)
            self._account(wait, step)

    def _account(self, wait: float, step: float) -> None:
        self._seen += 1
        if step <= 0:
            return
        self.last_fraction = wait / step
        if self._seen > self.warmup_steps:
            self.wait_seconds += wait
            self.step_seconds += step
            self.steps += 1
        self._interval_wait += wait
        self._interval_step += step

    def _maybe_log(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._interval_step <= 0:
            return
        # self.log costs ~0.5 ms a call: log where Lightning writes logs (every log_every_n_steps), at
        # the end of each epoch, or every step for the progress bar, with the fraction since the last call.
        last = getattr(getattr(trainer.fit_loop.epoch_loop, "batch_progress", None), "is_last_batch", False)
        last = last or (trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps)
        if self.log and (self.prog_bar or last or self._seen % max(set_at_init(trainer).log_every_n_steps, 1) == 0):
            pl_module.log(
                "speedups/data_wait_fraction",
                self._interval_wait / self._interval_step,
                on_step=True,
                on_epoch=False,
                prog_bar=self.prog_bar,
                batch_size=1,
            )
            self._interval_wait = self._interval_step = 0.0

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._val_start = self.clock()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._events:
            if self._ev_mark is not None:  # the device's validation work is not data wait: restart the gap
                self._ev_mark = self._record()
            return
        if self._val_start is not None:
            self._excluded += self.clock() - self._val_start
            self._val_start = None

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._drain(block=True)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._pending = []

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._drain(block=True)
        f = self.data_wait_fraction
        if f is None:
            self.report(False, "no steps measured")
            return
        verdict = (
            f"input-bound: {f:.0%} of step time waited for data over {self.steps} steps (threshold "
            f"{self.input_bound_threshold:.0%}); try LoaderTuning(num_workers='auto'), cheaper per-sample work,"
            " or faster storage"
            if f > self.input_bound_threshold
            else f"not input-bound: {f:.0%} of step time waited for data over {self.steps} steps"
        ) + f" ({self.timed_with})"
        self.report(True, verdict)
        if f > self.input_bound_threshold:  # only a finding is said; "not input-bound" stays in the part's status
            rank_zero_warn(f"DataWaitMonitor: {verdict}.", category=PossibleUserWarning)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_seconds": self.wait_seconds,
            "step_seconds": self.step_seconds,
            "steps": self.steps,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_seconds = float(state_dict.get("wait_seconds", 0.0))
        self.step_seconds = float(state_dict.get("step_seconds", 0.0))
        self.steps = int(state_dict.get("steps", 0))
