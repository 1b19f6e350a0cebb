"""The shared settings every implemented part runs under in tests/test_registry.py.

One entry per callback part named in the tip registry: how to build it, which model it needs, extra
Trainer arguments, and a check that the part really did something. A callback part that is listed
in the registry as implemented but missing here fails the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch


@dataclass
class PartSetting:
    make: Callable[[], Any]
    model: str = "cnn"  # "cnn" or "transformer"
    trainer: dict[str, Any] = field(default_factory=dict)
    check: Optional[Callable[[Any, Any, Any], None]] = None  # (trainer, model, callback) -> assert
    compose: bool = True  # included in the all-parts composition run


def _fused(trainer, model, cb):
    assert trainer.optimizers[0].param_groups[0]["fused"] is True


def _lr_changes(trainer, model, cb):
    # stepped once per optimizer step (and held after the planned steps when a resume trains longer)
    assert cb.scheduler is not None
    assert cb.scheduler.last_epoch == min(trainer.global_step, cb._total_steps)


def _accumulates(trainer, model, cb):
    assert trainer.accumulate_grad_batches == 2


def _batch_64(trainer, model, cb):
    assert model.batch_size == 64
    assert trainer.optimizers[0].param_groups[0]["lr"] == 4e-2  # 1e-2 x 64 / 16, the linear rule


def _biases_removed(trainer, model, cb):
    assert cb.removed or cb.status[0] == "skipped"
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            assert module.bias is None, f"{name} still has its bias"


def _workers(trainer, model, cb):
    loader = trainer.train_dataloader
    assert loader.num_workers == 1 and loader.persistent_workers


def _data_wait(trainer, model, cb):
    assert 0.0 <= cb.data_wait_fraction <= 1.0


def _advised(trainer, model, cb):
    assert sorted({f.tip for f in cb.findings}) == [f"T{i:02d}" for i in range(1, 25)]


def _nhwc(trainer, model, cb):
    conv = model.features[0]
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def _checkpointed(trainer, model, cb):
    from lightning_speedups.functional.checkpointing import is_checkpointed

    assert all(is_checkpointed(layer) for layer in model.encoder.layers)


def _compiled(trainer, model, cb):
    from lightning_speedups.functional.compile import compile_status

    assert compile_status(model), "nothing compiled"


def _reported(trainer, model, cb):
    assert cb.status is not None, f"{type(cb).__name__} never reported what it did"


def _settings() -> dict[str, PartSetting]:
    from lightning_speedups import callbacks as data
    from lightning_speedups import callbacks as guards
    from lightning_speedups import callbacks as tcb
    from lightning_speedups.advisor import SpeedAdvisor
    from lightning_speedups.callbacks import agc, channels_last, checkpointing, conv_bias, grads, largest_batch
    from lightning_speedups.callbacks import compile as compile_cb

    return {
        "lightning_speedups.callbacks.lr_schedule:LRSchedule": PartSetting(
            lambda: tcb.LRSchedule("onecycle"), check=_lr_changes
        ),
        "lightning_speedups.callbacks.matmul_precision:MatmulPrecision": PartSetting(
            lambda: tcb.MatmulPrecision("high"), check=_reported
        ),
        "lightning_speedups.callbacks.cudnn_benchmark:CudnnBenchmark": PartSetting(
            lambda: tcb.CudnnBenchmark("auto"), check=_reported
        ),
        "lightning_speedups.callbacks.effective_batch:EffectiveBatchSize": PartSetting(
            lambda: tcb.EffectiveBatchSize(32), check=_accumulates
        ),
        "lightning_speedups.callbacks.fused_optimizer:FusedOptimizer": PartSetting(
            lambda: tcb.FusedOptimizer("auto"), check=_fused
        ),
        "lightning_speedups.callbacks.agc:AdaptiveGradientClipping": PartSetting(
            lambda: agc.AdaptiveGradientClipping(exclude=None), check=_reported
        ),
        "lightning_speedups.callbacks.largest_batch:LargestBatch": PartSetting(
            lambda: largest_batch.LargestBatch(memory_budget="1GiB", max_batch_size=64), check=_batch_64, compose=False
        ),
        "lightning_speedups.callbacks.conv_bias:ConvBiasRemoval": PartSetting(
            conv_bias.ConvBiasRemoval, check=_biases_removed
        ),
        "lightning_speedups.callbacks.grads:GradsToNoneCheck": PartSetting(grads.GradsToNoneCheck, check=_reported),
        "lightning_speedups.callbacks.loader_tuning:LoaderTuning": PartSetting(
            lambda: data.LoaderTuning(num_workers=1, persistent_workers=True), check=_workers
        ),
        "lightning_speedups.callbacks.data_wait:DataWaitMonitor": PartSetting(data.DataWaitMonitor, check=_data_wait),
        "lightning_speedups.callbacks.input_stats:InputStatsCheck": PartSetting(data.InputStatsCheck, check=_reported),
        "lightning_speedups.callbacks.device_normalize:DeviceNormalize": PartSetting(
            lambda: data.DeviceNormalize(mean=[0.5], std=[0.25]), check=_reported
        ),
        "lightning_speedups.callbacks.non_blocking:NonBlockingCheck": PartSetting(
            data.NonBlockingCheck, check=_reported
        ),
        "lightning_speedups.callbacks.storage_check:StorageCheck": PartSetting(data.StorageCheck, check=_reported),
        "lightning_speedups.advisor:SpeedAdvisor": PartSetting(
            lambda: SpeedAdvisor(check_steps=2, print_report=False), check=_advised
        ),
        "lightning_speedups.callbacks.channels_last:ChannelsLast": PartSetting(channels_last.ChannelsLast, check=_nhwc),
        "lightning_speedups.callbacks.checkpointing:ActivationCheckpointing": PartSetting(
            lambda: checkpointing.ActivationCheckpointing("auto"), model="transformer", check=_checkpointed
        ),
        "lightning_speedups.callbacks.compile:CompileModules": PartSetting(
            lambda: compile_cb.CompileModules(backend="aot_eager"), check=_compiled, compose=False
        ),
        "lightning_speedups.callbacks.sync_guard:SyncGuard": PartSetting(
            lambda: guards.SyncGuard("count"), check=_reported
        ),
        "lightning_speedups.callbacks.debug_mode:DebugMode": PartSetting(
            lambda: guards.DebugMode(sync_guard=None), check=_reported, compose=False
        ),
        "lightning_speedups.callbacks.debug_tools_check:DebugToolsCheck": PartSetting(
            guards.DebugToolsCheck, check=_reported
        ),
        "lightning_speedups.callbacks.no_grad_eval:NoGradEvalCheck": PartSetting(guards.NoGradEvalCheck),
        "lightning_speedups.callbacks.shape_watch:ShapeWatch": PartSetting(guards.ShapeWatch),
    }


PART_SETTINGS = _settings()
