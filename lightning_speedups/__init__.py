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
    "LRSchedule": "lightning_speedups.callbacks.lr_schedule",
    "ScheduleFree": "lightning_speedups.callbacks.schedule_free",
    "MatmulPrecision": "lightning_speedups.callbacks.matmul_precision",
    "CudnnBenchmark": "lightning_speedups.callbacks.cudnn_benchmark",
    "EffectiveBatchSize": "lightning_speedups.callbacks.effective_batch",
    "FusedOptimizer": "lightning_speedups.callbacks.fused_optimizer",
    "SpeedupsSummary": "lightning_speedups.callbacks.summary",
    "resolve_precision": "lightning_speedups.functional.precision",
    "ddp_strategy": "lightning_speedups.strategies",
    # model parts (T09, T12, T16, T22, T23, T24)
    "ConvBiasRemoval": "lightning_speedups.callbacks.conv_bias",
    "remove_conv_bias": "lightning_speedups.functional.conv_bias",
    "ChannelsLast": "lightning_speedups.callbacks.channels_last",
    "to_channels_last": "lightning_speedups.functional.channels_last",
    "ActivationCheckpointing": "lightning_speedups.callbacks.checkpointing",
    "checkpoint_modules": "lightning_speedups.functional.checkpointing",
    "CompileModules": "lightning_speedups.callbacks.compile",
    "compile_modules": "lightning_speedups.functional.compile",
    "find_misaligned": "lightning_speedups.functional.alignment",
    "pad_embedding": "lightning_speedups.functional.alignment",
    "pad_linear_out": "lightning_speedups.functional.alignment",
    "GradsToNoneCheck": "lightning_speedups.callbacks.grads",
    # batch size and clipping (T04, T15)
    "LargestBatch": "lightning_speedups.callbacks.largest_batch",
    "AdaptiveGradientClipping": "lightning_speedups.callbacks.agc",
    # data (T02, T03, T13, T18, T19, T21)
    "LoaderTuning": "lightning_speedups.callbacks.loader_tuning",
    "DataWaitMonitor": "lightning_speedups.callbacks.data_wait",
    "InputStatsCheck": "lightning_speedups.callbacks.input_stats",
    "DeviceNormalize": "lightning_speedups.callbacks.device_normalize",
    "NonBlockingCheck": "lightning_speedups.callbacks.non_blocking",
    "StorageCheck": "lightning_speedups.callbacks.storage_check",
    "SpeedDataModule": "lightning_speedups.data.datamodule",
    "zero_copy_collate": "lightning_speedups.data.collate",
    "auto_num_workers": "lightning_speedups.functional.loaders",
    # doctor
    "SpeedAdvisor": "lightning_speedups.advisor",
    # runtime guards (T07, T08, T14, T17)
    "SyncGuard": "lightning_speedups.callbacks.sync_guard",
    "DebugMode": "lightning_speedups.callbacks.debug_mode",
    "DebugToolsCheck": "lightning_speedups.callbacks.debug_tools_check",
    "NoGradEvalCheck": "lightning_speedups.callbacks.no_grad_eval",
    "ShapeWatch": "lightning_speedups.callbacks.shape_watch",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def _keep_lightning_quiet() -> None:
    """In a program that runs ``pytorch_lightning`` (a library built on it), the pack's first import of
    ``lightning.pytorch`` would repoint the rank-zero logger the two packages share and undo the program's own
    logging settings: it is imported now, under :func:`~lightning_speedups.messages.keep_rank_zero_logger`."""
    import sys

    if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
        from lightning_speedups.messages import keep_rank_zero_logger

        with keep_rank_zero_logger():
            importlib.import_module("lightning.pytorch")


_keep_lightning_quiet()


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_speedups' has no attribute {name!r}")
    from lightning_speedups.messages import keep_rank_zero_logger

    with keep_rank_zero_logger():  # Lightning's shared start-up logger stays the one the program chose
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
