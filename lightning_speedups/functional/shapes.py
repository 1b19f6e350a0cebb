"""T07: input shape signatures and a tracker of distinct shapes (``cudnn.benchmark`` re-tunes at each new one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from lightning_speedups.errors import SettingError
from lightning_speedups.functional.tree import walk_tensors

__all__ = ["ShapeTracker", "batch_shape_signature"]


def batch_shape_signature(batch: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The shapes of a batch's floating-point tensors, with their paths (all tensors if none float).

    Examples:
        >>> batch_shape_signature((torch.zeros(8, 3, 32, 32), torch.zeros(8, dtype=torch.long)))
        (('batch[0]', (8, 3, 32, 32)),)
    """
    leaves = list(walk_tensors(batch, "batch"))
    floating = [(p, t) for p, t in leaves if t.is_floating_point() or t.is_complex()]
    chosen = floating or leaves
    return tuple((p, tuple(t.shape)) for p, t in chosen)


@dataclass
class ShapeTracker:
    """Count distinct batch shapes (tip T07: ``cudnn.benchmark`` re-tunes at every new shape).

    Args:
        max_shapes: how many distinct shapes are fine (default 2: the full batch and a last,
            smaller one). More than that with ``cudnn.benchmark`` on is a finding.
        limit: stop storing new shapes after this many (the count keeps growing).

    Examples:
        >>> tracker = ShapeTracker()
        >>> for n in (8, 8, 5, 7):
        ...     _ = tracker.update(torch.zeros(n, 3))
        >>> tracker.distinct_shapes, tracker.steps
        (3, 4)
        >>> tracker.finding(benchmark=True)["evidence"]
        '3 distinct input shapes in 4 steps with torch.backends.cudnn.benchmark on'
    """

    max_shapes: int = 2
    limit: int = 10_000
    steps: int = 0
    shape_counts: dict[tuple, int] = field(default_factory=dict)
    _overflow: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_shapes, int) or isinstance(self.max_shapes, bool) or self.max_shapes < 1:
            raise SettingError(f"`max_shapes` must be an int >= 1, got {self.max_shapes!r}.")

    def update(self, batch: Any) -> bool:
        """Record one batch; return True when its shape is new."""
        sig = batch_shape_signature(batch)
        self.steps += 1
        if sig in self.shape_counts:
            self.shape_counts[sig] += 1
            return False
        if len(self.shape_counts) >= self.limit:
            self._overflow += 1
            return True
        self.shape_counts[sig] = 1
        return True

    @property
    def distinct_shapes(self) -> int:
        return len(self.shape_counts) + self._overflow

    @property
    def varying(self) -> bool:
        return self.distinct_shapes > self.max_shapes

    def finding(self, benchmark: Optional[bool] = None) -> Optional[dict[str, Any]]:
        """A T07 finding when shapes vary beyond ``max_shapes`` and benchmark mode is on, else ``None``.

        Args:
            benchmark: whether ``cudnn.benchmark`` is on; default: read ``torch.backends.cudnn.benchmark``.
        """
        benchmark = torch.backends.cudnn.benchmark if benchmark is None else benchmark
        if not (benchmark and self.varying):
            return None
        examples = ", ".join(str(shape) for sig in list(self.shape_counts)[:3] for _, shape in sig[:1])
        return {
            "tip": "T07",
            "slug": "cudnn-benchmark",
            "severity": "medium",
            "evidence": f"{self.distinct_shapes} distinct input shapes in {self.steps} steps"
            " with torch.backends.cudnn.benchmark on",
            "fix": "cudnn.benchmark re-tunes every convolution at each new shape: turn it off"
            " (Trainer(benchmark=False)) or make shapes fixed (pad or bucket to a few sizes, drop_last=True)",
            "examples": examples,
        }
