"""T04 largest batch that fits, and learning-rate scaling: plain functions, no Trainer needed.

* **The search** — :func:`find_largest_batch_size` finds the largest multiple of ``multiple`` for
  which a ``fits(batch_size)`` predicate holds (doubling, then bisection), and
  :func:`largest_divisor_batch` picks a batch that divides an effective batch.
* **Learning-rate scaling** — :func:`lr_scale_factor` (linear or square-root rule),
  :func:`scale_optimizer_lrs` and :func:`scale_lr_scheduler` (peak / base rates of one-cycle and
  cyclic schedules, and schedule lengths counted in steps).

What a trial measures (memory budgets and the peak memory of a step) is in
:mod:`lightning_speedups.functional.memory`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any, Optional

import torch
from torch import Tensor

from lightning_speedups.errors import SettingError
from lightning_speedups.functional.memory import is_out_of_memory

__all__ = [
    "SCHEDULER_LR_ATTRS",
    "find_largest_batch_size",
    "largest_divisor_batch",
    "lr_scale_factor",
    "round_down",
    "scale_lr_scheduler",
    "scale_optimizer_lrs",
]


def round_down(value: int, multiple: int) -> int:
    """``value`` rounded down to a multiple of ``multiple`` (0 when below it)."""
    return (int(value) // multiple) * multiple


def find_largest_batch_size(
    fits: Callable[[int], bool],
    *,
    multiple: int = 8,
    max_batch_size: Optional[int] = None,
    max_trials: int = 25,
) -> tuple[int, list[tuple[int, bool]]]:
    """The largest multiple of ``multiple`` for which ``fits`` holds, assuming memory grows with the batch.

    Tries ``multiple``, then doubles until a size does not fit (or ``max_batch_size`` is reached),
    then bisects between the last size that fitted and the first that did not, on multiples of
    ``multiple`` only. Never tries a size above twice the largest one that fits.

    Args:
        fits: ``fits(batch_size) -> bool``; may also raise an out-of-memory error
            (:func:`is_out_of_memory`), which counts as "does not fit".
        multiple: the granularity of the result (8 suits tensor cores; 1 for any size).
        max_batch_size: the largest size to try (rounded down to ``multiple``).
        max_trials: the most calls of ``fits``.

    Returns:
        ``(batch_size, trials)`` where ``batch_size`` is 0 when not even ``multiple`` fits and
        ``trials`` lists ``(size, fitted)`` in the order tried.

    Example::

        >>> find_largest_batch_size(lambda b: b <= 100, multiple=8)[0]
        96
    """
    if multiple < 1:
        raise SettingError(f"`multiple` must be >= 1; got {multiple!r}.")
    cap_k = None if max_batch_size is None else max_batch_size // multiple
    if cap_k is not None and cap_k < 1:
        return 0, []
    trials: list[tuple[int, bool]] = []

    def check(k: int) -> bool:
        size = k * multiple
        try:
            ok = bool(fits(size))
        except Exception as ex:
            if not is_out_of_memory(ex):
                raise
            ok = False
        trials.append((size, ok))
        return ok

    lo, hi, k = 0, None, 1
    while hi is None and len(trials) < max_trials:
        if check(k):
            lo = k
            if cap_k is not None and k >= cap_k:
                break
            k = 2 * k if cap_k is None else min(2 * k, cap_k)
        else:
            hi = k
    while hi is not None and hi - lo > 1 and len(trials) < max_trials:
        mid = (lo + hi) // 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    return lo * multiple, trials


def largest_divisor_batch(limit: int, total: int, multiple: int = 8) -> int:
    """The largest ``b <= limit``, multiple of ``multiple``, that divides ``total``; 0 if none.

    Used to keep an effective batch ``total`` (= batch x accumulation) constant.

    Example::

        >>> largest_divisor_batch(96, 256, 8)
        64
    """
    for b in range(round_down(min(limit, total), multiple), 0, -multiple):
        if total % b == 0:
            return b
    return 0


def lr_scale_factor(new_batch_size: float, base_batch_size: float, rule: Optional[str] = "linear") -> float:
    """The learning-rate factor for a batch change: ``new / base`` (linear) or its square root (sqrt).

    The linear rule (Goyal et al., 2017) suits SGD with momentum; the square-root rule (Krizhevsky,
    2014; Hoffer et al., 2017) is often better for Adam-type optimizers. ``rule=None`` gives 1.

    Example::

        >>> lr_scale_factor(512, 256), lr_scale_factor(1024, 256, "sqrt")
        (2.0, 2.0)
    """
    if rule is None:
        return 1.0
    if base_batch_size <= 0 or new_batch_size <= 0:
        raise SettingError(f"batch sizes must be positive; got new={new_batch_size}, base={base_batch_size}.")
    ratio = float(new_batch_size) / float(base_batch_size)
    if rule == "linear":
        return ratio
    if rule == "sqrt":
        return math.sqrt(ratio)
    raise SettingError(f"`lr_rule` must be 'linear', 'sqrt' or None; got {rule!r}.")


_GROUP_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")
#: Scheduler attributes that hold learning rates (scaled with the batch size).
SCHEDULER_LR_ATTRS = ("base_lrs", "max_lrs", "min_lrs", "_last_lr", "eta_min")


def _times(value: Any, factor: float) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, Tensor):
        with torch.no_grad():  # a new tensor: the same tensor may sit under several keys
            return value * factor
    if isinstance(value, (int, float)):
        return value * factor
    if isinstance(value, (list, tuple)):
        return type(value)(_times(v, factor) for v in value)
    return value


def scale_optimizer_lrs(optimizer: torch.optim.Optimizer, factor: float) -> list[float]:
    """Multiply every parameter group's learning rates by ``factor``, in place.

    Scales ``lr`` and the keys schedulers keep in the groups: ``initial_lr`` (all schedulers),
    ``max_lr`` / ``min_lr`` (``OneCycleLR``). Returns the new ``lr`` of each group.

    Example::

        >>> opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        >>> [round(lr, 6) for lr in scale_optimizer_lrs(opt, 3.0)]
        [0.3]
    """
    for group in optimizer.param_groups:
        for key in _GROUP_LR_KEYS:
            if key in group:
                group[key] = _times(group[key], factor)
    return [float(group["lr"]) for group in optimizer.param_groups]


def _scale_len(value: Any, factor: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return value
    return max(1, int(round(value * factor)))


def scale_lr_scheduler(scheduler: Any, factor: float = 1.0, length_factor: Optional[float] = None) -> list[str]:
    """Scale a scheduler's learning rates by ``factor`` and its lengths (in steps) by ``length_factor``.

    The optimizer's own groups are scaled by :func:`scale_optimizer_lrs`; this scales what the
    scheduler keeps itself: ``base_lrs``, ``CyclicLR.max_lrs``, ``ReduceLROnPlateau.min_lrs``,
    ``eta_min`` of the cosine schedules. A freshly built schedule whose rates are all scaled by the same
    factor is exactly the schedule built with scaled rates. ``SequentialLR`` / ``ChainedScheduler`` are
    handled through their children.

    ``length_factor`` (``old effective batch / new effective batch``) keeps a schedule stepped per
    optimizer step equally long in *samples* when the batch changes: ``OneCycleLR.total_steps`` and its
    phases, ``CyclicLR``'s cycle, ``LinearLR`` / ``ConstantLR`` / ``PolynomialLR.total_iters`` (warm-ups),
    ``CosineAnnealingLR.T_max``, ``StepLR.step_size``, ``MultiStepLR.milestones``,
    ``CosineAnnealingWarmRestarts.T_0``, ``SequentialLR.milestones``. Only pass it for schedulers that
    step every optimizer step (Lightning's ``interval="step"``), and before they have stepped.

    Returns:
        The names of the attributes changed (for the log).
    """
    changed: list[str] = []
    name = type(scheduler).__name__
    if factor != 1.0:
        for attr in SCHEDULER_LR_ATTRS:
            if hasattr(scheduler, attr) and not callable(getattr(scheduler, attr)):
                value = getattr(scheduler, attr)
                if isinstance(value, (int, float, list, tuple, Tensor)) and not isinstance(value, bool):
                    setattr(scheduler, attr, _times(value, factor))
                    changed.append(f"{name}.{attr}")
    if length_factor is not None and length_factor != 1.0:
        f = length_factor
        if name == "OneCycleLR" and hasattr(scheduler, "total_steps"):
            old = scheduler.total_steps
            new = max(2, int(math.ceil(old * f)))
            for phase in getattr(scheduler, "_schedule_phases", []):
                phase["end_step"] = (phase["end_step"] + 1) * new / old - 1
            phases = getattr(scheduler, "_schedule_phases", [])
            if phases:
                phases[-1]["end_step"] = new - 1
            scheduler.total_steps = new
            changed.append(f"{name}.total_steps")
        if name == "CyclicLR" and hasattr(scheduler, "total_size"):
            scheduler.total_size = max(2.0, float(round(scheduler.total_size * f)))
            changed.append(f"{name}.total_size")
        for attr in ("total_iters", "T_max", "step_size", "T_0", "T_i"):
            if hasattr(scheduler, attr) and isinstance(getattr(scheduler, attr), (int, float)):
                setattr(scheduler, attr, _scale_len(getattr(scheduler, attr), f))
                changed.append(f"{name}.{attr}")
        milestones = getattr(scheduler, "milestones", None)
        if isinstance(milestones, Counter):  # MultiStepLR
            scheduler.milestones = Counter({_scale_len(m, f): c for m, c in milestones.items()})
            changed.append(f"{name}.milestones")
        if isinstance(getattr(scheduler, "_milestones", None), list):  # private: SequentialLR keeps them only here
            scheduler._milestones = [_scale_len(m, f) for m in scheduler._milestones]
            changed.append(f"{name}.milestones")
    for child in getattr(scheduler, "_schedulers", []) or []:
        changed.extend(scale_lr_scheduler(child, factor, length_factor))
    return changed
