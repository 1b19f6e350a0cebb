"""T01: a schedule-free optimizer in place of the user's, switched between train and eval mode by the Trainer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Optional, Union

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, no_op
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.schedule_free import is_schedule_free, schedule_free_twin, why_not_schedule_free
from lightning_speedups.trainer.plan import planned_by_default

#: warm-up steps when ``warmup_steps`` is a share and the run has no plan to take it of
FALLBACK_WARMUP_STEPS = 100
_BATCH_NORMS = (torch.nn.modules.batchnorm._BatchNorm,)


class ScheduleFree(SpeedupCallback):
    """T01: swap the model's optimizer for its schedule-free twin, which needs no learning-rate schedule.

    Schedule-free learning (the ``schedulefree`` package; Defazio et al., "The Road Less Scheduled", 2024)
    replaces momentum and the schedule by interpolation and averaging, so the run needs no plan: no total
    steps, no decay to tune, and the averaged weights are good at any step. When the fit starts (after
    ``configure_optimizers``, before a checkpoint's optimizer state is restored into it), each ``Adam`` /
    ``AdamW`` becomes an ``AdamWScheduleFree`` and each ``SGD`` with momentum an ``SGDScheduleFree``, with the
    optimizer's own learning rate (times ``lr_scale``), betas or momentum, eps and weight decay, group by group
    (:func:`~lightning_speedups.functional.schedule_free.schedule_free_twin`). A model whose
    ``configure_optimizers`` returns a schedule-free optimizer itself keeps it, and this part switches its modes.

    The optimizer holds two sets of weights: the one the gradient is taken at (train mode) and the average
    to evaluate (eval mode). This part calls ``optimizer.train()`` before each training batch and
    ``optimizer.eval()`` when validation, test or predict starts, when training ends (the model a fit returns
    holds the averaged weights) and for every checkpoint: a checkpoint holds the eval-mode weights and the
    optimizer state that goes with them, so a resume (``ckpt_path``) continues exactly where the saved run
    went on. After a validation the switch back to train mode waits for the next training batch, so a
    checkpoint saved at the end of a validation costs nothing.

    It skips, with the reason, an optimizer with no faithful twin (another class, ``amsgrad``, SGD without
    momentum, ...), one with a learning-rate scheduler from ``configure_optimizers`` (schedule-free replaces
    the schedule; the two are not stacked), the DeepSpeed strategy (whose engine owns the optimizer), and a
    resume from a checkpoint whose optimizer state is not schedule-free (saved without this part). With this
    part on, :class:`~lightning_speedups.callbacks.LRSchedule` steps aside (it would schedule what
    schedule-free means to leave alone), with a warning.

    Card: tip T01 ``lr-schedule``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        warmup_steps: the twin's linear learning-rate warm-up (the ``schedulefree`` authors recommend one): a
            number of optimizer steps (an int, 0 for none), or a share of the run's planned optimizer steps (a
            float in (0, 1); :data:`FALLBACK_WARMUP_STEPS` steps when the run has no plan). A resume keeps the
            warm-up it was saved with.
        lr_scale: the twin's learning rate is the optimizer's times this (the authors find 1-10x the scheduled
            rate right for AdamW, 10-50x for SGD; 1 keeps the user's rate as the starting point).

    Example::

        trainer = Trainer(max_epochs=10, callbacks=[ScheduleFree()])
        trainer = Trainer(max_epochs=10, callbacks=[ScheduleFree(warmup_steps=500, lr_scale=2.0)])
    """

    tip = "T01"
    part = "schedule_free"

    def __init__(self, warmup_steps: Union[int, float] = 0.05, lr_scale: float = 1.0) -> None:
        super().__init__()
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, float)):
            raise SettingError(
                f"`warmup_steps` must be a number of steps (an int >= 0) or a share of the run (a float in (0, 1));"
                f" got {warmup_steps!r}."
            )
        if isinstance(warmup_steps, int) and warmup_steps < 0:
            raise SettingError(f"`warmup_steps` must be >= 0 steps; got {warmup_steps!r}.")
        if isinstance(warmup_steps, float) and not 0.0 < warmup_steps < 1.0:
            raise SettingError(
                f"`warmup_steps` as a float is a share of the run and must be in (0, 1); got {warmup_steps!r}"
                " (give a number of steps as an int)."
            )
        if isinstance(lr_scale, bool) or not isinstance(lr_scale, (int, float)) or not lr_scale > 0:
            raise SettingError(f"`lr_scale` must be a positive number; got {lr_scale!r}.")
        self.warmup_steps = warmup_steps
        self.lr_scale = float(lr_scale)
        #: the schedule-free optimizers whose modes this part switches (swapped in, or the model's own)
        self.optimizers: list[Any] = []
        #: ``(index, type name)`` of each optimizer swapped in this fit
        self.swapped: list[tuple[int, str]] = []
        self._saved_kinds: Optional[list[bool]] = None  # per optimizer of a checkpoint being resumed: schedule-free
        #: per optimizer in eval mode (by id): its train-mode weights, copied back when training goes on
        self._stash: dict[int, list[torch.Tensor]] = {}

    # ------------------------------------------------------------------------------------------- the decision
    def plan(self, trainer: Any) -> tuple[list[int], list[str]]:
        """Which of the trainer's optimizers this part swaps (their indices), and why each other one is left as it
        is (one phrase each). Nothing is changed."""
        optimizers = list(trainer.optimizers)
        if not optimizers:
            return [], ["the model has no optimizer"]
        strategy = type(trainer.strategy).__name__
        if "DeepSpeed" in strategy:
            return [], [f"the {strategy} engine owns the optimizer; it cannot be swapped"]
        chosen: list[int] = []
        why: list[str] = []
        scheduled = {id(c.scheduler.optimizer) for c in trainer.lr_scheduler_configs}
        for i, optimizer in enumerate(optimizers):
            name = type(optimizer).__name__
            reason = why_not_schedule_free(optimizer)
            if is_schedule_free(optimizer):
                continue  # the model's own: managed, nothing to swap
            if reason is None and id(optimizer) in scheduled:
                reason = (
                    f"configure_optimizers returns a learning-rate scheduler for {name}; schedule-free replaces the"
                    " schedule, so the two are not stacked (remove the scheduler to use it)"
                )
            if reason is None and self._saved_kinds is not None and i < len(self._saved_kinds):
                if not self._saved_kinds[i]:
                    reason = (
                        f"the checkpoint being resumed holds {name}'s own state (saved without schedule-free);"
                        " the run goes on with it"
                    )
            if reason is None:
                chosen.append(i)
            else:
                why.append(reason)
        return chosen, why

    def takes_over_lr_schedule(self, trainer: Any) -> bool:
        """Whether this part runs a schedule-free optimizer in this fit (a learning-rate schedule then steps aside)."""
        if self.stepped_aside:
            return False
        if self.optimizers:
            return True
        optimizers = list(getattr(trainer, "optimizers", ()) or ())
        return bool(self.plan(trainer)[0]) or any(is_schedule_free(o) for o in optimizers)

    def _warmup(self, trainer: Any) -> tuple[int, str]:
        """The warm-up in optimizer steps, and how it was chosen."""
        if isinstance(self.warmup_steps, int):
            return self.warmup_steps, f"{self.warmup_steps} warm-up steps"
        total = trainer.estimated_stepping_batches
        # an iterable loader with no length and no max_steps: Lightning estimates -1 (gluonts' own Trainer does this)
        if planned_by_default(trainer) or not math.isfinite(total) or total <= 0:
            return FALLBACK_WARMUP_STEPS, (
                f"{FALLBACK_WARMUP_STEPS} warm-up steps (the run has no plan to take {self.warmup_steps:g} of)"
            )
        steps = max(int(round(total * self.warmup_steps)), 1)
        return steps, f"{steps} warm-up steps ({self.warmup_steps:g} of {int(total)})"

    # ---------------------------------------------------------------------------------------------- the swap
    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        states = checkpoint.get("optimizer_states")
        if states is None:
            self._saved_kinds = None
            return
        self._saved_kinds = [
            bool(s.get("param_groups")) and all("train_mode" in g for g in s["param_groups"]) for s in states
        ]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after configure_optimizers (strategy.setup), before the checkpoint's optimizer state is restored
        self.optimizers, self.swapped, self._stash = [], [], {}
        chosen, why = self.plan(trainer)
        optimizers = list(trainer.optimizers)
        notes: list[str] = []
        warmup, warmup_text = self._warmup(trainer) if chosen else (0, "")
        for i in chosen:
            old = optimizers[i]
            twin, said = schedule_free_twin(old, warmup_steps=warmup, lr_scale=self.lr_scale)
            optimizers[i] = twin
            self.swapped.append((i, type(old).__name__))
            notes += [n for n in said if n not in notes]
        if chosen:
            trainer.strategy.optimizers = optimizers  # Lightning's public setter: rebuilds its optimizer wrappers
        self.optimizers = [o for o in trainer.optimizers if is_schedule_free(o)]
        self._self_train()
        for note in notes:
            rank_zero_warn(f"schedule_free: {note}.", category=PossibleUserWarning)
        if self.optimizers and any(isinstance(m, _BATCH_NORMS) for m in pl_module.modules()):
            rank_zero_warn(
                "schedule_free: the model has BatchNorm layers, whose running statistics are gathered at the"
                " train-mode weights; evaluated at the averaged weights they can be off (the schedulefree authors"
                " re-run a few training batches in eval mode before evaluating, or use precise BN).",
                category=PossibleUserWarning,
            )
        if not self.optimizers:
            reason = "; ".join(why) or "no optimizer to swap"
            self.report(False, f"skipped: {reason}")
            rank_zero_warn(f"schedule_free: skipped: {reason}.")
            return
        done = [
            f"{old}->{type(trainer.optimizers[i]).__name__} (lr {trainer.optimizers[i].param_groups[0]['lr']:.3g})"
            for i, old in self.swapped
        ]
        own = [
            type(o).__name__ for o in self.optimizers if all(o is not trainer.optimizers[i] for i, _ in self.swapped)
        ]
        parts = done + [f"the model's own {name}: train/eval mode switched" for name in own]
        if self.swapped:
            parts.append(warmup_text)
        if why:
            parts.append("left as they are: " + "; ".join(why))
            rank_zero_warn(f"schedule_free: {'; '.join(why)}.")
        self.report(True, ", ".join(parts))

    # ------------------------------------------------------------------------------------------ train / eval
    def _to_eval(self, optimizer: Any) -> None:
        """Eval mode (the parameters hold the averaged weights ``x``), the train-mode weights ``y`` kept aside."""
        if not any(g.get("train_mode") for g in optimizer.param_groups):
            return
        self._stash[id(optimizer)] = [p.detach().clone() for p in _params(optimizer)]
        optimizer.eval()

    def _to_train(self, optimizer: Any) -> None:
        """Train mode, with the train-mode weights exactly as they were (the optimizer's own ``train()`` computes them
        back from ``x`` and ``z``, a round trip that moves them by a rounding error; kept aside, they are copied
        back): a validation or a checkpoint never changes what training computes next."""
        if all(g.get("train_mode") for g in optimizer.param_groups):
            return
        kept = self._stash.pop(id(optimizer), None)
        optimizer.train()
        if kept is not None:
            with torch.no_grad():
                for p, y in zip(_params(optimizer), kept):
                    p.copy_(y)

    def _self_train(self) -> None:
        for optimizer in self.optimizers:
            self._to_train(optimizer)

    def _self_eval(self) -> None:
        for optimizer in self.optimizers:
            self._to_eval(optimizer)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a resumed run: the train-mode weights the checkpoint kept beside the optimizer state (restored by now)
        for optimizer in self.optimizers:
            states = [optimizer.state.get(p) for p in _params(optimizer)]
            kept: list[torch.Tensor] = []
            for p, state in zip(_params(optimizer), states):
                y = None if state is None else state.pop(KEPT_KEY, None)
                if isinstance(y, torch.Tensor):
                    kept.append(y.to(p.device, p.dtype))
            if kept and len(kept) == len(states):
                self._stash[id(optimizer)] = kept

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._self_train()

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._self_train()  # after a validation too: the switch back waits for the next training batch

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._self_eval()

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._self_eval()

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._self_eval()

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._self_eval()  # the model a fit leaves holds the averaged weights, for what the user does next

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """A checkpoint holds the eval-mode weights, the optimizer state in eval mode, and the train-mode weights
        beside that state (one more copy of the parameters), so that a resume continues exactly.

        Saved in train mode (a checkpoint every N training steps, or ``trainer.save_checkpoint`` inside a step), the
        optimizers go to eval mode for the copy of the weights and come back with their train-mode weights as they
        were.
        """
        saved = checkpoint.get("optimizer_states")
        weights = checkpoint.get("state_dict")
        for index, optimizer in enumerate(trainer.optimizers):
            if not any(optimizer is o for o in self.optimizers):
                continue
            training = any(g.get("train_mode") for g in optimizer.param_groups)
            if training:
                shared = {p.data_ptr() for p in _params(optimizer)}
                self._to_eval(optimizer)
                if isinstance(weights, dict):
                    for key, value in weights.items():
                        # the checkpoint's tensors share the parameters' storage: copy the eval-mode values now
                        if isinstance(value, torch.Tensor) and value.data_ptr() in shared:
                            weights[key] = value.detach().clone()
            kept = self._stash.get(id(optimizer))
            if isinstance(saved, list) and index < len(saved) and isinstance(saved[index], dict):
                _save_eval_state(saved[index], kept)
            if training:
                self._to_train(optimizer)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._saved_kinds = None  # read once, by the fit that resumed from it
        if stage == "fit":  # the train-mode weights kept after the fit (for a checkpoint saved then) leave the device
            self._stash = {k: [y.cpu() for y in ys] for k, ys in self._stash.items()}

    @override
    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        # the schedule-free optimizer stays (the run's optimizer state is its); a part that steps aside leaves it in
        # train mode, where its step runs
        self._self_train()
        return no_op


#: the key, in a checkpoint's per-parameter optimizer state, of the train-mode weights (read back on resume)
KEPT_KEY = "speedups_train_weights"


def _params(optimizer: Any) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"]]


def _save_eval_state(saved: dict[str, Any], kept: Optional[list[torch.Tensor]]) -> None:
    """Make one saved optimizer state (``optimizer.state_dict()``, whose per-parameter dicts are the live ones) say
    eval mode and carry the train-mode weights ``kept``, without touching the live optimizer."""
    groups = saved.get("param_groups")
    if isinstance(groups, list):
        saved["param_groups"] = [{**g, "train_mode": False} if "train_mode" in g else g for g in groups]
    state = saved.get("state")
    if kept is None or not isinstance(state, dict) or not all(isinstance(k, int) for k in state):
        return  # a sharded optimizer state keyed otherwise: the resume computes them back (within a rounding error)
    state = dict(state)
    for index, y in enumerate(kept):
        state[index] = {**state.get(index, {}), KEPT_KEY: y}
    saved["state"] = state
