"""T01: one-cycle / cyclic learning-rate schedules stepped per optimizer step."""

from __future__ import annotations

import math
from typing import Any, Literal, Optional, Union

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import LearningRateFinder
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.functional.lr_range import RangePick, pick_peak_lr, raw_losses, resmooth

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


class LRSchedule(SpeedupCallback):
    """T01: a one-cycle or cyclic learning-rate schedule with no hand-written ``total_steps``.

    The schedule is built when training starts, from ``trainer.estimated_stepping_batches`` (which
    counts accumulation, devices, ``max_steps`` and ``limit_train_batches``) and stepped once per
    optimizer step, never per epoch. The peak learning rate defaults to the one the optimizer was
    built with; ``max_lr="auto"`` takes it from a learning-rate range test at the start of ``fit``
    (Lightning's ``LearningRateFinder``, ``range_test_steps`` steps from 1e-6 to 1, undone afterwards:
    weights, optimizer and step count are restored), picks the peak a decade below the lowest
    loss (:func:`~lightning_speedups.functional.lr_range.pick_peak_lr`) and prints it. The schedule's
    position survives a resume through this callback's state.

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
        self._manual = not pl_module.automatic_optimization
        if self._manual:  # Lightning steps no scheduler there, and its LR range test needs automatic optimization
            self.report(
                False,
                "skipped: the model uses manual optimization, where Lightning steps no scheduler; return the"
                " OneCycleLR / CyclicLR from configure_optimizers and call self.lr_schedulers().step() after each"
                " opt.step() in training_step",
                echo=True,
            )
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
        if self.max_lr == "auto" and self._pending_state is None and trainer.optimizers and self.range_pick is None:
            self.range_pick = self._range_test(trainer, pl_module)

    def _range_test(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Optional[RangePick]:
        """Lightning's LR range test (weights, optimizer and steps restored afterwards); the chosen peak."""
        finder = LearningRateFinder(
            min_lr=RANGE_MIN_LR, max_lr=RANGE_MAX_LR, num_training_steps=self.range_test_steps, update_attr=False
        )
        finder.lr_find(trainer, pl_module)
        found = finder.optimal_lr
        if found is None:  # fast_dev_run: Lightning skips the test
            return None
        try:
            # Lightning smooths with beta 0.98 (a ~50-step lag over a 100-step test): undo it, smooth over 5 steps
            losses = resmooth(raw_losses(found.results.get("loss", []), beta=0.98, first_step=1))
            pick = pick_peak_lr(found.results.get("lr", []), losses)
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
        if getattr(self, "_manual", False):
            return
        if not trainer.optimizers:
            self.report(False, "skipped, the model has no optimizer")
            return
        optimizer = trainer.optimizers[0]
        if any(c.scheduler.optimizer is optimizer for c in trainer.lr_scheduler_configs):
            self.report(False, "skipped, configure_optimizers already returns a scheduler for this optimizer")
            rank_zero_warn(
                "lr_schedule: the model already schedules its optimizer's learning rate; not adding another."
            )
            return
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
