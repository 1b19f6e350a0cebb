"""Lightning callbacks, one per tip, and their shared base class."""

from lightning_speedups.callbacks.agc import (
    AdaptiveGradientClipping,
)
from lightning_speedups.callbacks.base import (
    SpeedupCallback,
    on_cuda,
)
from lightning_speedups.callbacks.channels_last import (
    ChannelsLast,
)
from lightning_speedups.callbacks.checkpointing import (
    ActivationCheckpointing,
)
from lightning_speedups.callbacks.compile import (
    CompileModules,
)
from lightning_speedups.callbacks.conv_bias import (
    ConvBiasRemoval,
)
from lightning_speedups.callbacks.data import (
    DataWaitMonitor,
    DeviceNormalize,
    InputStatsCheck,
    LoaderTuning,
    NonBlockingCheck,
    StorageCheck,
)
from lightning_speedups.callbacks.grads import (
    GradsToNoneCheck,
)
from lightning_speedups.callbacks.guards import (
    DebugMode,
    DebugToolsCheck,
    NoGradEvalCheck,
    ShapeWatch,
    SyncGuard,
)
from lightning_speedups.callbacks.largest_batch import (
    LargestBatch,
)
from lightning_speedups.callbacks.trainer import (
    CudnnBenchmark,
    EffectiveBatchSize,
    FusedOptimizer,
    LRSchedule,
    MatmulPrecision,
    SpeedupsSummary,
    accumulation_for,
    fused_devices,
    loader_batch_size,
    optimizer_accepts,
)

__all__ = [
    "ActivationCheckpointing",
    "AdaptiveGradientClipping",
    "ChannelsLast",
    "CompileModules",
    "ConvBiasRemoval",
    "CudnnBenchmark",
    "DataWaitMonitor",
    "DebugMode",
    "DebugToolsCheck",
    "DeviceNormalize",
    "EffectiveBatchSize",
    "FusedOptimizer",
    "GradsToNoneCheck",
    "InputStatsCheck",
    "LRSchedule",
    "LargestBatch",
    "LoaderTuning",
    "MatmulPrecision",
    "NoGradEvalCheck",
    "NonBlockingCheck",
    "ShapeWatch",
    "SpeedupCallback",
    "SpeedupsSummary",
    "StorageCheck",
    "SyncGuard",
    "accumulation_for",
    "fused_devices",
    "loader_batch_size",
    "on_cuda",
    "optimizer_accepts",
]
