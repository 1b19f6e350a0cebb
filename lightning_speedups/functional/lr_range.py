"""T01: read a learning-rate range test (Smith 2015/2017) and pick the peak of a one-cycle schedule.

A range test trains a few steps while the learning rate grows exponentially and records the (smoothed)
loss at each. The pack runs the test itself, as a sweep through the trainer's own fit loop undone from memory
(:class:`lightning_speedups.callbacks.LRSchedule` with ``max_lr="auto"``; Lightning's ``LearningRateFinder`` is not
used); this module only reads its ``lr`` / ``loss`` lists, so the choice is testable on made-up curves.

Examples:
    >>> lrs = [10 ** (-5 + i / 10) for i in range(50)]            # 1e-5 .. ~8e-1
    >>> losses = [2.3 - 1.5 * min(1.0, max(0.0, (i - 10) / 25)) + (0.5 * (i - 40) if i > 40 else 0) for i in range(50)]
    >>> pick = pick_peak_lr(lrs, losses)
    >>> round(pick.min_loss_lr, 4), round(pick.lr, 5)
    (0.0316, 0.00316)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from lightning_speedups.errors import SettingError

__all__ = ["PEAK_DIVISOR", "RangePick", "pick_peak_lr", "resmooth", "steepest_lr"]

#: the peak is the learning rate of the lowest loss divided by this (a decade below it: the classic "min/10")
PEAK_DIVISOR = 10.0


def resmooth(losses: Sequence[float], window: int = 5) -> list[float]:
    """A centred moving average over ``window`` points (fewer at the ends; non-finite points skipped)."""
    half = window // 2
    out = []
    for i in range(len(losses)):
        vals = [v for v in losses[max(0, i - half) : i + half + 1] if math.isfinite(v)]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


@dataclass(frozen=True)
class RangePick:
    """What a range test chose.

    Attributes:
        lr: the peak learning rate to use.
        min_loss_lr: the learning rate at the lowest (smoothed) loss.
        steepest_lr: the learning rate of the steepest descent (Lightning's ``suggestion()``), if any.
        points: how many finite points the test had.
        rule: how ``lr`` was chosen, in words.
    """

    lr: float
    min_loss_lr: float
    steepest_lr: Optional[float]
    points: int
    rule: str


def _finite(lrs: Sequence[float], losses: Sequence[float]) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in zip(lrs, losses) if a > 0 and math.isfinite(a) and math.isfinite(b)]


def steepest_lr(
    lrs: Sequence[float], losses: Sequence[float], skip_begin: int = 10, skip_end: int = 1
) -> Optional[float]:
    """The learning rate where the loss falls fastest per decade (``None`` with too few points).

    Examples:
        >>> steepest_lr([1e-4, 1e-3, 1e-2, 1e-1], [2.0, 1.9, 1.0, 3.0], skip_begin=0, skip_end=0)
        0.001
    """
    pts = _finite(lrs, losses)
    pts = pts[skip_begin : len(pts) - skip_end if skip_end else None]
    if len(pts) < 3:
        return None
    best, best_slope = None, math.inf
    for (a, la), (b, lb) in zip(pts, pts[1:]):
        if b <= a:
            continue
        slope = (lb - la) / (math.log10(b) - math.log10(a))
        if slope < best_slope:
            best, best_slope = a, slope
    return best


def pick_peak_lr(lrs: Sequence[float], losses: Sequence[float], divisor: float = PEAK_DIVISOR) -> RangePick:
    """The peak learning rate of a one-cycle schedule from a range test.

    The lowest loss marks the edge of stability; the peak is ``divisor`` below it (a decade by default,
    the classic "min/10" rule), or the steepest-descent point when that lies between the two and at
    least ``sqrt(divisor)`` below the lowest loss (half a decade): a steep drop right next to the minimum
    is the noise of the last steps before the edge, not a peak to train at. (Measured: on the
    Fashion-MNIST reference, one seed's loss kept falling to lr 0.50 with its steepest drop at 0.44;
    peaking there is at the edge of divergence.)

    Examples:
        >>> lrs = [10 ** (-4 + i / 10) for i in range(40)]               # 1e-4 .. ~8e-1
        >>> losses = [2.0 - 0.02 * i for i in range(38)] + [1.0, 1.5]     # steepest drop at i=37: 0.5 -> 0.63
        >>> pick_peak_lr(lrs, losses).lr < 0.1                            # not 0.5: half a decade from the edge
        True

    Raises:
        ValueError: fewer than 3 finite points (the test diverged at once, or did not run).
    """
    pts = _finite(lrs, losses)
    if len(pts) < 3:
        raise SettingError(
            f"the learning-rate range test has {len(pts)} finite point(s); it needs at least 3 (it diverged at"
            " once: lower its start, or give lr_schedule.max_lr a number)."
        )
    low = min(range(len(pts)), key=lambda i: pts[i][1])
    min_lr = pts[low][0]
    before = pts[: low + 1]  # the steepest descent on the way down, not a noisy drop after the minimum
    steep = steepest_lr(
        [p[0] for p in before], [p[1] for p in before], skip_begin=min(10, len(before) // 5), skip_end=0
    )
    lr = min_lr / divisor
    rule = f"the lowest loss's lr / {divisor:.3g}"
    if steep is not None and steep > lr and steep <= min_lr / math.sqrt(divisor):
        lr, rule = steep, "the steepest descent (above the lowest loss's lr / divisor)"
    return RangePick(lr=lr, min_loss_lr=min_lr, steepest_lr=steep, points=len(pts), rule=rule)
