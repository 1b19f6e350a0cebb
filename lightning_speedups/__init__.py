"""lightning_speedups: make PyTorch Lightning training faster.

The public names, imported lazily so that ``import lightning_speedups`` stays cheap::

    from lightning_speedups import ChannelsLast, ConvBiasRemoval, preset
    trainer = Trainer(callbacks=[ChannelsLast(), ConvBiasRemoval()])
    p = preset("fast")
    trainer = Trainer(**p.trainer_kwargs(), callbacks=p.callbacks(), max_epochs=10)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC: dict[str, str] = {
    # presets and configuration
    "preset": "lightning_speedups.presets",
    "list_presets": "lightning_speedups.presets",
    "Preset": "lightning_speedups.presets",
    "Speedups": "lightning_speedups.config",
    "TIPS": "lightning_speedups.tips",
    "get_tip": "lightning_speedups.tips",
    # trainer-level parts (T01, T05, T06, T07, T10, T11)
    "LRSchedule": "lightning_speedups.callbacks.trainer",
    "MatmulPrecision": "lightning_speedups.callbacks.trainer",
    "CudnnBenchmark": "lightning_speedups.callbacks.trainer",
    "EffectiveBatchSize": "lightning_speedups.callbacks.trainer",
    "FusedOptimizer": "lightning_speedups.callbacks.trainer",
    "SpeedupsSummary": "lightning_speedups.callbacks.trainer",
    "resolve_precision": "lightning_speedups.functional.precision",
    "ddp_strategy": "lightning_speedups.strategies",
    # runtime guards (T07, T08, T14, T17)
    "SyncGuard": "lightning_speedups.callbacks.guards",
    "DebugMode": "lightning_speedups.callbacks.guards",
    "DebugToolsCheck": "lightning_speedups.callbacks.guards",
    "NoGradEvalCheck": "lightning_speedups.callbacks.guards",
    "ShapeWatch": "lightning_speedups.callbacks.guards",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_speedups' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
