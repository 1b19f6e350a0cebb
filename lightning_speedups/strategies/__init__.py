"""Distributed strategies on Lightning's own DDP and FSDP strategies (T11).

- :mod:`~lightning_speedups.strategies.ddp`: :func:`ddp_strategy`, :class:`SpeedupsDDPStrategy`
  (bucket views, static graph kept away from gradient accumulation, compression hooks on CUDA);
- :mod:`~lightning_speedups.strategies.fsdp`: :func:`fsdp_strategy`, :class:`SpeedupsFSDPStrategy`
  (wrapped at the repeated blocks, mixed precision from the Trainer's precision, sharded checkpoints).
"""

from lightning_speedups.strategies.ddp import SpeedupsDDPStrategy, accumulation_source, ddp_strategy
from lightning_speedups.strategies.fsdp import (
    BlockWrapPolicy,
    SpeedupsFSDPStrategy,
    fsdp_mixed_precision,
    fsdp_strategy,
)

__all__ = [
    "BlockWrapPolicy",
    "SpeedupsDDPStrategy",
    "SpeedupsFSDPStrategy",
    "accumulation_source",
    "ddp_strategy",
    "fsdp_mixed_precision",
    "fsdp_strategy",
]
