"""T01: one-cycle / cyclic learning-rate schedules stepped per optimizer step."""

from __future__ import annotations

import copy
import inspect
import math
import re
from typing import Any, Literal, Optional, Union

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.functional.lr_range import RangePick, TrainingSnapshot, pick_peak_lr, resmooth

#: the learning rates a range test (``max_lr="auto"``) sweeps, exponentially
RANGE_MIN_LR, RANGE_MAX_LR = 1e-6, 1.0


class _OneCycleThenHold(torch.optim.lr_scheduler.OneCycleLR):
    """OneCycleLR that holds its final learning rate once its planned steps are done.

    A run resumed with a larger ``max_steps`` / ``max_epochs`` trains past the plan; plain OneCycleLR
    would raise "Tried to step N times".
    """

    def step(self, epoch: Optional[int] = None) -> None:  # type: ignore[override]
        if self.last_epoch >= self.total_steps:
            return
        super().step(epoch)


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


class _RangeSweep(Callback):
    """The range test's only callback: the lr before each optimizer step, the loss after it; stops when
    the loss (smoothed as Lightning's finder smooths it) passes ``early_stop`` times the best."""

    def __init__(self, optimizer: torch.optim.Optimizer, early_stop: float = 4.0, beta: float = 0.98) -> None:
        self.optimizer = optimizer
        self.early_stop, self.beta = early_stop, beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self._avg, self._best = 0.0, math.inf

    def _stepping(self, trainer: pl.Trainer) -> bool:
        return (trainer.fit_loop.batch_idx + 1) % trainer.accumulate_grad_batches == 0

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._stepping(trainer):
            self.lrs.append(float(self.optimizer.param_groups[0]["lr"]))

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._stepping(trainer):
            return
        loss = outputs if isinstance(outputs, torch.Tensor) else (outputs or {}).get("loss")
        if loss is None:
            self.losses.append(float("nan"))
            return
        value = float(loss.detach())
        self.losses.append(value)
        n = len(self.losses)
        self._avg = self.beta * self._avg + (1 - self.beta) * value
        smoothed = self._avg / (1 - self.beta**n)
        if n > 1 and smoothed > self.early_stop * self._best or not math.isfinite(value):
            trainer.should_stop = True
        trainer.should_stop = trainer.strategy.broadcast(trainer.should_stop)
        self._best = min(self._best, smoothed)


def run_range_test(
    trainer: pl.Trainer, pl_module: pl.LightningModule, steps: int, min_lr: float, max_lr: float
) -> tuple[list[float], list[float]]:
    """Train ``steps`` optimizer steps with the lr growing exponentially from ``min_lr`` to ``max_lr``,
    through the trainer's own fit loop (precision, strategy, accumulation and the model's hooks as in
    training), then put back everything those steps touched; returns ``(lrs, raw losses)`` (rank zero's,
    broadcast).

    The state is kept in memory (:class:`~lightning_speedups.functional.lr_range.TrainingSnapshot`:
    weights, buffers, module modes, plain attributes of the model and datamodule, optimizer state,
    random generators), with the loops' progress, the precision plugin's state and the data loaders
    (built afresh, so the first epoch starts at its first batch in the order a run without the test
    draws). Lightning's own finder restores from a checkpoint with ``torch.load(weights_only=True)``,
    which refuses hyper-parameters holding config objects, ``functools.partial`` or user classes;
    nothing here is pickled.
    """
    from lightning.pytorch.loggers.logger import DummyLogger

    optimizer = trainer.optimizers[0]
    root = trainer.strategy.model if isinstance(trainer.strategy.model, torch.nn.Module) else pl_module
    datamodule = getattr(trainer, "datamodule", None)  # a Trainer property Lightning's stubs do not declare
    extra = [datamodule] if datamodule is not None else []
    snapshot = TrainingSnapshot.capture(root, trainer.optimizers, extra=extra)
    loop = trainer.fit_loop
    loop_state = copy.deepcopy(loop.state_dict())
    precision_state = copy.deepcopy(trainer.precision_plugin.state_dict())
    saved = (
        trainer.strategy.optimizers,
        trainer.strategy.lr_scheduler_configs,
        trainer.callbacks,  # type: ignore[attr-defined]  # set by Lightning's CallbackConnector, not declared
        trainer.loggers,
        loop.epoch_loop.max_steps,
        trainer.limit_val_batches,
    )
    for group in optimizer.param_groups:
        group["lr"] = min_lr
    ratio = max_lr / min_lr
    sweep_sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: ratio ** min(i / steps, 1.0))
    sweep = _RangeSweep(optimizer)
    bar = trainer.progress_bar_callback
    if bar is not None:
        bar.disable()
    try:
        trainer.strategy.lr_scheduler_configs = [LRSchedulerConfig(sweep_sched, interval="step")]
        trainer.callbacks = [sweep]  # type: ignore[attr-defined]
        trainer.logger = DummyLogger() if trainer.logger is not None else None
        loop.epoch_loop.max_steps = steps + trainer.global_step
        trainer.limit_val_batches = 0  # validation would be thrown away
        loop.load_state_dict(copy.deepcopy(loop_state))
        loop.restarting = False
        loop.run()
        lrs, losses = trainer.strategy.broadcast((sweep.lrs, sweep.losses))
    finally:
        (
            trainer.strategy.optimizers,
            trainer.strategy.lr_scheduler_configs,
            trainer.callbacks,  # type: ignore[attr-defined]
            trainer.loggers,
            loop.epoch_loop.max_steps,
            trainer.limit_val_batches,
        ) = saved
        if bar is not None:
            bar.enable()
        loop.load_state_dict(copy.deepcopy(loop_state))
        loop.restarting = False
        loop.epoch_loop.restarting = False
        trainer.should_stop = False
        snapshot.restore()
        trainer.precision_plugin.load_state_dict(precision_state)
        # private: the loaders of the test are dropped, so the fit builds them afresh where a fit without
        # the test builds them (Lightning's own finder resets the same two attributes)
        loop.epoch_loop.val_loop._combined_loader = None
        loop._combined_loader = None
    return list(lrs), list(losses)


class LRSchedule(SpeedupCallback):
    """T01: a one-cycle or cyclic learning-rate schedule with no hand-written ``total_steps``.

    The schedule is built when training starts, from ``trainer.estimated_stepping_batches`` (which
    counts accumulation, devices, ``max_steps`` and ``limit_train_batches``) and stepped once per
    optimizer step, never per epoch. The peak learning rate defaults to the one the optimizer was
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

    Card:
        What: Smith's one-cycle ("super-convergence") and cyclical schedules. Seed tip: A#1.
        Expected gain: fewer epochs to the same accuracy; large in the best case, none in others.
        When it hurts: a one-cycle schedule stepped per epoch (the plain LightningCLI
        ``--lr_scheduler OneCycleLR`` trap) barely moves; this callback steps per optimizer step.

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

    Example::

        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule("onecycle")])
        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule("onecycle", max_lr="auto")])  # range-tested peak
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
    ) -> None:
        super().__init__()
        if name not in ("onecycle", "cyclic"):
            raise ValueError(f"`name` must be 'onecycle' or 'cyclic'; got {name!r}.")
        if max_lr is not None and max_lr != "auto" and (isinstance(max_lr, str) or max_lr <= 0):
            raise ValueError(
                f"`max_lr` must be positive, None (the optimizer's lr) or 'auto' (an LR range test); got {max_lr!r}."
            )
        if isinstance(range_test_steps, bool) or not isinstance(range_test_steps, int) or range_test_steps < 5:
            raise ValueError(f"`range_test_steps` must be an integer >= 5; got {range_test_steps!r}.")
        if not 0.0 < horizon <= 1.0:
            raise ValueError(f"`horizon` must be in (0, 1], the share of the run the schedule spans; got {horizon!r}.")
        if not 0.0 < pct_start < 1.0:
            raise ValueError(f"`pct_start` must be between 0 and 1; got {pct_start!r}.")
        if not isinstance(cycles, int) or cycles < 1:
            raise ValueError(f"`cycles` must be a positive integer; got {cycles!r}.")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"`anneal_strategy` must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        if mode not in ("triangular", "triangular2", "exp_range"):
            raise ValueError(f"`mode` must be 'triangular', 'triangular2' or 'exp_range'; got {mode!r}.")
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
        self.range_pick: Optional[RangePick] = None
        self.scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._peaks: Optional[list[float]] = None
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
        if not trainer.optimizers:
            return f"skipped, the model has no optimizer{test}"
        optimizer = trainer.optimizers[0]
        if any(c.scheduler.optimizer is optimizer for c in trainer.lr_scheduler_configs):
            return (
                "skipped, configure_optimizers already returns a scheduler for this optimizer; not adding another"
                + test
            )
        where = own_lr_stepping(pl_module)
        if where is not None:
            return (
                f"skipped, the model sets its learning rate itself ({where}): a second schedule would overwrite it"
                f" every step{test}; keep the model's (speedups.lr_schedule.name: off) or remove that code"
            )
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
            pick = pick_peak_lr(lrs, resmooth(raw))
        except ValueError as err:
            rank_zero_warn(f"lr_schedule: {err} Keeping the optimizer's learning rate as the peak.")
            return None
        steep = "-" if pick.steepest_lr is None else f"{pick.steepest_lr:.3g}"
        rank_zero_info(
            f"lr_schedule: LR range test ({pick.points} steps, lr {RANGE_MIN_LR:g} to {RANGE_MAX_LR:g}) chose peak lr"
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
        total = trainer.estimated_stepping_batches
        if not math.isfinite(total):
            raise ValueError(
                "`speedups.lr_schedule` needs a finite number of steps: set `trainer.max_steps` or"
                " `trainer.max_epochs`, or use a loader with a length."
            )
        state = self._pending_state
        self._total_steps = int(state["total_steps"]) if state else max(int(total * self.horizon), 1)
        if state and int(total) != self._total_steps:
            rank_zero_warn(
                f"lr_schedule: the resumed schedule was planned for {self._total_steps} optimizer steps but this run"
                f" has {int(total)}; it keeps the original plan"
                + (" and holds the final learning rate after it ends." if total > self._total_steps else ".")
            )
        peak: Optional[float] = None
        if self.range_pick is not None:
            peak = self.range_pick.lr
        elif isinstance(self.max_lr, (int, float)):
            peak = float(self.max_lr)
        self._peaks = (
            list(state["peaks"])
            if state
            else [peak if peak is not None else group["lr"] for group in optimizer.param_groups]
        )
        # the schedulers' constructors reset lr (and a cycled momentum / Adam beta1) to the schedule's start
        scheduled = ("lr", "momentum", "betas")
        current = [{k: group[k] for k in scheduled if k in group} for group in optimizer.param_groups]
        self.scheduler = self._build(optimizer)
        if state:
            self.scheduler.load_state_dict(state["scheduler"])
            for group, values in zip(optimizer.param_groups, current):
                group.update(values)  # a resume continues from where the schedule was
            self._pending_state = None
        trainer.strategy.lr_scheduler_configs.append(
            LRSchedulerConfig(self.scheduler, name=f"speedups-{self.name}", interval="step", frequency=1)
        )
        peak_text = ", ".join(f"{p:.3g}" for p in self._peaks)
        kind = "OneCycleLR" if self.name == "onecycle" else "CyclicLR"
        how = ""
        if self.range_pick is not None:
            how = f" (LR range test: lowest loss at {self.range_pick.min_loss_lr:.3g})"
        elif self.max_lr == "auto":
            how = " (the optimizer's lr: no range test result)"
        span = "" if self.horizon == 1.0 else f" ({self.horizon:g} of the run)"
        self.report(True, f"{kind} over {self._total_steps} optimizer steps{span}, peak lr {peak_text}{how}")

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
        if self.scheduler is None:
            return {}
        return {"scheduler": self.scheduler.state_dict(), "peaks": self._peaks, "total_steps": self._total_steps}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_state = dict(state_dict) if state_dict else None

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.scheduler is not None:
            configs = trainer.strategy.lr_scheduler_configs
            trainer.strategy.lr_scheduler_configs = [c for c in configs if c.scheduler is not self.scheduler]
