"""T01: one-cycle / cyclic learning-rate schedules stepped per optimizer step."""

from __future__ import annotations

import inspect
import math
import re
import time
from collections.abc import Callable
from typing import Any, Literal, Optional, Union

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.callbacks.lr_range_test import RANGE_MAX_LR, RANGE_MIN_LR, RANGE_TEST_MIN_STEPS, run_range_test
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.divergence import DivergenceWatch
from lightning_speedups.functional.lr_range import PEAK_DIVISOR, RangePick, pick_peak_lr, resmooth
from lightning_speedups.functional.snapshot import to_host
from lightning_speedups.trainer.attributes import set_at_init
from lightning_speedups.trainer.namespace import is_lightning
from lightning_speedups.trainer.plan import (
    LIGHTNING_DEFAULT_EPOCHS,
    TIME_PLAN_STEPS,
    parse_plan,
    planned_by_default,
    span_text,
    steps_per_epoch,
    timer_seconds,
)


class _OneCycleThenHold(torch.optim.lr_scheduler.OneCycleLR):
    """OneCycleLR that holds its final learning rate once its planned steps are done.

    A run resumed with a larger ``max_steps`` / ``max_epochs`` trains past the plan; plain OneCycleLR
    would raise "Tried to step N times".
    """

    def step(self, epoch: Optional[int] = None) -> None:
        # step total_steps - 1 is the final lr; torch computes one step past it without raising, with the
        # cosine turned back up, so the hold starts there
        if self.last_epoch >= self.total_steps - 1:
            return
        super().step(epoch)


#: each back-off divides the peak learning rate by this (``back_offs``)
BACK_OFF_FACTOR = 2.0
#: a one-cycle is watched for divergence through its warm-up and while its lr is at least this share of the peak
WATCH_SHARE = 0.25


def _step_loss(outputs: Any) -> Optional[float]:
    """The training loss of one step from ``on_train_batch_end``'s ``outputs`` (``None``: the step returned none)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        return None
    return float(loss.detach().float())


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    defaults = optimizer.defaults
    return "betas" in defaults or defaults.get("momentum", 0) > 0


#: names in an ``optimizer_step`` override's source that mean it sets the learning rate itself
_LR_CODE = re.compile(r"param_groups|\[\s*['\"]lr['\"]\s*\]|lr_scheduler|scheduler|warm_?up")


def own_lr_stepping(pl_module: pl.LightningModule) -> Optional[str]:
    """Where the model sets its optimizer's learning rate itself outside ``configure_optimizers``'s
    schedulers (an ``optimizer_step`` override that warms up or steps a scheduler of its own), or ``None``.

    Read from the override's source; a model whose source cannot be read is caught at the first step
    instead (:meth:`LRSchedule.on_before_optimizer_step`).
    """
    method = type(pl_module).optimizer_step
    if method is pl.LightningModule.optimizer_step:
        return None
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError):
        return None
    body = "\n".join(line.split("#", 1)[0] for line in source.splitlines()[1:])  # not the def line, no comments
    if _LR_CODE.search(body):
        return f"{type(pl_module).__name__}.optimizer_step changes the lr or steps a scheduler"
    return None


class LRSchedule(SpeedupCallback):
    """T01: a one-cycle or cyclic learning-rate schedule with no hand-written ``total_steps``.

    The schedule is built when training starts and stepped once per optimizer step, never per epoch. It
    spans ``plan`` when one is given (steps, epochs or a time), else ``horizon`` of the run's own plan:
    ``trainer.estimated_stepping_batches`` (which counts accumulation, devices, ``max_steps`` and
    ``limit_train_batches``), or the trainer's ``max_time`` converted with the step time of the first
    steps. A run whose length is Lightning's default (no ``max_epochs``, ``max_steps`` or ``max_time``:
    1000 epochs) has no plan to span: the schedule is skipped before any work, with what to set. The
    summary line gives the span in optimizer steps and in epochs. The peak learning rate defaults to the one the optimizer was
    built with; ``max_lr="auto"`` takes it from a learning-rate range test at the start of ``fit``
    (:func:`run_range_test`: ``range_test_steps`` steps from 1e-6 to 1 through the trainer's own fit loop,
    as Lightning's ``LearningRateFinder`` runs them, then the whole training state put back from memory:
    weights, buffers, module modes, plain attributes, optimizer, RNG, loops, loaders; nothing pickled),
    picks the peak a decade below the lowest loss
    (:func:`~lightning_speedups.functional.lr_range.pick_peak_lr`) and prints it. The schedule's
    position survives a resume through this callback's state.

    It decides whether it applies before any work: a model with its own scheduler, one that sets its lr
    in an ``optimizer_step`` override (:func:`own_lr_stepping`), or manual optimization is skipped with
    the reason and no range test runs; a learning rate changed by anything else at run time stops this
    schedule with the reason (the model's own values run).

    What it does: Smith's one-cycle ("super-convergence") and cyclical schedules.

    Card: tip T01 ``lr-schedule``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        name: ``"onecycle"`` or ``"cyclic"``.
        max_lr: peak learning rate (one value for all parameter groups); default: each group's lr.
        pct_start: one-cycle: share of the steps spent warming up.
        div_factor: one-cycle: initial lr = max_lr / div_factor.
        final_div_factor: one-cycle: final lr = initial lr / final_div_factor.
        anneal_strategy: one-cycle: ``"cos"`` or ``"linear"``.
        base_lr: cyclic: lowest lr; default max_lr / div_factor.
        cycles: cyclic: number of full cycles over the run (sets ``step_size_up``).
        mode: cyclic: ``"triangular"``, ``"triangular2"`` or ``"exp_range"``.
        range_test_steps: ``max_lr="auto"``: optimizer steps of the range test.
        horizon: share of the run's optimizer steps the schedule spans; after it, a one-cycle holds its
            final learning rate (below 1: the annealed accuracy arrives sooner, for a time-to-target goal).
        plan: the schedule's span itself (``horizon`` does not apply): optimizer steps (a number or
            ``"N steps"``), ``"N epochs"``, or a time of training (``"10min"``, ``"00:10:00"``; converted
            with the step time of the first :data:`TIME_PLAN_STEPS` steps, at the schedule's starting lr).
            Needed when the trainer has no plan of its own; ``bench --target`` sets it from the steps
            the baseline took to the target.
        peak_divisor: ``max_lr="auto"``: the peak is the range test's lowest-loss lr divided by this (10, the
            default: a decade below it, the classic "min/10"; 2-3 sits near the edge of stability, as Smith's own
            rule does, and diverges on some seeds: pair it with ``back_offs``).
        back_offs: how many times the schedule may back off when the run diverges (0, the default: it is not
            watched). The training loss is watched through the warm-up and while the lr is at least a quarter of
            the peak (:class:`~lightning_speedups.functional.divergence.DivergenceWatch`: non-finite, or smoothed
            above four times its best and above where the cycle began); the weights, buffers and optimizer state
            are copied to the host at the cycle's start and at each epoch's start while watched; on a divergence
            they are put back, the peak is halved and a new cycle spans the steps the plan has left. What backed
            off is said and kept in the checkpoint (a resumed run continues exactly, from checkpoints saved at an
            epoch's end). On one device or DDP; with a sharded strategy (FSDP, DeepSpeed) it is not watched.

    Example::

        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule("onecycle")])
        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule("onecycle", max_lr="auto")])  # range-tested peak
        trainer = Trainer(callbacks=[LRSchedule("onecycle", plan="3 epochs")])  # no max_epochs: the span is given
        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule(max_lr="auto", peak_divisor=2, back_offs=3)])  # bolder
    """

    tip = "T01"
    part = "lr_schedule"

    def __init__(
        self,
        name: Literal["onecycle", "cyclic"] = "onecycle",
        max_lr: Union[float, Literal["auto"], None] = None,
        pct_start: float = 0.25,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        base_lr: Optional[float] = None,
        cycles: int = 2,
        mode: Literal["triangular", "triangular2", "exp_range"] = "triangular",
        range_test_steps: int = 100,
        horizon: float = 1.0,
        plan: Union[int, str, None] = None,
        peak_divisor: float = PEAK_DIVISOR,
        back_offs: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        self._plan = parse_plan(plan)
        if name not in ("onecycle", "cyclic"):
            raise SettingError(f"`name` must be 'onecycle' or 'cyclic'; got {name!r}.")
        if max_lr is not None and max_lr != "auto" and (isinstance(max_lr, str) or max_lr <= 0):
            raise SettingError(
                f"`max_lr` must be positive, None (the optimizer's lr) or 'auto' (an LR range test); got {max_lr!r}."
            )
        if (
            isinstance(range_test_steps, bool)
            or not isinstance(range_test_steps, int)
            or range_test_steps < RANGE_TEST_MIN_STEPS
        ):
            raise SettingError(
                f"`range_test_steps` must be an integer >= {RANGE_TEST_MIN_STEPS}; got {range_test_steps!r}."
            )
        if not 0.0 < horizon <= 1.0:
            raise SettingError(
                f"`horizon` must be in (0, 1], the share of the run the schedule spans; got {horizon!r}."
            )
        if not 0.0 < pct_start < 1.0:
            raise SettingError(f"`pct_start` must be between 0 and 1; got {pct_start!r}.")
        if not isinstance(cycles, int) or cycles < 1:
            raise SettingError(f"`cycles` must be a positive integer; got {cycles!r}.")
        for key, value in (("div_factor", div_factor), ("final_div_factor", final_div_factor), ("base_lr", base_lr)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise SettingError(f"`{key}` must be a positive number; got {value!r}.")
        if anneal_strategy not in ("cos", "linear"):
            raise SettingError(f"`anneal_strategy` must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        if mode not in ("triangular", "triangular2", "exp_range"):
            raise SettingError(f"`mode` must be 'triangular', 'triangular2' or 'exp_range'; got {mode!r}.")
        if isinstance(peak_divisor, bool) or not isinstance(peak_divisor, (int, float)) or not peak_divisor >= 1:
            raise SettingError(
                f"`peak_divisor` must be a number >= 1 (the range test's lowest-loss lr is divided by it); got"
                f" {peak_divisor!r}."
            )
        if isinstance(back_offs, bool) or not isinstance(back_offs, int) or back_offs < 0:
            raise SettingError(
                f"`back_offs` must be an integer >= 0 (how many times the schedule may back off from a divergence);"
                f" got {back_offs!r}."
            )
        self.name = name
        self.max_lr = max_lr
        self.pct_start = pct_start
        self.div_factor = div_factor
        self.final_div_factor = final_div_factor
        self.anneal_strategy = anneal_strategy
        self.base_lr = base_lr
        self.cycles = cycles
        self.mode = mode
        self.range_test_steps = range_test_steps
        self.horizon = horizon
        self.plan = plan
        self.peak_divisor = float(peak_divisor)
        self.back_offs = back_offs
        self._clock = clock
        #: the back-offs taken, in order: ``{"step", "why", "back_to", "peaks"}``
        self.backed_off: list[dict[str, Any]] = []
        self._watch = DivergenceWatch()
        self._watching = False
        self._snapshot: Optional[dict[str, Any]] = None
        self._cycle_start = 0
        self._timing: Optional[dict[str, Any]] = None
        self.range_pick: Optional[RangePick] = None
        self.scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._peaks: Optional[list[float]] = None
        #: the peak learning rates the schedule started from in this fit (one per parameter group), before any
        #: back-off halved them; ``None`` until it starts
        self.start_peaks: Optional[list[float]] = None
        self._total_steps: Optional[int] = None
        self._pending_state: Optional[dict[str, Any]] = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self.report(True, f"{self.name} schedule, stepped per optimizer step (total steps from the trainer)")

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # decide whether this part applies before any work: a range test whose schedule is then skipped
        # is wasted, and it moves what the model keeps outside its weights
        self._skip: Optional[str] = None
        if not pl_module.automatic_optimization:  # Lightning steps no scheduler there; a range test needs it
            self._skip = (
                "skipped: the model uses manual optimization, where Lightning steps no scheduler; return the"
                " OneCycleLR / CyclicLR from configure_optimizers and call self.lr_schedulers().step() after each"
                " opt.step() in training_step"
            )
            self.report(False, self._skip, echo=True)
            return
        # Trap T01: an existing one-cycle / cyclic scheduler stepped per epoch.
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            if (
                isinstance(sched, (torch.optim.lr_scheduler.OneCycleLR, torch.optim.lr_scheduler.CyclicLR))
                and config.interval != "step"
            ):
                rank_zero_warn(
                    f"lr_schedule: {type(sched).__name__} is stepped once per epoch (interval='{config.interval}');"
                    " a one-cycle/cyclic schedule is meant to step per optimizer step. Return"
                    " {'scheduler': ..., 'interval': 'step'} from configure_optimizers, or use speedups.lr_schedule."
                )
        self._skip = self._not_applicable(trainer, pl_module)
        if self._skip is not None:
            self.report(False, self._skip)
            rank_zero_warn(f"lr_schedule: {self._skip}.")
            return
        if self.max_lr == "auto" and self._pending_state is None and self.range_pick is None:
            self.range_pick = self._range_test(trainer, pl_module)

    def _not_applicable(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Optional[str]:
        """Why this schedule must not run for this model (``None`` when it applies)."""
        test = " (no LR range test run)" if self.max_lr == "auto" else ""
        for cb in set_at_init(trainer).callbacks:
            takes_over = getattr(cb, "takes_over_lr_schedule", None)
            if cb is not self and callable(takes_over) and takes_over(trainer):
                return (
                    f"skipped: {type(cb).__name__} (speedups.schedule_free) runs a schedule-free optimizer, which needs"
                    f" no schedule; a one-cycle on top would fight its warm-up and averaging{test}. Keep one of the two"
                    " (speedups.lr_schedule.name: off, or speedups.schedule_free.enabled: false)"
                )
        if not trainer.optimizers:
            return f"skipped, the model has no optimizer{test}"
        optimizer = trainer.optimizers[0]
        if any(c.scheduler.optimizer is optimizer for c in trainer.lr_scheduler_configs):
            return (
                "skipped, configure_optimizers already returns a scheduler for this optimizer; not adding another"
                + test
            )
        if self._plan is None and self._pending_state is None:
            no_plan = self._no_plan(trainer)
            if no_plan is not None:
                return no_plan + test
        where = own_lr_stepping(pl_module)
        if where is not None:
            return (
                f"skipped, the model sets its learning rate itself ({where}): a second schedule would overwrite it"
                f" every step{test}; keep the model's (speedups.lr_schedule.name: off) or remove that code"
            )
        return None

    def _no_plan(self, trainer: pl.Trainer) -> Optional[str]:
        """Why the run has no length this schedule may span (``None`` when it has one)."""
        fix = (
            "set trainer.max_epochs, max_steps or max_time, or give the schedule its own span:"
            " speedups.lr_schedule.plan ('3 epochs', '2000 steps' or a time such as '10min')"
        )
        if planned_by_default(trainer):
            total = trainer.estimated_stepping_batches
            span = (
                f" ({span_text(max(int(total * self.horizon), 1), steps_per_epoch(trainer))} for"
                f" horizon {self.horizon:g})"
                if math.isfinite(total)
                else ""
            )
            return (
                f"skipped: the run has no plan of its own (max_epochs, max_steps and max_time are not set, so"
                f" Lightning plans {LIGHTNING_DEFAULT_EPOCHS} epochs and the schedule would span them{span},"
                f" still warming up when a short run ends); {fix}"
            )
        if not math.isfinite(trainer.estimated_stepping_batches) and timer_seconds(trainer) is None:
            return f"skipped: the run's number of steps is unknown (max_epochs=-1 or a loader without a length); {fix}"
        return None

    def _range_test(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Optional[RangePick]:
        """An LR range test of ``range_test_steps`` optimizer steps through the trainer's own fit loop (as
        Lightning's ``LearningRateFinder`` runs it), the whole training state put back from memory
        afterwards (:func:`run_range_test`); returns the chosen peak."""
        if getattr(trainer, "fast_dev_run", False):  # set by Lightning at init, not declared on the class
            rank_zero_warn("lr_schedule: fast_dev_run is on; no LR range test, the optimizer's lr is the peak.")
            return None
        if len(trainer.optimizers) != 1:
            rank_zero_warn("lr_schedule: the LR range test needs exactly one optimizer; keeping the optimizer's lr.")
            return None
        lrs, raw = run_range_test(trainer, pl_module, self.range_test_steps, RANGE_MIN_LR, RANGE_MAX_LR)
        try:
            pick = pick_peak_lr(lrs, resmooth(raw), divisor=self.peak_divisor)
        except ValueError as err:
            rank_zero_warn(f"lr_schedule: {err} Keeping the optimizer's learning rate as the peak.")
            return None
        steep = "-" if pick.steepest_lr is None else f"{pick.steepest_lr:.3g}"
        self.tell(
            f"LR range test ({pick.points} steps, lr {RANGE_MIN_LR:g} to {RANGE_MAX_LR:g}) chose peak lr"
            f" {pick.lr:.3g} ({pick.rule}; lowest loss at lr {pick.min_loss_lr:.3g}, steepest descent at {steep})"
        )
        return pick

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if getattr(self, "_skip", None) is not None:
            return
        if not trainer.optimizers:
            self.report(False, "skipped, the model has no optimizer")
            return
        optimizer = trainer.optimizers[0]
        state = self._pending_state
        per_epoch = steps_per_epoch(trainer)
        peak: Optional[float] = None
        if self.range_pick is not None:
            peak = self.range_pick.lr
        elif isinstance(self.max_lr, (int, float)):
            peak = float(self.max_lr)
        own = [group["lr"] for group in optimizer.param_groups]
        if peak is None:
            self._peaks = own
        elif self.range_pick is not None:
            # a one-cycle peaking below the lr the user tuned spends its whole run below it: the range test's
            # pick (a decade below the lowest loss, a conservative rule) is raised to the optimizer's own lr
            self._peaks = [max(peak, lr) for lr in own]
        else:
            self._peaks = [peak for _ in own]
        self._floored = self.range_pick is not None and peak is not None and any(peak < lr for lr in own)
        self.start_peaks = list(self._peaks)  # before any back-off halves them
        if state:  # a resume keeps the peaks it was planned with
            self._peaks = list(state["peaks"])
            self._floored = False
            self._total_steps = int(state["total_steps"])
            total = trainer.estimated_stepping_batches
            if math.isfinite(total) and int(total) != self._total_steps and self._plan is None:
                rank_zero_warn(
                    f"lr_schedule: the resumed schedule was planned for {self._total_steps} optimizer steps but this"
                    f" run has {int(total)}; it keeps the original plan"
                    + (" and holds the final learning rate after it ends." if total > self._total_steps else ".")
                )
            self._start(trainer, optimizer, per_epoch, state=state)
            return
        how, seconds = self._span(trainer, per_epoch)
        if seconds is not None:  # a time: timed over the first steps at the schedule's starting lr, then built
            for group, p in zip(optimizer.param_groups, self._peaks):
                group["lr"] = self._start_lr(p)
            self._timing = {"seconds": seconds, "how": how, "from": trainer.global_step, "t0": None}
            self.report(
                True,
                f"{self._kind()} over {how}: the span in steps is set after {TIME_PLAN_STEPS} timed steps at its"
                f" starting lr",
            )
            return
        self._start(trainer, optimizer, per_epoch, how=how)

    def _kind(self) -> str:
        return "OneCycleLR" if self.name == "onecycle" else "CyclicLR"

    def _start_lr(self, peak: float) -> float:
        if self.name == "onecycle":
            return peak / self.div_factor
        return self.base_lr if self.base_lr is not None else peak / self.div_factor

    def _span(self, trainer: pl.Trainer, per_epoch: Optional[float]) -> tuple[str, Optional[float]]:
        """``(where the span comes from, seconds)``: ``self._total_steps`` is set for a span in steps; a
        time plan returns its seconds instead (the steps are known once the first steps are timed)."""
        plan = self._plan
        if plan is not None and plan.unit == "steps":
            self._total_steps = int(plan.amount)
            return f"the plan of {plan.text()}", None
        if plan is not None and plan.unit == "epochs":
            if per_epoch is None:
                raise SettingError(
                    f"`speedups.lr_schedule.plan` of {plan.text()} needs the number of steps in an epoch, and the"
                    " training loader has no length: give the plan in steps or as a time ('10min')."
                )
            self._total_steps = max(round(plan.amount * per_epoch), 1)
            return f"the plan of {plan.text()}", None
        if plan is not None:
            return f"the plan of {plan.text()}", plan.amount
        total = trainer.estimated_stepping_batches
        share = "" if self.horizon == 1.0 else f"{self.horizon:g} of "
        if math.isfinite(total):
            self._total_steps = max(int(total * self.horizon), 1)
            return f"{share}the run", None
        seconds = timer_seconds(trainer)
        if seconds is None:  # on_fit_start skipped this case; a loader that lost its length since
            raise SettingError(
                "`speedups.lr_schedule` needs the run's length: set `trainer.max_steps`, `trainer.max_epochs` or"
                " `trainer.max_time`, or `speedups.lr_schedule.plan`."
            )
        return f"{share}the trainer's max_time ({seconds:.0f} s left)", seconds * self.horizon

    def _start(
        self,
        trainer: pl.Trainer,
        optimizer: torch.optim.Optimizer,
        per_epoch: Optional[float],
        how: str = "",
        state: Optional[dict[str, Any]] = None,
    ) -> None:
        assert self._total_steps is not None and self._peaks is not None
        # the schedulers' constructors reset lr (and a cycled momentum / Adam beta1) to the schedule's start
        scheduled = ("lr", "momentum", "betas")
        current = [{k: group[k] for k in scheduled if k in group} for group in optimizer.param_groups]
        self.scheduler = self._build(optimizer)
        self._cycle_start = trainer.global_step
        if state:
            self.scheduler.load_state_dict(state["scheduler"])
            for group, values in zip(optimizer.param_groups, current):
                group.update(values)  # a resume continues from where the schedule was
            self._pending_state = None
            how = "the resumed plan"
            self._cycle_start = int(state.get("cycle_start", 0))
            self.backed_off = [dict(b) for b in state.get("backed_off", [])]
            if "watch" in state:
                self._watch.load_state_dict(state["watch"])
        trainer.strategy.lr_scheduler_configs.append(
            LRSchedulerConfig(self.scheduler, name=f"speedups-{self.name}", interval="step", frequency=1)
        )
        peak_text = ", ".join(f"{p:.3g}" for p in self._peaks)
        picked = ""
        if self.range_pick is not None and getattr(self, "_floored", False):
            picked = (
                f" (the optimizer's own lr: the LR range test's pick {self.range_pick.lr:.3g} is below it; lowest"
                f" loss at {self.range_pick.min_loss_lr:.3g})"
            )
        elif self.range_pick is not None:
            picked = f" (LR range test: lowest loss at {self.range_pick.min_loss_lr:.3g})"
        elif self.max_lr == "auto":
            picked = " (the optimizer's lr: no range test result)"
        start = f" from step {trainer.global_step}" if trainer.global_step and not state else ""
        self.report(
            True,
            f"{self._kind()} over {span_text(self._total_steps, per_epoch)}{start}, {how}; peak lr {peak_text}{picked}"
            + self._arm_watch(trainer, state),
        )

    def _arm_watch(self, trainer: pl.Trainer, state: Optional[dict[str, Any]]) -> str:
        """Arms the divergence watch (``back_offs``) for the cycle just built, and says so in the status line."""
        self._watching = False
        self._snapshot = None
        if self.back_offs == 0:
            return ""
        strategy = trainer.strategy
        if not is_lightning(strategy, "SingleDeviceStrategy", "DDPStrategy") or is_lightning(
            strategy, "DeepSpeedStrategy"
        ):
            return f"; not watched for divergence (back_offs): {type(strategy).__name__} shards the state it would copy"
        self._watching = bool(state.get("watching", True)) if state else True
        if not self._watching:
            return ""
        left = self._back_offs_left()
        if left == 0:  # still watched, to say so when it diverges
            return f"; backed off {len(self.backed_off)} time(s), no back-off left"
        self._take_snapshot(trainer)
        return f"; watched for divergence ({left} back-off(s) left, each halving the peak)"

    def _back_offs_left(self) -> int:
        return max(self.back_offs - len(self.backed_off), 0)

    def _take_snapshot(self, trainer: pl.Trainer) -> None:
        """The weights, buffers and optimizer state a back-off returns to, on the host (no device memory)."""
        self._snapshot = {
            "model": to_host(trainer.lightning_module.state_dict()),
            "optimizer": to_host(trainer.optimizers[0].state_dict()),
            "step": trainer.global_step,
        }

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (
            self._watching
            and self.scheduler is not None
            and self._back_offs_left()
            and (self._snapshot is None or self._snapshot["step"] != trainer.global_step)
        ):
            self._take_snapshot(trainer)

    def _in_watch(self) -> bool:
        """Whether the cycle is still where a peak that is too high shows: its warm-up, or an lr of at least
        :data:`WATCH_SHARE` of the peak (a cyclic schedule comes back to its peak: always)."""
        sched = self.scheduler
        assert sched is not None and self._peaks is not None and self._total_steps is not None
        if self.name != "onecycle":
            return True
        if sched.last_epoch <= self.pct_start * self._total_steps:
            return True
        return float(sched.get_last_lr()[0]) >= WATCH_SHARE * self._peaks[0]

    def _guard(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any) -> None:
        """The divergence watch at the end of a training step (``back_offs``)."""
        if not self._watching or self.scheduler is None:
            return
        if not self._in_watch():
            self._watching, self._snapshot = False, None
            return
        loss = _step_loss(outputs)
        why = None if loss is None else self._watch.update(loss)
        if trainer.world_size > 1:  # every rank backs off together, or none does
            if trainer.strategy.reduce_boolean_decision(why is not None, all=False) and why is None:
                why = "another process's loss diverged"
        if why is None:
            return
        self._back_off(trainer, pl_module, why)

    def _back_off(self, trainer: pl.Trainer, pl_module: pl.LightningModule, why: str) -> None:
        """Put back the snapshot, halve the peak and start a new cycle over the steps the plan has left."""
        step = trainer.global_step
        if not self._back_offs_left() or self._snapshot is None:
            self._watching, self._snapshot = False, None
            rank_zero_warn(
                f"lr_schedule: the run diverged at step {step} ({why}) and the schedule has backed off"
                f" {len(self.backed_off)} time(s), all that back_offs allows: training goes on as it is; lower"
                " speedups.lr_schedule.max_lr (or raise peak_divisor)."
            )
            return
        assert self._peaks is not None and self._total_steps is not None and self.scheduler is not None
        snapshot = self._snapshot
        optimizer = trainer.optimizers[0]
        pl_module.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        optimizer.zero_grad(set_to_none=True)  # mid-accumulation: the diverged micro-batches' gradients go too
        configs = trainer.strategy.lr_scheduler_configs
        trainer.strategy.lr_scheduler_configs = [c for c in configs if c.scheduler is not self.scheduler]
        old = self._peaks
        self._peaks = [p / BACK_OFF_FACTOR for p in old]
        self._total_steps = max(self._cycle_start + self._total_steps - step, 1)
        self.backed_off.append({"step": step, "why": why, "back_to": snapshot["step"], "peaks": list(self._peaks)})
        self._watch.reset()
        message = (
            f"backed off at step {step}: {why}; the weights and optimizer state are back to step {snapshot['step']},"
            f" the peak lr {', '.join(f'{p:.3g}' for p in old)} -> {', '.join(f'{p:.3g}' for p in self._peaks)}"
        )
        self.tell(message)
        self._start(trainer, optimizer, steps_per_epoch(trainer), how=f"the steps the plan had left ({message})")

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._guard(trainer, pl_module, outputs)
        timing = self._timing
        if timing is None:
            return
        done = trainer.global_step - timing["from"]
        if done < 1:
            return
        if timing["t0"] is None:  # the first step carries one-off costs: time from its end
            timing["t0"], timing["at"] = self._clock(), done
            return
        if done < TIME_PLAN_STEPS:
            return
        elapsed = self._clock() - timing["t0"]
        step_s = elapsed / max(done - timing["at"], 1)
        left = timing["seconds"] - elapsed - step_s * timing["at"]
        self._total_steps = max(int(left / max(step_s, 1e-9)), 1)
        self._timing = None
        how = f"{timing['how']} at {step_s:.3g} s a step (timed over steps 2-{done})"
        self._start(trainer, trainer.optimizers[0], steps_per_epoch(trainer), how=how)

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # the guard for what the source check cannot see: something else (a hook, a scheduler of the
        # model's own) changed the learning rate this schedule set; stop fighting it and say so
        sched = self.scheduler
        if sched is None or sched.optimizer is not optimizer:
            return
        expected = sched.get_last_lr()
        actual = [group["lr"] for group in optimizer.param_groups]
        if all(math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-12) for a, e in zip(actual, expected)):
            return
        configs = trainer.strategy.lr_scheduler_configs
        trainer.strategy.lr_scheduler_configs = [c for c in configs if c.scheduler is not sched]
        self.scheduler = None
        why = (
            f"stopped at step {trainer.global_step}: something else sets the learning rate (it is {actual[0]:.3g},"
            f" this schedule set {expected[0]:.3g}), so the model's own values run; remove one of the two"
            " (speedups.lr_schedule.name: off, or the model's lr code)"
        )
        self.report(False, why)
        rank_zero_warn(f"lr_schedule: {why}.")

    def _build(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        assert self._peaks is not None and self._total_steps is not None
        momentum = _has_momentum(optimizer)
        if self.name == "onecycle":
            pct_start = self.pct_start
            if abs(pct_start * self._total_steps - 1.0) < 1e-9:
                # torch's OneCycleLR divides by (pct_start * total_steps - 1): a warm-up of exactly one
                # step would raise ZeroDivisionError; a hair more keeps the same schedule
                pct_start = (1.0 + 1e-6) / self._total_steps
            return _OneCycleThenHold(
                optimizer,
                max_lr=self._peaks,
                total_steps=self._total_steps,
                pct_start=pct_start,
                anneal_strategy=self.anneal_strategy,
                div_factor=self.div_factor,
                final_div_factor=self.final_div_factor,
                cycle_momentum=momentum,
            )
        base = [self.base_lr if self.base_lr is not None else p / self.div_factor for p in self._peaks]
        step_size_up = max(1, self._total_steps // (2 * self.cycles))
        return torch.optim.lr_scheduler.CyclicLR(
            optimizer,
            base_lr=base,
            max_lr=self._peaks,
            step_size_up=step_size_up,
            mode=self.mode,
            cycle_momentum="momentum" in optimizer.defaults and momentum,
        )

    @override
    def state_dict(self) -> dict[str, Any]:
        if self.scheduler is None:  # also while a time plan is being timed: a resume times again
            return {}
        state: dict[str, Any] = {
            "scheduler": self.scheduler.state_dict(),
            "peaks": self._peaks,
            "total_steps": self._total_steps,
        }
        if self.back_offs:
            state.update(
                cycle_start=self._cycle_start,
                backed_off=[dict(b) for b in self.backed_off],
                watching=self._watching,
                watch=self._watch.state_dict(),
            )
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_state = dict(state_dict) if state_dict else None

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.scheduler is not None:
            configs = trainer.strategy.lr_scheduler_configs
            trainer.strategy.lr_scheduler_configs = [c for c in configs if c.scheduler is not self.scheduler]
