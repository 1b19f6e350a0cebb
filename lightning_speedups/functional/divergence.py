"""T01: tell a diverging run from a noisy one, step by step, from its training loss.

A one-cycle schedule whose peak is too high shows it during the warm-up and around the peak: the loss turns
non-finite, or climbs far above the best it had reached. :class:`DivergenceWatch` reads the loss of each step,
smooths it as Lightning's ``LearningRateFinder`` does (an exponential moving average with ``beta`` 0.98 and bias
correction) and calls it a divergence on the same rule Lightning's finder stops its sweep on (``early_stop_threshold``
4.0: the smoothed loss above four times its best), with one more condition: the smoothed loss is also above where the
watch began, so a loss near zero that wobbles (four times 0.001 is still 0.004) is not read as a divergence. The
callback that acts on it is :class:`lightning_speedups.callbacks.LRSchedule` (``back_offs``).

Examples:
    >>> watch = DivergenceWatch()
    >>> [watch.update(x) for x in (2.3, 1.0, 0.6, 0.5)]
    [None, None, None, None]
    >>> watch.update(float("nan"))
    'the loss is nan'
    >>> watch = DivergenceWatch()
    >>> [watch.update(x) for x in [2.3] * 5 + [0.4] * 200]
    ...                                                           # doctest: +ELLIPSIS
    [None, ...]
    >>> [r for r in (watch.update(50.0) for _ in range(20)) if r][0]  # doctest: +ELLIPSIS
    'the smoothed loss rose to ... (4x its best, ...'
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["DIVERGENCE_BETA", "DIVERGENCE_THRESHOLD", "DivergenceWatch"]

#: the loss is smoothed as Lightning's LR finder smooths it (``_LRCallback(beta=0.98)``)
DIVERGENCE_BETA = 0.98
#: a smoothed loss above this many times its best is a divergence (Lightning's LR finder: ``early_stop_threshold``)
DIVERGENCE_THRESHOLD = 4.0


class DivergenceWatch:
    """The running state of one watch: the smoothed loss, its best and its first value; all plain floats, so the
    state goes into a checkpoint (:meth:`state_dict`) and a resumed run judges its steps exactly as the first did."""

    def __init__(self, beta: float = DIVERGENCE_BETA, threshold: float = DIVERGENCE_THRESHOLD) -> None:
        self.beta = beta
        self.threshold = threshold
        self.reset()

    def reset(self) -> None:
        """Start over (after the run went back to an earlier state)."""
        self.average = 0.0
        self.steps = 0
        self.best = math.inf
        self.first = math.nan

    def update(self, loss: float) -> Optional[str]:
        """Take one step's loss; returns why the run diverged at it, or ``None``."""
        if not math.isfinite(loss):
            return f"the loss is {loss}"
        self.steps += 1
        self.average = self.beta * self.average + (1 - self.beta) * loss
        smoothed = self.average / (1 - self.beta**self.steps)
        if self.steps == 1:
            self.first = smoothed
        if smoothed > self.threshold * self.best and smoothed > self.first:
            return (
                f"the smoothed loss rose to {smoothed:.4g} ({self.threshold:g}x its best, {self.best:.4g}, and above"
                f" its {self.first:.4g} where the watch began)"
            )
        self.best = min(self.best, smoothed)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"average": self.average, "steps": self.steps, "best": self.best, "first": self.first}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.average = float(state["average"])
        self.steps = int(state["steps"])
        self.best = float(state["best"])
        self.first = float(state["first"])
