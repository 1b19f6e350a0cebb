"""The typed ``speedups:`` section of a preset: one dataclass per group of tips.

Plain Trainer flags (precision, accumulate_grad_batches, gradient_clip_val, benchmark, strategy) could
live in ``trainer:``; but LightningCLI replaces ``trainer.callbacks`` wholesale when a second config
sets it (Lightning issue #15256), and Trainer flags cannot say ``auto``. So every part of the pack is a
keyed setting here. Keys merge one by one across ``--config a.yaml --config b.yaml``, and
:meth:`Speedups.build` turns the merged section into Trainer arguments and callbacks, the same for the
CLI and for Python users (``preset("fast").callbacks()``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from lightning.pytorch.callbacks import Callback

from lightning_speedups.functional.precision import resolve_precision

Toggle = Literal["off", "auto", "on"]
PrecisionSetting = Literal[
    "off", "auto", "half", "bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true", "64-true"
]


@dataclass
class LoaderSettings:
    """T02 / T03 / T21: loader settings applied to the user's own DataLoaders (``None`` leaves them as they are).

    Attributes:
        num_workers: worker processes, or ``"auto"`` (decided from the CPUs this process may use, the
            devices and the accelerator).
        pin_memory: page-locked host memory, or ``"auto"`` (only when batches go to a CUDA device).
        persistent_workers: keep workers alive between epochs (only with workers).
        prefetch_factor: batches loaded ahead by each worker (only with workers).
    """

    num_workers: Union[int, Literal["auto"], None] = None
    pin_memory: Union[bool, Literal["auto"], None] = None
    persistent_workers: Union[bool, Literal["auto"], None] = None
    prefetch_factor: Optional[int] = None

    def enabled(self) -> bool:
        return any(v is not None for v in dataclasses.astuple(self))


@dataclass
class DeviceNormalizeSettings:
    """T18: the dataset hands over uint8 images; they are converted and normalised on the device after
    the transfer (4x fewer bytes than float32). ``mean`` / ``std`` per channel in 0..1; empty means off.
    ``keys`` names the batch entries to convert (dict keys or positions); default: every uint8 image."""

    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    keys: Optional[list[Union[str, int]]] = None


@dataclass
class CheckpointingSettings:
    """T09: activation checkpointing of the sub-modules named by ``targets`` (class names, qualified-name
    patterns, or ``"auto"`` for the repeated blocks); empty means off."""

    targets: list[str] = field(default_factory=list)


@dataclass
class CompileSettings:
    """T22: ``torch.compile`` of the model's inner modules, falling back to eager on failure.

    ``enabled: auto`` compiles on CUDA only: on a 2-core CPU the compiled step of a small transformer
    measured 1.5x slower than eager (benchmarks/model_parts.md); ``bench`` measures it on your setup."""

    enabled: Union[bool, Literal["auto"]] = False
    mode: Optional[str] = None
    dynamic: Optional[bool] = None
    fullgraph: bool = False
    modules: Optional[list[str]] = None


@dataclass
class ScheduleSettings:
    """T01: a one-cycle or cyclic schedule stepped per optimizer step; total steps from the trainer."""

    name: Literal["off", "onecycle", "cyclic"] = "off"
    max_lr: Optional[float] = None
    pct_start: float = 0.25
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    anneal_strategy: Literal["cos", "linear"] = "cos"
    base_lr: Optional[float] = None
    cycles: int = 2
    mode: Literal["triangular", "triangular2", "exp_range"] = "triangular"


@dataclass
class ClipSettings:
    """T15: gradient clipping by norm, by value, or adaptive (AGC, unit-wise, Brock et al. 2021).

    ``value`` is the clip value for ``norm`` / ``value`` (default 1.0) and the clipping factor for
    ``agc`` (default 0.01)."""

    algorithm: Literal["off", "norm", "value", "agc"] = "off"
    value: Optional[float] = None
    agc_eps: float = 1e-3
    agc_exclude: Optional[list[str]] = field(default_factory=lambda: ["fc", "classifier", "head"])


@dataclass
class LargestBatchSettings:
    """T04: search the largest batch that fits (GPU: until out of memory; CPU: within ``memory_budget``),
    rounded down to ``multiple``, with the learning rate scaled by ``lr_rule``."""

    enabled: bool = False
    memory_budget: Union[int, float, str, None] = None
    multiple: int = 8
    lr_rule: Literal["linear", "sqrt", "off"] = "linear"
    base_batch_size: Optional[int] = None
    keep_effective_batch: bool = False
    max_batch_size: Optional[int] = None
    margin: float = 0.1
    batch_size: Optional[int] = None


@dataclass
class DDPSettings:
    """T11: DistributedDataParallel with gradient bucket views, static graph and gradient compression."""

    enabled: bool = False
    gradient_as_bucket_view: bool = True
    static_graph: bool = True
    compression: Literal["auto", "off", "bf16", "fp16"] = "auto"
    find_unused_parameters: bool = False


@dataclass
class MonitorSettings:
    """Runtime monitors and checks: data wait (T02/T19), input statistics (T18), non-blocking copies from
    unpinned memory (T21), where the data lives and how fast it reads (T19, ``storage_root`` or the
    dataset's root attribute), device syncs (T08), and with ``checks`` the debug tools left on (T14),
    gradients under evaluation (T17) and zeroed gradients (T12); ``advisor`` runs the doctor's checks."""

    data_wait: bool = False
    input_stats: bool = False
    non_blocking: bool = False
    storage: bool = False
    storage_root: Optional[str] = None
    sync_guard: Literal["off", "count", "warn", "error"] = "off"
    checks: bool = False
    advisor: bool = False


@dataclass
class Speedups:
    """Every tip of the pack as a keyed setting. Defaults are off: an empty section is plain Lightning.

    Attributes:
        precision: T05. ``auto`` (fastest here), ``half`` (leanest here) or a Lightning precision.
        tf32: TF32 matmuls on Ampere+ GPUs (``auto``) or an explicit float32 matmul precision.
        cudnn_benchmark: T07. ``auto`` turns it on when training on CUDA.
        channels_last: T24. Model and 4D/5D batches in channels_last memory format.
        conv_bias: T16. Remove conv biases that feed only a BatchNorm (outputs unchanged).
        checkpointing: T09. Activation checkpointing targets.
        compile: T22. ``torch.compile`` of inner modules.
        optimizer: T06. ``auto`` picks fused / foreach implementations.
        lr_schedule: T01. One-cycle / cyclic schedule stepped per optimizer step.
        effective_batch_size: T10. Sets ``accumulate_grad_batches`` to reach this many samples per step.
        grad_clip: T15. Norm, value or adaptive gradient clipping.
        largest_batch: T04. Largest batch that fits, with learning-rate scaling.
        loaders: T02 / T03 / T21. Loader settings applied to the user's DataLoaders.
        device_normalize: T18. uint8 images normalised on the device after the transfer.
        ddp: T11. DDP strategy settings.
        monitors: runtime monitors and checks.
        debug: T14. Turn the debugging tools on deliberately (anomaly detection, sync warnings).
        summary: print which speed-ups are active and which were skipped, and why.
    """

    precision: PrecisionSetting = "off"
    tf32: Literal["off", "auto", "highest", "high", "medium"] = "off"
    cudnn_benchmark: Toggle = "off"
    channels_last: bool = False
    conv_bias: bool = False
    checkpointing: CheckpointingSettings = field(default_factory=CheckpointingSettings)
    compile: CompileSettings = field(default_factory=CompileSettings)
    optimizer: Literal["off", "auto", "fused", "foreach"] = "off"
    lr_schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    effective_batch_size: Optional[int] = None
    grad_clip: ClipSettings = field(default_factory=ClipSettings)
    largest_batch: LargestBatchSettings = field(default_factory=LargestBatchSettings)
    loaders: LoaderSettings = field(default_factory=LoaderSettings)
    device_normalize: DeviceNormalizeSettings = field(default_factory=DeviceNormalizeSettings)
    ddp: DDPSettings = field(default_factory=DDPSettings)
    monitors: MonitorSettings = field(default_factory=MonitorSettings)
    debug: bool = False
    summary: bool = True

    # ------------------------------------------------------------------ parts
    def active_parts(self) -> set[str]:
        """Names of the parts this section turns on (used to check that composition loses nothing)."""
        parts: set[str] = set()
        if self.precision != "off":
            parts.add("precision")
        if self.tf32 != "off":
            parts.add("tf32")
        if self.cudnn_benchmark != "off":
            parts.add("cudnn_benchmark")
        for name in ("channels_last", "conv_bias", "debug"):
            if getattr(self, name):
                parts.add(name)
        if self.checkpointing.targets:
            parts.add("checkpointing")
        if self.compile.enabled:
            parts.add("compile")
        if self.optimizer != "off":
            parts.add("optimizer")
        if self.lr_schedule.name != "off":
            parts.add("lr_schedule")
        if self.effective_batch_size is not None:
            parts.add("effective_batch_size")
        if self.grad_clip.algorithm != "off":
            parts.add("grad_clip")
        if self.largest_batch.enabled:
            parts.add("largest_batch")
        if self.loaders.enabled():
            parts.add("loaders")
        if self.device_normalize.mean:
            parts.add("device_normalize")
        if self.ddp.enabled:
            parts.add("ddp")
        for name in ("data_wait", "input_stats", "non_blocking", "storage", "checks", "advisor"):
            if getattr(self.monitors, name):
                parts.add(f"monitors.{name}")
        if self.monitors.sync_guard != "off":
            parts.add("monitors.sync_guard")
        return parts

    def trainer_kwargs(self, accelerator: Optional[str] = "auto", devices: Any = "auto") -> tuple[dict[str, Any], list[tuple[str, bool, str]]]:
        """The Trainer arguments this section sets, and one ``(name, active, reason)`` note per decision.

        Args:
            accelerator: the accelerator the Trainer will use (decides ``auto`` settings).
            devices: the Trainer's ``devices`` (only used by the DDP settings).
        """
        kwargs: dict[str, Any] = {}
        notes: list[tuple[str, bool, str]] = []
        if self.precision != "off":
            value, reason = resolve_precision(self.precision, accelerator)
            if value is not None:
                kwargs["precision"] = value
                notes.append(("precision (T05)", value != "32-true", f"{value}: {reason}"))
            else:
                notes.append(("precision (T05)", False, f"skipped, {reason}"))
        clip = self.grad_clip
        if clip.algorithm in ("norm", "value"):
            kwargs["gradient_clip_val"] = clip.value if clip.value is not None else 1.0
            kwargs["gradient_clip_algorithm"] = clip.algorithm
            notes.append(("grad_clip (T15)", True, f"clip gradients by {clip.algorithm} at {kwargs['gradient_clip_val']}"))
        if self.ddp.enabled:
            from lightning_speedups.strategies import ddp_strategy

            strategy, reason = ddp_strategy(
                accelerator=accelerator,
                gradient_as_bucket_view=self.ddp.gradient_as_bucket_view,
                static_graph=self.ddp.static_graph,
                compression=self.ddp.compression,
                find_unused_parameters=self.ddp.find_unused_parameters,
            )
            kwargs["strategy"] = strategy
            notes.append(("ddp (T11)", True, reason))
        return kwargs, notes

    def callbacks(
        self, notes: Optional[list[tuple[str, bool, str]]] = None, accelerator: Optional[str] = "auto"
    ) -> list[Callback]:
        """The callbacks this section turns on, in the order they must run, the summary last.

        Args:
            notes: decisions made before the Trainer existed, shown in the start-up summary.
            accelerator: the Trainer's accelerator (decides ``compile.enabled: auto``).
        """
        from lightning_speedups.callbacks import trainer as tcb
        from lightning_speedups.functional.precision import _accelerator_is_cuda

        notes = list(notes or [])
        cbs: list[Callback] = []
        if self.debug:
            from lightning_speedups.callbacks.guards import DebugMode

            cbs.append(DebugMode())
        if self.effective_batch_size is not None:
            # before LargestBatch: the search then keeps this effective batch and lowers accumulation
            cbs.append(tcb.EffectiveBatchSize(self.effective_batch_size))
        if self.largest_batch.enabled:
            from lightning_speedups.callbacks.largest_batch import LargestBatch

            lb = self.largest_batch
            cbs.append(
                LargestBatch(
                    memory_budget=lb.memory_budget,
                    multiple=lb.multiple,
                    base_batch_size=lb.base_batch_size,
                    lr_rule=None if lb.lr_rule == "off" else lb.lr_rule,
                    keep_effective_batch=lb.keep_effective_batch or self.effective_batch_size is not None,
                    max_batch_size=lb.max_batch_size,
                    margin=lb.margin,
                    batch_size=lb.batch_size,
                )
            )
        if self.loaders.enabled():
            from lightning_speedups.callbacks.data import LoaderTuning

            cbs.append(LoaderTuning(**dataclasses.asdict(self.loaders)))
        if self.device_normalize.mean:
            # before ChannelsLast: both wrap on_after_batch_transfer, and the images must be float first
            from lightning_speedups.callbacks.data import DeviceNormalize

            dn = self.device_normalize
            cbs.append(DeviceNormalize(mean=list(dn.mean), std=list(dn.std), keys=dn.keys))
        if self.conv_bias:
            from lightning_speedups.callbacks.conv_bias import ConvBiasRemoval

            cbs.append(ConvBiasRemoval())
        if self.channels_last:
            from lightning_speedups.callbacks.channels_last import ChannelsLast

            cbs.append(ChannelsLast())
        if self.checkpointing.targets:
            from lightning_speedups.callbacks.checkpointing import ActivationCheckpointing

            cbs.append(ActivationCheckpointing(targets=list(self.checkpointing.targets)))
        if self.compile.enabled == "auto" and not _accelerator_is_cuda(accelerator):
            notes.append(("compile (T22)", False, "skipped, `auto` compiles on CUDA only (on CPU it measured slower"
                          " on a small transformer); set compile.enabled: true to force it, or bench it"))
        elif self.compile.enabled:
            from lightning_speedups.callbacks.compile import CompileModules

            c = self.compile
            cbs.append(CompileModules(modules=c.modules, mode=c.mode, dynamic=c.dynamic, fullgraph=c.fullgraph))
        if self.tf32 != "off":
            cbs.append(tcb.MatmulPrecision(self.tf32))
        if self.cudnn_benchmark != "off":
            cbs.append(tcb.CudnnBenchmark(self.cudnn_benchmark))
        if self.grad_clip.algorithm == "agc":
            from lightning_speedups.callbacks.agc import AdaptiveGradientClipping

            clip = self.grad_clip
            cbs.append(
                AdaptiveGradientClipping(
                    clipping=clip.value if clip.value is not None else 0.01, eps=clip.agc_eps, exclude=clip.agc_exclude
                )
            )
        if self.optimizer != "off":
            cbs.append(tcb.FusedOptimizer(self.optimizer))
        if self.lr_schedule.name != "off":
            s = dataclasses.asdict(self.lr_schedule)
            cbs.append(tcb.LRSchedule(**s))
        m = self.monitors
        if m.data_wait:
            from lightning_speedups.callbacks.data import DataWaitMonitor

            cbs.append(DataWaitMonitor())
        if m.input_stats:
            from lightning_speedups.callbacks.data import InputStatsCheck

            cbs.append(InputStatsCheck())
        if m.non_blocking:
            from lightning_speedups.callbacks.data import NonBlockingCheck

            cbs.append(NonBlockingCheck())
        if m.storage:
            from lightning_speedups.callbacks.data import StorageCheck

            cbs.append(StorageCheck(root=m.storage_root))
        if m.sync_guard != "off":
            from lightning_speedups.callbacks.guards import SyncGuard

            cbs.append(SyncGuard(mode=m.sync_guard))
        if m.checks:
            from lightning_speedups.callbacks.grads import GradsToNoneCheck
            from lightning_speedups.callbacks.guards import DebugToolsCheck, NoGradEvalCheck

            cbs.extend([DebugToolsCheck(), NoGradEvalCheck(), GradsToNoneCheck()])
        if m.advisor:
            from lightning_speedups.doctor.advisor import SpeedAdvisor

            cbs.append(SpeedAdvisor())
        if self.summary:
            cbs.append(tcb.SpeedupsSummary(notes))
        return cbs
