"""Time to a target metric (``bench --target val_acc=0.90``): the target, its direction, and the probe
that checks the metric at regular validation points and stops the run when it is reached."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from lightning.pytorch.callbacks import Callback

from lightning_speedups.bench.measure import batch_size_of
from lightning_speedups.errors import SettingError

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

    Examples:
        >>> infer_mode("val_acc"), infer_mode("val_loss"), infer_mode("valid/perplexity")
        ('max', 'min', 'min')
    """
    low = metric.lower()
    return "min" if any(word in low for word in LOWER_IS_BETTER) else "max"


def parse_target(text: str, mode: Optional[str] = None) -> Target:
    """``"val_acc=0.90"`` (direction from the name), ``"val_loss<=0.3"`` or ``"val_acc>=0.9"``.

    Raises:
        ValueError: not ``METRIC=VALUE`` / ``METRIC>=VALUE`` / ``METRIC<=VALUE`` with a number.

    Examples:
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
        raise SettingError(f"--target {text!r}: write METRIC=VALUE, e.g. val_acc=0.90 (or val_loss<=0.3).")
    name = name.strip()
    try:
        number = float(value)
    except ValueError:
        raise SettingError(f"--target {text!r}: {value.strip()!r} is not a number.") from None
    if not name or not math.isfinite(number):
        raise SettingError(f"--target {text!r}: write METRIC=VALUE, e.g. val_acc=0.90.")
    if mode is not None and given is not None and mode != given:
        raise SettingError(f"--target {text!r} says {given} but --target-mode says {mode}.")
    return Target(name, number, given or mode or infer_mode(name))


def crossing_time(checks: list[dict[str, Any]], target: Target) -> Optional[float]:
    """When a run's metric crossed ``target``: linear in training time between the first check that
    reached it and the check before (``None`` if none reached it; the first check's time if it did).

    Examples:
        >>> checks = [{"train_s": 10.0, "value": 0.25}, {"train_s": 20.0, "value": 0.75}]
        >>> crossing_time(checks, Target("val_acc", 0.5, "max"))
        15.0
    """
    before: Optional[dict[str, Any]] = None
    for check in checks:
        value = check.get("value")
        if target.reached(value):
            if before is None or before.get("value") is None or value == before["value"]:
                return float(check["train_s"])
            share = (target.value - before["value"]) / (value - before["value"])
            share = min(max(share, 0.0), 1.0)
            return float(before["train_s"] + share * (check["train_s"] - before["train_s"]))
        if value is not None and math.isfinite(value):
            before = check
    return None


#: validation checks after a schedule has annealed with no better value than before them: the curve has flattened,
#: the run is a miss and stops (a one-cycle's learning rate is at its floor there; what it has not reached by then it
#: reaches, if ever, at the pace of the floor). Measured on held-out curves: ``benchmarks/flat_span.py``.
FLAT_CHECKS = 3


def _finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


def flattened(checks: Sequence[Mapping[str, Any]], annealed_step: Optional[int], span: int, target: Target) -> bool:
    """Whether a run's curve has flattened short of ``target``: its last ``span`` checks all ran after the schedule
    annealed (``annealed_step``), none beat the best value before them, and the target lies beyond the best by more
    than its last checks flicker and more than the metric's resolution (a plateau one validation sample
    under the target touches it by noise: that run is not stopped; ``benchmarks/flat_span.py``).

    Examples:
        >>> goal = Target("val_acc", 0.99, "max")
        >>> curve = lambda *v: [{"step": 10 * (i + 1), "value": x} for i, x in enumerate(v)]
        >>> flattened(curve(0.90, 0.97, 0.972, 0.972, 0.972, 0.972), 20, 3, goal)
        True
        >>> flattened(curve(0.90, 0.986, 0.989, 0.989, 0.989, 0.989), 20, 3, goal)  # one sample (0.003) under 0.99
        False
        >>> flattened(curve(0.90, 0.989, 0.986, 0.989, 0.986, 0.989), 20, 3, goal)  # flickers within reach of 0.99
        False
        >>> flattened(curve(0.90, 0.97, 0.972, 0.972, 0.975, 0.972), 20, 3, goal)  # still improving
        False
    """
    if annealed_step is None or len(checks) <= span:
        return False
    last = checks[-span:]
    if last[0]["step"] < annealed_step:
        return False
    sign = 1.0 if target.mode == "max" else -1.0
    before = [sign * c["value"] for c in checks[:-span] if _finite(c["value"])]
    if not before:
        return False
    best = max(before)
    if any(_finite(c["value"]) and sign * c["value"] > best for c in last):
        return False
    flat = [sign * c["value"] for c in last if _finite(c["value"])]
    flicker = max(flat) - min(flat) if flat else 0.0
    # the metric's resolution: the smallest step between two values it took (an accuracy on N samples moves by 1/N)
    values = sorted({c["value"] for c in checks if _finite(c["value"])})
    resolution = min((b - a for a, b in zip(values, values[1:])), default=0.0)
    return sign * target.value > best + max(flicker, resolution)


class TargetProbe(Callback):
    """Trains until a logged metric reaches a target, read at every validation; times it.

    The training clock runs from ``fit`` start (so a range test at the start counts) and stops during
    validation (the check is the instrument, not the training). It stops the run when the target is
    reached, when the training clock passes ``max_time``, or once the curve has flattened after a schedule annealed.

    Args:
        target: the goal.
        max_time: seconds of training after which the run gives up (a miss).
        clock: seconds (tests pass a fake one).
        annealed_step: the optimizer step where the run's learning-rate schedule ends (``lr_schedule.plan``);
            ``None``: no schedule, the run is only stopped by the target or ``max_time``.
        flat_checks: after ``annealed_step``, this many validation checks in a row with no better value than the
            best before them stop the run as a miss (``flattened``).
    """

    def __init__(
        self,
        target: Target,
        max_time: float = math.inf,
        clock: Callable[[], float] = time.perf_counter,
        annealed_step: Optional[int] = None,
        flat_checks: int = FLAT_CHECKS,
    ) -> None:
        super().__init__()
        self.target = target
        self.max_time = max_time
        self.annealed_step = annealed_step
        self.flat_checks = flat_checks
        self.flattened: Optional[dict[str, Any]] = None  # the check that found the curve flat
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
        n = batch_size_of(batch)
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
        elif self.reached_at is None and self._flat():
            self.flattened = check
            trainer.should_stop = True

    def _flat(self) -> bool:
        """The curve has flattened short of the target after the schedule annealed (:func:`flattened`)."""
        return flattened(self.checks, self.annealed_step, self.flat_checks, self.target)

    def crossing_s(self) -> Optional[float]:
        """The training time at which the metric crossed the target, read between the check that first
        reached it and the one before (linear in time): the checks' spacing stops adding its own noise."""
        hit = self.reached_at
        if hit is None:
            return None
        return crossing_time(self.checks, self.target)

    def results(self) -> dict[str, Any]:
        hit = self.reached_at
        seen = [c["value"] for c in self.checks if c["value"] is not None]
        best = (max(seen) if self.target.mode == "max" else min(seen)) if seen else None
        return {
            "target": self.target.text(),
            "reached": hit is not None,
            "time_to_target_s": None if hit is None else hit["train_s"],
            "crossing_s": self.crossing_s(),
            "steps_to_target": None if hit is None else hit["step"],
            "samples_to_target": None if hit is None else hit["samples"],
            "best_value": best,
            "checks": list(self.checks),
            "train_s": self.train_s(),
            "val_s": self.val_s,
            "timed_out": self.timed_out,
            "flattened": self.flattened is not None,
            "flat_checks": self.flat_checks if self.annealed_step is not None else None,
            "annealed_step": self.annealed_step,
            "metric_seen": any(c["value"] is not None for c in self.checks),
            "batch_size": self.batch_size,
        }
