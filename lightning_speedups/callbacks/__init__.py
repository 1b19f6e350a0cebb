"""Lightning callbacks, one per tip and file, their shared base class and hook helpers."""

from lightning_speedups.callbacks.agc import AdaptiveGradientClipping
from lightning_speedups.callbacks.auto_probe import AutoProbe
from lightning_speedups.callbacks.automatic_flags import AutomaticOptimizationFlags
from lightning_speedups.callbacks.base import (
    SpeedupCallback,
    on_cuda,
)
from lightning_speedups.callbacks.channels_last import ChannelsLast
from lightning_speedups.callbacks.checkpointing import ActivationCheckpointing
from lightning_speedups.callbacks.compile import CompileModules
from lightning_speedups.callbacks.conv_bias import ConvBiasRemoval
from lightning_speedups.callbacks.cudnn_benchmark import CudnnBenchmark
from lightning_speedups.callbacks.data_wait import DataWaitMonitor
from lightning_speedups.callbacks.debug_mode import DebugMode
from lightning_speedups.callbacks.debug_tools_check import DebugToolsCheck
from lightning_speedups.callbacks.device_normalize import DeviceNormalize
from lightning_speedups.callbacks.effective_batch import (
    EffectiveBatchSize,
    accumulation_for,
    loader_batch_size,
)
from lightning_speedups.callbacks.float8 import Float8Training
from lightning_speedups.callbacks.fused_optimizer import (
    FusedOptimizer,
    fused_devices,
    implementation_of,
    optimizer_accepts,
)
from lightning_speedups.callbacks.grads import GradsToNoneCheck
from lightning_speedups.callbacks.input_stats import InputStatsCheck
from lightning_speedups.callbacks.largest_batch import LargestBatch
from lightning_speedups.callbacks.loader_tuning import LoaderTuning
from lightning_speedups.callbacks.lr_schedule import LRSchedule
from lightning_speedups.callbacks.matmul_precision import MatmulPrecision
from lightning_speedups.callbacks.no_grad_eval import NoGradEvalCheck
from lightning_speedups.callbacks.non_blocking import NonBlockingCheck
from lightning_speedups.callbacks.probed_precision import ProbedPrecision
from lightning_speedups.callbacks.schedule_free import ScheduleFree
from lightning_speedups.callbacks.shape_watch import ShapeWatch
from lightning_speedups.callbacks.storage_check import StorageCheck
from lightning_speedups.callbacks.summary import SpeedupsSummary
from lightning_speedups.callbacks.sync_guard import SyncGuard

__all__ = [
    "ActivationCheckpointing",
    "AdaptiveGradientClipping",
    "AutoProbe",
    "AutomaticOptimizationFlags",
    "ChannelsLast",
    "CompileModules",
    "ConvBiasRemoval",
    "CudnnBenchmark",
    "DataWaitMonitor",
    "DebugMode",
    "DebugToolsCheck",
    "DeviceNormalize",
    "EffectiveBatchSize",
    "Float8Training",
    "FusedOptimizer",
    "GradsToNoneCheck",
    "InputStatsCheck",
    "LRSchedule",
    "LargestBatch",
    "LoaderTuning",
    "MatmulPrecision",
    "NoGradEvalCheck",
    "NonBlockingCheck",
    "ProbedPrecision",
    "ScheduleFree",
    "ShapeWatch",
    "SpeedupCallback",
    "SpeedupsSummary",
    "StorageCheck",
    "SyncGuard",
    "accumulation_for",
    "fused_devices",
    "implementation_of",
    "loader_batch_size",
    "on_cuda",
    "optimizer_accepts",
]
