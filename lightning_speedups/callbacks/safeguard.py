"""Never worse than plain Lightning: a part that cannot run on the user's model steps aside, it never ends the fit.

The contract, held here and in :class:`~lightning_speedups.callbacks.base.SpeedupCallback`: with any preset, a fit
that plain Lightning completes also completes.

- A part whose own hook fails (while it sets up, probes, decides) is turned off for the run by its base class
  (:meth:`~lightning_speedups.callbacks.base.SpeedupCallback.step_aside`).
- What changes a training step and may not run on every model (a precision an op has no kernel for here,
  checkpointing of a block that changes its inputs) is tried before the run takes it: :class:`Safeguard` takes
  one forward and backward pass of the real model on the first real batch, nothing kept (weights are not
  stepped; buffers, plain attributes, random generators and the batch are put back), and a part that makes it
  fail is found and taken off.
- The first real training steps and the first validation steps after a part changed something run watched: a
  step that raises is taken again without the parts, one at a time (the culprit is the one whose absence lets it
  pass), then all of them; if the step fails without any of them too, the error is the user's own and is raised
  as Lightning would raise it.

Each part that stepped aside has one line in the start-up summary: the part, the error in a phrase, where it was
raised, and what to do. Bad input (:class:`~lightning_speedups.errors.BadInput`) is still refused before training.
The watch is for one process: on several (DDP, FSDP) a part that fails there ends the run as it would without it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, no_op, wants_traceback
from lightning_speedups.errors import BadInput, refuses_the_run
from lightning_speedups.functional.failures import error_phrase, raising_op
from lightning_speedups.functional.snapshot import TrainingSnapshot
from lightning_speedups.trainer.attributes import set_at_init
from lightning_speedups.trainer.hooks import HookPatches
from lightning_speedups.trainer.namespace import is_lightning, lightning_class_name, package_of
from lightning_speedups.trainer.trial_steps import root_module, step_trial

__all__ = ["Safeguard"]

_log = logging.getLogger("lightning_speedups")

#: full precisions: nothing to fall back from
_FULL = ("32-true", "32", "64-true", "64")
#: the attribute an exception gets once the Safeguard has judged it (the user's own: raised as it is)
_JUDGED = "__speedups_judged__"


class PresetPrecision(SpeedupCallback):
    """The precision a preset set through the Trainer's arguments, as a part the :class:`Safeguard` can try and
    take off (never in the Trainer's callbacks: its line is the summary's ``precision (T05)`` note).

    Args:
        chosen: the precision the preset chose (``"bf16-mixed"``).
        plain: the precision plugin to fall back on (``None``: the Trainer's package's full precision).
    """

    tip = "T05"
    part = "precision"

    def __init__(self, chosen: str, plain: Any = None) -> None:
        super().__init__()
        self.chosen = chosen
        self.plain = plain
        self.notes: Optional[list[Any]] = None

    def bind(self, trainer: Any, notes: Optional[list[Any]]) -> None:
        if self.plain is None:
            plugins = importlib.import_module(f"{package_of(trainer).__name__}.plugins.precision")
            self.plain = plugins.Precision()
        self.notes = notes
        self._status = ("active", self.chosen)

    @property
    def changes_step(self) -> bool:
        return not self.stepped_aside

    @property
    def needs_trial(self) -> bool:
        return self.changes_step

    @override
    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        current = trainer.strategy.precision_plugin
        if current is self.plain:
            return no_op
        trainer.strategy.precision_plugin = self.plain

        def resume() -> None:
            trainer.strategy.precision_plugin = current

        return resume

    @override
    def step_aside(self, trainer: Any, pl_module: Any, why: str, error: Optional[BaseException] = None) -> None:
        super().step_aside(trainer, pl_module, why, error)
        plain = getattr(self.plain, "precision", "32-true")
        line = (
            f"{plain}: {self.chosen} stepped aside, {why}; an op of this model has no {self.chosen} kernel on this"
            " hardware, so the run keeps full precision (set speedups.precision: off to skip the trial)"
        )
        if self.notes is not None:
            at = next((i for i, note in enumerate(self.notes) if note[0].startswith("precision")), None)
            if at is None:
                self.notes.append(("precision (T05)", False, line))
            else:
                self.notes[at] = (self.notes[at][0], False, line)


class Safeguard(SpeedupCallback):
    """Tries what changes a training step on the first batch, and watches the first steps after it: a part that
    makes a step fail is taken off and the fit goes on (see the module).

    The presets add it (``Speedups.callbacks()``), after every part and before the summary. Without a part that
    changes the step it does nothing and costs nothing. With a precision or checkpointing to try, the trial is one
    forward and backward pass of the model (no optimizer step, so no copy of the weights; under manual optimization
    the user's whole step, with the weights and optimizer state kept on the host and put back), and the summary
    says what it tried and what it cost.

    Args:
        precision: the precision the preset set through the Trainer's arguments (``None``: none); it is tried on the
            first batch when the Trainer runs it.
        watch_steps: training steps watched after the trial (the validation steps of the sanity check and of the
            first validation run are watched too).

    Example::

        p = preset("memory")
        trainer = Trainer(**p.trainer_kwargs(), callbacks=p.callbacks())   # Safeguard among them
    """

    part = "safeguard"

    def __init__(self, precision: Optional[str] = None, watch_steps: int = 3) -> None:
        super().__init__()
        self.precision = precision
        self.watch_steps = watch_steps
        #: the precision plugin the Trainer had before a preset changed it (set by the environment callback)
        self.plain_precision: Any = None
        self.preset_precision: Optional[PresetPrecision] = None
        self.trial_seconds: Optional[float] = None
        self._patches = HookPatches()
        self._first = False
        self._steps = 0
        self._validating_watched = True
        self._last: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})
        self._trainer: Any = None

    @property
    def delays_summary(self) -> bool:
        """The summary waits for the trial of the first batch (its lines may change there)."""
        return self._first and self._trainer is not None and any(p.needs_trial for p in self.parts(self._trainer))

    # -------------------------------------------------------------------------------------------- the parts
    def parts(self, trainer: Any) -> list[SpeedupCallback]:
        """The parts that change the step now, the preset's precision first, the others latest first (the part
        applied last is the likeliest to have broken what ran before it)."""
        found = [
            cb
            for cb in set_at_init(trainer).callbacks
            if isinstance(cb, SpeedupCallback) and cb is not self and not cb.stepped_aside and cb.changes_step
        ]
        head = (
            [self.preset_precision] if self.preset_precision is not None and self.preset_precision.changes_step else []
        )
        return [*head, *reversed(found)]

    @property
    def shown_in_summary(self) -> bool:
        """Only a trial it took has a line (what it tried and cost); a part it took off has its own."""
        return self.active

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.preset_precision = None
        if stage != "fit":
            self.report(False, f"nothing to try in a {getattr(stage, 'value', stage)} run (fit only)")
            return
        self.report(False, "no part changes the training step here: nothing to try")
        chosen = self.precision
        if chosen is not None and chosen not in _FULL and str(trainer.precision) == chosen:
            self.preset_precision = PresetPrecision(chosen, self.plain_precision)
            summary = next(
                (cb for cb in set_at_init(trainer).callbacks if type(cb).__name__ == "SpeedupsSummary"), None
            )
            self.preset_precision.bind(trainer, getattr(summary, "notes", None))

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._first, self._steps, self._validating_watched = True, 0, True
        self.trial_seconds = None
        self._trainer = trainer
        if _not_watched(trainer) is not None:
            return
        self._patches.wrap(trainer.strategy, "training_step", self._watched_training_step)
        self._patches.wrap(trainer.strategy, "backward", self._watched_backward)
        self._patches.wrap(trainer.strategy, "validation_step", self._watched_validation_step)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._first:
            return
        self._first = False
        why_not = _not_watched(trainer)
        if why_not is not None:
            if any(p.needs_trial for p in self.parts(trainer)):
                self.report(False, f"not tried: {why_not}")
            return
        watched = self.parts(trainer)
        tried = [p for p in watched if p.needs_trial]
        if watched and not tried:
            names = ", ".join(_name(p) for p in watched)
            self.report(False, f"nothing to try; watches the first {self.watch_steps} steps of {names}")
        if not tried:
            return
        start = time.perf_counter()
        names = ", ".join(_name(p) for p in tried)

        def trial() -> None:
            error = self._trial(trainer, pl_module, batch, batch_idx)
            if error is not None:
                raise error

        error = self._trial(trainer, pl_module, batch, batch_idx)
        changed = [p for p in tried if p.after_trial(trainer, pl_module, error)]
        if changed:  # a part took itself off where it saw the cause: try again with what is left
            error = self._trial(trainer, pl_module, batch, batch_idx)
            for p in tried:
                p.after_trial(trainer, pl_module, error)
        outcome = "passed"
        if error is not None:
            try:
                self._recover(trainer, pl_module, error, trial, "in a trial step of the first batch")
                outcome = "failed; what failed stepped aside"
            except Exception as own:  # the step fails without any part too: the user's own error, met in the step
                outcome = f"failed without the parts too (the model's own error: {error_phrase(own)})"
            else:  # what the passing trial saw, for the parts still on
                for p in self.parts(trainer):
                    p.after_trial(trainer, pl_module, None)
        self.trial_seconds = time.perf_counter() - start
        self.report(
            True,
            f"tried {names} on the first batch before the run took {'it' if len(tried) == 1 else 'them'}: {outcome} ({self.trial_seconds:.2f} s,"
            " one forward and backward pass, nothing kept)",
        )

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._steps += 1
        self._maybe_unwatch()

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validating_watched = False
            self._maybe_unwatch()

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._patches.undo()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._patches.undo()
        self._trainer = None

    def _maybe_unwatch(self) -> None:
        if self._steps >= self.watch_steps and not self._validating_watched:
            self._patches.undo()

    # ------------------------------------------------------------------------------------------- the trial
    def _trial(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> Optional[Exception]:
        """One step of the real model on the real batch as the run will take it, nothing kept; what it raised."""
        manual = not pl_module.automatic_optimization
        strategy = trainer.strategy
        parts = self.parts(trainer)
        try:
            with contextlib.ExitStack() as stack:
                # under manual optimization the step steps the optimizers: the weights are kept too
                stack.enter_context(step_trial(trainer, pl_module, batch, weights=manual))
                for part in parts:
                    stack.enter_context(part.trial_watch(trainer, pl_module))
                original = self._patches.original(strategy, "training_step")
                out = original(batch, batch_idx)
                loss = _loss(out)
                if not manual and loss is not None and loss.requires_grad:
                    loss.backward()
        except BadInput:
            raise
        except Exception as err:
            return err
        return None

    # -------------------------------------------------------------------------------------------- recovery
    def _recover(self, trainer: Any, pl_module: Any, error: BaseException, retry: Callable[[], Any], when: str) -> Any:
        """``retry()`` without the part that makes it fail: each part taken off in turn (and put back when its
        absence does not help), then all of them. The part whose absence lets it pass steps aside; if nothing
        helps, the error is the user's and the last one is raised as it is."""
        if getattr(error, _JUDGED, False) or refuses_the_run(error):
            raise error
        parts = self.parts(trainer)
        if not parts or wants_traceback():
            _judge(error)
            raise error
        why = f"{error_phrase(error)} {when}" + (f" at {raising_op(error)}" if raising_op(error) else "")
        for part in parts:
            resume = part.suspend(trainer, pl_module)
            try:
                out = retry()
            except BadInput:
                resume()
                raise
            except Exception as still:
                resume()
                _log.debug("without %s the step still fails: %s", part.part, error_phrase(still))
                continue
            part.step_aside(trainer, pl_module, why, error)
            return out
        resumes = [part.suspend(trainer, pl_module) for part in parts]
        try:
            out = retry()
        except Exception as plain:
            for resume in reversed(resumes):
                resume()
            _judge(plain)
            raise plain from None
        for part in parts:
            part.step_aside(trainer, pl_module, f"{why} (with {', '.join(_name(p) for p in parts)} together)", error)
        return out

    # --------------------------------------------------------------------------------------- the watched steps
    def _watched_training_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def training_step(*args: Any, **kwargs: Any) -> Any:
            self._last = (args, kwargs)
            if self._steps >= self.watch_steps:
                return original(*args, **kwargs)
            trainer = self._trainer_of(original)
            pl_module = trainer.lightning_module
            manual = not pl_module.automatic_optimization
            snapshot = _manual_snapshot(trainer, pl_module) if manual and self.parts(trainer) else None
            try:
                return original(*args, **kwargs)
            except Exception as err:

                def retry() -> Any:
                    if snapshot is not None:
                        snapshot.restore()
                    return original(*args, **kwargs)

                return self._recover(trainer, pl_module, err, retry, "in the first training steps")

        return training_step

    def _watched_backward(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def backward(closure_loss: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            trainer = self._trainer_of(original)
            pl_module = trainer.lightning_module
            if self._steps >= self.watch_steps or not pl_module.automatic_optimization:
                # under manual optimization the whole training_step is taken again (its watch is around this)
                return original(closure_loss, optimizer, *args, **kwargs)
            grads = _grads(pl_module)
            try:
                return original(closure_loss, optimizer, *args, **kwargs)
            except Exception as err:
                failed = err
                step_args, step_kwargs = self._last
                step = self._patches.original(trainer.strategy, "training_step")

                def retry() -> Any:
                    _restore_grads(pl_module, grads)
                    loss = _loss(step(*step_args, **step_kwargs))
                    if loss is None:
                        raise failed
                    loss = loss / max(1, int(trainer.accumulate_grad_batches))  # as Lightning's closure divides it
                    return original(loss, optimizer, *args, **kwargs)

                return self._recover(trainer, pl_module, err, retry, "in the backward pass of the first training steps")

        return backward

    def _watched_validation_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def validation_step(*args: Any, **kwargs: Any) -> Any:
            if not self._validating_watched:
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            except Exception as err:
                trainer = self._trainer_of(original)
                return self._recover(
                    trainer, trainer.lightning_module, err, lambda: original(*args, **kwargs), "in the first validation"
                )

        return validation_step

    def _trainer_of(self, method: Callable[..., Any]) -> Any:
        return self._trainer


# ------------------------------------------------------------------------------------------------- helpers
def _name(part: SpeedupCallback) -> str:
    if isinstance(part, PresetPrecision):
        return part.chosen
    return part.part


def _judge(error: BaseException) -> None:
    try:
        setattr(error, _JUDGED, True)
    except AttributeError:  # pragma: no cover - an exception class with __slots__
        pass


def _loss(outputs: Any) -> Optional[torch.Tensor]:
    """The loss of a ``training_step``'s output, as Lightning reads it (a tensor, or a mapping's ``"loss"``)."""
    if isinstance(outputs, Mapping):
        outputs = outputs.get("loss")
    return outputs if isinstance(outputs, torch.Tensor) else None


def _grads(pl_module: Any) -> Optional[list[tuple[torch.nn.Parameter, Optional[torch.Tensor]]]]:
    """The gradients accumulated so far (``None`` when there are none, the first step of an accumulation)."""
    params = [p for p in pl_module.parameters() if p.requires_grad]
    if all(p.grad is None for p in params):
        return None
    return [(p, None if p.grad is None else p.grad.detach().clone()) for p in params]


def _restore_grads(pl_module: Any, grads: Optional[list[tuple[torch.nn.Parameter, Optional[torch.Tensor]]]]) -> None:
    if grads is None:
        for p in pl_module.parameters():
            p.grad = None
        return
    for p, g in grads:
        p.grad = None if g is None else g.clone()


#: strategies whose wrapped modules run only inside their root's forward: a trial step outside the fit loop, or a
#: block run alone to compare its recomputation, would initialise the inner units as roots and break the run
_SHARDED = ("FSDPStrategy", "DeepSpeedStrategy", "ModelParallelStrategy", "XLAFSDPStrategy")


def _not_watched(trainer: Any) -> Optional[str]:
    """Why the first steps are not tried and watched in this run (``None`` when they are)."""
    if trainer.world_size > 1:
        # one process at a time: a rank that stepped aside alone would leave the others waiting
        return f"a run of {trainer.world_size} processes"
    if is_lightning(trainer.strategy, *_SHARDED):
        return f"{lightning_class_name(trainer.strategy)} runs its wrapped blocks only inside its own forward"
    return None


def _manual_snapshot(trainer: Any, pl_module: Any) -> TrainingSnapshot:
    return TrainingSnapshot.capture(root_module(trainer, pl_module), trainer.optimizers)


def parts_of(callbacks: Sequence[Any]) -> list[SpeedupCallback]:
    """The pack's parts among ``callbacks`` (for tests and reports)."""
    return [cb for cb in callbacks if isinstance(cb, SpeedupCallback)]
