"""How long a run is planned to be, read from the Trainer: a plan a user writes (``'3 epochs'``, ``'2000 steps'``,
``'10min'``), the Trainer's own limits, its steps per epoch, and a span said in words. The learning-rate schedule
(T01) and the start-up probe read it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Union

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer

from lightning_speedups.errors import SettingError
from lightning_speedups.trainer.attributes import set_at_init

#: Lightning's plan when ``max_epochs`` is not set (``_parse_loop_limits``): 1000 epochs
LIGHTNING_DEFAULT_EPOCHS = 1000
#: optimizer steps timed before a schedule over a time plan is built (the step time it converts with)
TIME_PLAN_STEPS = 10

_PLAN = re.compile(
    r"^\s*(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>steps?|epochs?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$", re.I
)
_CLOCK = re.compile(r"^\s*(?:(\d+):)?(?:(\d+):)?(\d+):(\d+)\s*$")  # [DD:][HH:]MM:SS, as Trainer(max_time=...)
_SECONDS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60}
_SECONDS.update({"minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600})


@dataclass(frozen=True)
class SchedulePlan:
    """How long a schedule spans, in the unit the user gave: ``"steps"`` (optimizer steps), ``"epochs"``
    or ``"seconds"`` of training."""

    amount: float
    unit: str

    def text(self) -> str:
        if self.unit == "seconds":
            return f"{self.amount:g} s"
        return f"{self.amount:g} {self.unit}"


def parse_plan(value: Union[int, float, str, None]) -> Optional[SchedulePlan]:
    """``speedups.lr_schedule.plan``: a number of optimizer steps, ``"N steps"``, ``"N epochs"`` or a time
    (``"90s"``, ``"10 min"``, ``"1.5h"``, ``"00:10:00"`` as ``Trainer(max_time=...)`` writes it).

    Raises:
        ValueError: anything else, or a plan that is not positive.

    Examples:
        >>> parse_plan(2000), parse_plan("3 epochs"), parse_plan("10min"), parse_plan("00:01:30")
        (SchedulePlan(amount=2000, unit='steps'), SchedulePlan(amount=3.0, unit='epochs'), \
SchedulePlan(amount=600.0, unit='seconds'), SchedulePlan(amount=90.0, unit='seconds'))
    """
    if value is None:
        return None
    hint = "a number of optimizer steps, 'N steps', 'N epochs' or a time ('90s', '10min', '1.5h', '00:10:00')"
    if isinstance(value, bool):
        raise SettingError(f"`plan` must be {hint}; got {value!r}.")
    if isinstance(value, (int, float)):
        if value <= 0 or value != int(value):
            raise SettingError(f"`plan` as a number is whole optimizer steps, at least 1; got {value!r}.")
        return SchedulePlan(int(value), "steps")
    text = str(value)
    match = _PLAN.match(text)
    if match:
        n, unit = float(match["n"]), match["unit"].lower()
        if unit.startswith("step"):
            if n != int(n) or n < 1:
                raise SettingError(f"`plan` {text!r}: steps are whole, at least 1.")
            return SchedulePlan(int(n), "steps")
        plan = SchedulePlan(n, "epochs") if unit.startswith("epoch") else SchedulePlan(n * _SECONDS[unit], "seconds")
    else:
        clock = _CLOCK.match(text)
        if clock is None:
            raise SettingError(f"`plan` must be {hint}; got {value!r}.")
        parts = [int(g) for g in clock.groups() if g is not None]
        seconds = 0
        for part, scale in zip(reversed(parts), (1, 60, 3600, 86400)):
            seconds += part * scale
        plan = SchedulePlan(float(seconds), "seconds")
    if plan.amount <= 0:
        raise SettingError(f"`plan` must be positive; got {value!r}.")
    return plan


def steps_per_epoch(trainer: pl.Trainer) -> Optional[float]:
    """Optimizer steps per epoch on this device (``None`` when the loader has no length)."""
    batches = trainer.num_training_batches
    if not math.isfinite(batches) or batches <= 0:
        return None
    return math.ceil(batches / max(int(trainer.accumulate_grad_batches), 1))


def planned_by_default(trainer: pl.Trainer) -> bool:
    """Whether the run's length is Lightning's default, not the user's: no ``max_epochs``, ``max_steps``
    or ``max_time`` set, so Lightning plans :data:`LIGHTNING_DEFAULT_EPOCHS` epochs."""
    return (
        trainer.max_epochs == LIGHTNING_DEFAULT_EPOCHS
        and trainer.max_steps == -1
        and not any(isinstance(cb, Timer) for cb in set_at_init(trainer).callbacks)
    )


def timer_seconds(trainer: pl.Trainer) -> Optional[float]:
    """The training time the trainer's ``max_time`` leaves, in seconds (``None`` without one)."""
    for cb in set_at_init(trainer).callbacks:
        left = cb.time_remaining("train") if isinstance(cb, Timer) else None
        if left is not None:
            return float(left)
    return None


def span_text(steps: int, per_epoch: Optional[float]) -> str:
    """``"2,229 optimizer steps (4.75 epochs)"``: a schedule's span in both units a user counts in.

    Examples:
        >>> span_text(2229, 469), span_text(500, None)
        ('2,229 optimizer steps (4.75 epochs)', '500 optimizer steps (epochs unknown: the loader has no length)')
    """
    n = steps / per_epoch if per_epoch else None
    epochs = "epochs unknown: the loader has no length" if n is None else f"{n:.3g} epoch{'' if n == 1 else 's'}"
    return f"{steps:,} optimizer steps ({epochs})"
