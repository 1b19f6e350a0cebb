"""The start-up probe as a callback: ``auto`` settings decided on the user's own model, at the first batch."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import BadInput, SettingError
from lightning_speedups.functional.failures import error_phrase
from lightning_speedups.functional.probe import MIN_ROUNDS, Axis, Option, ProbeResult, decide_axes, run_probe, unprobed
from lightning_speedups.functional.timing import Timeline
from lightning_speedups.trainer.attributes import set_at_init
from lightning_speedups.trainer.trial_steps import step_trial


def _loss(outputs: Any) -> Optional[torch.Tensor]:
    if isinstance(outputs, Mapping):
        outputs = outputs.get("loss")
    if isinstance(outputs, torch.Tensor) and outputs.requires_grad and outputs.numel() == 1:
        return outputs
    return None


class AutoProbe(SpeedupCallback):
    """Decides the pack's ``auto`` settings by timing them on the user's model, at the first training batch.

    The parts whose gain depends on the hardware *and* the model (``channels_last: auto``,
    ``optimizer: auto``, ``precision: auto`` on a CPU with bf16 units) wait for this callback instead of
    deciding from device facts. At the first batch of ``fit`` it asks every part for its candidates
    (:meth:`SpeedupCallback.probe_axes`), then runs a few forward / backward / optimizer steps of the
    model on that batch through the strategy (its precision context, its wrapper), each candidate timed
    interleaved with the baseline and paired per round, with an A/A pair for the noise floor
    (:func:`~lightning_speedups.functional.probe.run_probe`: bench's timer and pairing rule). A
    candidate is kept only when it is faster beyond the noise; otherwise the part stays as plain
    Lightning runs it.

    Nothing the steps touch is kept: the weights, buffers (BatchNorm statistics), module modes, plain
    attributes, optimizer state, the random generators and the precision plugin's state are put back
    from memory before the batch's real step (a run after the probe equals a run without it, step for
    step), and ``self.log`` calls of those steps are dropped. The decisions and figures are in the
    start-up summary, which waits for them.

    After a calibration (the run's own cold start, which a run without the probe pays too) its rounds cost
    ``(warmup + steps) x rounds x (options + 2)`` steps
    (:func:`~lightning_speedups.functional.probe.probe_plan`: 100 for three options with the defaults);
    it runs as many rounds as fit ``max_seconds`` and ``max_fraction`` of the run's planned time, and is
    skipped, every part staying as it is, when three do not (a run too short to repay it), under manual
    optimization, or with no optimizer. On several processes every rank times the same steps and rank zero's decisions
    are broadcast.

    Args:
        rounds: timed rounds at most (at least 3; fewer when the budget is short).
        steps: timed steps per candidate per round.
        warmup: untimed steps after each switch.
        min_gain: the smallest gain kept on top of the noise floor.
        max_seconds: the probe's budget in seconds.
        max_fraction: the largest share of the run's planned training time the probe may cost (``None``: no
            such limit, only ``max_seconds``).
        clock: the host clock (seconds), injectable for tests; CUDA runs time with CUDA events.

    Example::

        trainer = Trainer(callbacks=[ChannelsLast(auto=True), FusedOptimizer("auto"), AutoProbe()])
    """

    part = "auto_probe"

    def __init__(
        self,
        rounds: int = 5,
        steps: int = 3,
        warmup: int = 1,
        min_gain: float = 0.02,
        max_seconds: float = 8.0,
        max_fraction: Optional[float] = 0.05,
        clock: Optional[Callable[[], float]] = None,
    ) -> None:
        super().__init__()
        if rounds < MIN_ROUNDS or steps < 1 or warmup < 0:
            raise SettingError(
                f"AutoProbe: `rounds` must be >= {MIN_ROUNDS}, `steps` >= 1 and `warmup` >= 0; got {rounds}, {steps}, {warmup}."
            )
        if not (min_gain >= 0 and max_seconds > 0 and (max_fraction is None or 0 < max_fraction <= 1)):
            raise SettingError(
                "AutoProbe: `min_gain` must be >= 0, `max_seconds` > 0 and `max_fraction` in (0, 1];"
                f" got {min_gain}, {max_seconds}, {max_fraction}."
            )
        self.rounds, self.steps, self.warmup = rounds, steps, warmup
        self.min_gain, self.max_seconds, self.max_fraction = min_gain, max_seconds, max_fraction
        self.clock = clock
        self.result: Optional[ProbeResult] = None
        self._pending = False

    @property
    def awaits_probe(self) -> bool:
        return self._pending

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._pending = True
        self.result = None

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._pending:
            return
        self._pending = False
        parts = [cb for cb in set_at_init(trainer).callbacks if isinstance(cb, SpeedupCallback) and cb is not self]
        axes = [axis for cb in parts for axis in _axes_of(cb, trainer, pl_module)]
        if not axes:
            self.report(False, "skipped, no auto setting waits for it")
            return
        why = self._refusal(trainer, pl_module)
        if why:
            decisions = unprobed(axes, why)
            self.report(False, f"skipped, {why}")
        else:
            result = self._probe(trainer, pl_module, batch, batch_idx, axes)
            self.result = result
            decisions = trainer.strategy.broadcast(result.decisions)
            if result.skipped:
                self.report(False, f"skipped after {result.seconds:.2f} s ({result.steps} steps): {result.skipped}")
            else:
                self.report(
                    True,
                    f"{len(axes)} auto setting(s) timed on this model in {result.seconds:.2f} s ({result.steps} steps,"
                    f" {result.rounds} rounds, {1000 * (result.step_s or 0):.0f} ms a step, A/A noise"
                    f" {100 * result.noise:.1f}%)",
                )
        decide_axes(axes, decisions, failed=lambda axis, err: _aside(axis, trainer, pl_module, err))

    @staticmethod
    def _refusal(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str:
        if not pl_module.automatic_optimization:
            return "the model steps its own optimizers (manual optimization)"
        if len(trainer.optimizers) != 1:
            return "no optimizer to step" if not trainer.optimizers else "several optimizers"
        return ""

    def _planned_steps(self, trainer: pl.Trainer) -> Optional[float]:
        try:
            steps = float(trainer.estimated_stepping_batches) * max(1, int(trainer.accumulate_grad_batches))
        except (RuntimeError, TypeError, ValueError, AttributeError):  # Lightning cannot tell before the loop runs
            return None
        # Lightning says -1 or inf when it cannot tell (an iterable loader without a length, no max_steps)
        return steps if math.isfinite(steps) and steps > 0 else None

    def _probe(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, axes: Sequence[Axis]
    ) -> ProbeResult:
        strategy = trainer.strategy
        optimizer = trainer.optimizers[0]
        trial = contextlib.ExitStack()
        wall = self.clock or time.perf_counter
        start = wall()
        try:
            # a training_step that changes its batch in place finds it as the loader gave it; self.log dropped
            trial.enter_context(step_trial(trainer, pl_module, batch))
        except Exception as err:  # the model's state cannot be kept aside: nothing is tried, nothing decided
            trial.close()
            why = f"its snapshot of the model raised {error_phrase(err)}"
            failed = ProbeResult(skipped=why, seconds=wall() - start)
            failed.decisions = unprobed(axes, why)
            return failed

        def step(options: Sequence[Option]) -> None:
            data = batch
            for option in options:
                if option.batch is not None:
                    data = option.batch(data)
            with contextlib.ExitStack() as stack:
                for option in options:
                    if option.context is not None:
                        stack.enter_context(option.context())
                outputs = strategy.training_step(data, batch_idx)
            loss = _loss(outputs)
            if loss is None:
                raise _NoLoss("training_step returned no loss with a gradient")
            strategy.backward(loss, optimizer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        try:
            return run_probe(
                step,
                axes,
                timeline=Timeline(pl_module.device, clock=self.clock),
                rounds=self.rounds,
                steps=self.steps,
                warmup=self.warmup,
                min_gain=self.min_gain,
                max_seconds=self.max_seconds,
                planned_steps=self._planned_steps(trainer),
                max_fraction=self.max_fraction,
                wall=wall,
                agree=strategy.broadcast,
            )
        except Exception as err:  # a model the steps cannot run outside the loop: nothing is decided
            why = str(err) if isinstance(err, _NoLoss) else f"a probe step raised {error_phrase(err)}"
            failed = ProbeResult(skipped=why, seconds=wall() - start)
            failed.decisions = unprobed(axes, why)
            return failed
        finally:
            trial.close()  # weights, optimizer state, generators, precision plugin, batch: as before the probe


def _axes_of(part: SpeedupCallback, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[Axis]:
    """The part's candidates; a part that fails to name them steps aside (the others are still probed)."""
    try:
        return part.probe_axes(trainer, pl_module)
    except BadInput:
        raise
    except Exception as err:
        part.step_aside(trainer, pl_module, f"{error_phrase(err)} (naming its candidates for the start-up probe)", err)
        return []


def _aside(axis: Axis, trainer: pl.Trainer, pl_module: pl.LightningModule, err: Exception) -> None:
    """An axis whose part failed to take the probe's decision: the part steps aside."""
    part = getattr(axis.decide, "__self__", None)
    if isinstance(part, SpeedupCallback):
        part.step_aside(trainer, pl_module, f"{error_phrase(err)} (taking the start-up probe's decision)", err)
    else:
        raise err


class _NoLoss(RuntimeError):
    pass
