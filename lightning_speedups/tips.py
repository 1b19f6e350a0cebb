"""The tip registry: one record per tip T01-T24 of the seed documents.

It is the single source that the docs, ``doctor``, ``bench`` and the shared test suite read. A tip's
``parts`` are dotted names (``module:attribute``) of what implements it: callbacks, functions,
doctor checks (``lightning_speedups.doctor.checks:check_t16``) and lint rules (``lint:LS101``).
``status`` is ``"implemented"`` only where every listed part exists and is tested; else ``"planned"``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal, Optional

Status = Literal["implemented", "planned"]


@dataclass(frozen=True)
class Tip:
    """One training-speed tip.

    Attributes:
        id: ``"T01"`` .. ``"T24"``.
        slug: short name used in reports (``"lr-schedule"``).
        title: one line.
        seeds: references into the seed documents (``"A#1"`` = tip 1 of document A).
        claim: what the seeds claim.
        parts: dotted names of the parts that implement it.
        preset_keys: the ``speedups:`` keys (or Trainer flags) that turn it on.
        status: ``"implemented"`` or ``"planned"``.
        doc: when it helps and when it hurts.
    """

    id: str
    slug: str
    title: str
    seeds: tuple[str, ...]
    claim: str
    parts: tuple[str, ...]
    preset_keys: tuple[str, ...]
    status: Status
    doc: str = ""

    def resolve_parts(self) -> dict[str, Any]:
        """Import every code part (``module:attr``); lint rules (``lint:CODE``) are checked by the lint registry."""
        out: dict[str, Any] = {}
        for ref in self.parts:
            if ref.startswith("lint:"):
                continue
            module, _, attr = ref.partition(":")
            obj = importlib.import_module(module)
            out[ref] = getattr(obj, attr) if attr else obj
        return out


def _t(id: str, *args: Any, parts: tuple[str, ...] = (), **kwargs: Any) -> Tip:
    # every tip has a doctor check: lightning_speedups.doctor.checks:check_t01 .. check_t24
    return Tip(id, *args, parts=(*parts, f"lightning_speedups.doctor.checks:check_{id.lower()}"), **kwargs)


CB = "lightning_speedups.callbacks"
FN = "lightning_speedups.functional"

TIPS: tuple[Tip, ...] = (
    _t("T01", "lr-schedule", "One-cycle / cyclic learning-rate schedules stepped per optimizer step", ("A#1",),
       "huge speed-ups in the best case ('super-convergence')",
       parts=(f"{CB}.trainer:LRSchedule",),
       preset_keys=("speedups.lr_schedule.name",), status="implemented",
       doc="Total steps come from trainer.estimated_stepping_batches; stepped per optimizer step. A one-cycle "
       "schedule stepped per epoch is warned about. Changes the optimisation: compare accuracy, not only speed."),
    _t("T02", "loader-workers", "DataLoader workers decided from the CPUs really available", ("A#2", "B#2"),
       "2x on one epoch (4 workers + pinned memory)",
       parts=(f"{CB}.data:LoaderTuning", f"{FN}.loaders:auto_num_workers", f"{CB}.data:DataWaitMonitor",
              "lightning_speedups.data.datamodule:SpeedDataModule", "lint:LS102"),
       preset_keys=("speedups.loaders.num_workers", "speedups.monitors.data_wait"), status="implemented",
       doc="On a 2-core CPU machine extra workers compete with the training step and are slower; auto decides."),
    _t("T03", "pin-memory", "Pinned host memory for loaders feeding a GPU", ("A#2", "B#3"),
       "skips the pageable-to-pinned copy",
       parts=(f"{CB}.data:LoaderTuning", "lint:LS103"),
       preset_keys=("speedups.loaders.pin_memory",), status="implemented",
       doc="Only helps when batches go to CUDA; on CPU it only costs."),
    _t("T04", "max-batch", "Largest batch that fits, learning rate scaled by the linear rule", ("A#3", "B#10"),
       "faster epochs",
       parts=(f"{CB}.largest_batch:LargestBatch", f"{FN}.batch_size:find_largest_batch_size"),
       preset_keys=("speedups.largest_batch",), status="implemented",
       doc="Bigger batches use the device better; the learning rate must follow (linear or square-root rule)."),
    _t("T05", "amp", "Automatic mixed precision chosen for the hardware", ("A#4", "B#11"),
       "2.75x faster, 37% less memory on BERT-size models",
       parts=(f"{FN}.precision:resolve_precision", f"{CB}.trainer:MatmulPrecision"),
       preset_keys=("speedups.precision", "speedups.tf32"), status="implemented",
       doc="bf16-mixed on Ampere+ GPUs, 16-mixed on older ones; on CPUs bf16 with AMX or AMD avx512_bf16 "
       "(measured 1.3x-1.7x faster), fp32 elsewhere (0.83x measured on a Xeon without AMX)."),
    _t("T06", "optimizer", "Fused / foreach optimizer implementations", ("A#5",), "-",
       parts=(f"{CB}.trainer:FusedOptimizer",),
       preset_keys=("speedups.optimizer",), status="implemented",
       doc="Fused kernels update all parameters at once; under fp16 with clipping foreach is used (fused cannot be clipped)."),
    _t("T07", "cudnn-benchmark", "cudnn.benchmark for fixed input shapes, restored afterwards", ("A#6", "B#15"),
       "1.27x to 1.70x forward+backward",
       parts=(f"{CB}.trainer:CudnnBenchmark", f"{CB}.guards:ShapeWatch", "lint:LS304"),
       preset_keys=("speedups.cudnn_benchmark",), status="implemented",
       doc="Re-tunes at every new input shape: turned back off when shapes keep changing."),
    _t("T08", "no-sync", "No needless CPU<->GPU synchronisations in the training step", ("A#7", "B#5"), "-",
       parts=(f"{CB}.guards:SyncGuard", f"{FN}.debug:SyncWatcher", "lint:LS201", "lint:LS202"),
       preset_keys=("speedups.monitors.sync_guard",), status="implemented",
       doc=".item(), .cpu(), print(tensor) in the step stall the GPU queue. The guard counts syncs on CUDA only."),
    _t("T09", "activation-checkpointing", "Activation (gradient) checkpointing of chosen blocks", ("A#8",),
       "trade compute for memory",
       parts=(f"{CB}.checkpointing:ActivationCheckpointing", f"{FN}.checkpointing:checkpoint_modules"),
       preset_keys=("speedups.checkpointing.targets",), status="implemented",
       doc="Recomputes activations in backward: less memory, about 1.3x-1.5x more compute."),
    _t("T10", "grad-accumulation", "Gradient accumulation to reach an effective batch", ("A#9", "B#13"),
       "simulates a big batch",
       parts=(f"{CB}.trainer:EffectiveBatchSize",),
       preset_keys=("speedups.effective_batch_size",), status="implemented",
       doc="accumulate_grad_batches computed from batch size, devices and nodes."),
    _t("T11", "ddp", "DistributedDataParallel, never DataParallel", ("A#10", "B#18"), "one process per GPU, no GIL",
       parts=("lightning_speedups.strategies:ddp_strategy", "lint:LS301"),
       preset_keys=("speedups.ddp.enabled",), status="implemented",
       doc="Bucket views, static graph, bf16/fp16 compression hooks on CUDA (not on gloo: said so)."),
    _t("T12", "grads-to-none", "zero_grad(set_to_none=True)", ("A#11", "B#12"), "no memset, write-only grads",
       parts=(f"{CB}.grads:GradsToNoneCheck", f"{FN}.grads:find_zeroed_grads", "lint:LS302", "lint:LS303"),
       preset_keys=("speedups.monitors.checks",), status="implemented",
       doc="Zeroed gradients cost a memset and memory."),
    _t("T13", "zero-copy", "torch.as_tensor / from_numpy instead of torch.tensor", ("A#12", "B#6"), "no copy",
       parts=("lightning_speedups.data.collate:zero_copy_collate", "lint:LS101", "lint:LS105"),
       preset_keys=(), status="implemented",
       doc="torch.tensor always copies numpy data."),
    _t("T14", "debug-off", "Debugging tools off when not debugging", ("A#13",), "debuggers slow training",
       parts=(f"{CB}.guards:DebugToolsCheck", f"{CB}.guards:DebugMode", f"{FN}.debug:find_debug_tools",
              "lint:LS305", "lint:LS306"),
       preset_keys=("speedups.monitors.checks", "speedups.debug"), status="implemented",
       doc="Anomaly detection, profilers, NVTX, deterministic algorithms each cost time."),
    _t("T15", "grad-clipping", "Gradient clipping: norm, value, adaptive (AGC)", ("A#14",),
       "faster convergence, avoids explosions",
       parts=("lightning_speedups.config:ClipSettings", f"{CB}.agc:AdaptiveGradientClipping", f"{FN}.agc:adaptive_clip_grad_"),
       preset_keys=("speedups.grad_clip",), status="implemented",
       doc="Norm and value clipping through the Trainer; AGC as a callback."),
    _t("T16", "conv-bias", "No bias in a convolution right before BatchNorm", ("A#15", "B#17"),
       "fewer parameters, less memory",
       parts=(f"{CB}.conv_bias:ConvBiasRemoval", f"{FN}.conv_bias:remove_conv_bias",
              f"{FN}.conv_bias:fold_conv_bias_state_dict"),
       preset_keys=("speedups.conv_bias",), status="implemented",
       doc="BatchNorm subtracts the mean, so the bias is dead weight; removed with outputs unchanged."),
    _t("T17", "no-grad-eval", "No gradients during validation / inference", ("A#16", "B#14"), "-",
       parts=(f"{CB}.guards:NoGradEvalCheck", f"{FN}.debug:EvalGradWatch"),
       preset_keys=("speedups.monitors.checks",), status="implemented",
       doc="Autograd bookkeeping in evaluation wastes time and memory."),
    _t("T18", "input-norm", "Normalised inputs, normalisation on the device", ("A#17",), "-",
       parts=(f"{CB}.data:InputStatsCheck", f"{CB}.data:DeviceNormalize"),
       preset_keys=("speedups.monitors.input_stats", "speedups.device_normalize"), status="implemented",
       doc="uint8 over the bus is 4x fewer bytes than float32."),
    _t("T19", "fast-storage", "Data on fast local storage", ("B#1",), "-",
       parts=(f"{CB}.data:StorageCheck", f"{FN}.storage:storage_report", f"{CB}.data:DataWaitMonitor"),
       preset_keys=("speedups.monitors.storage", "speedups.monitors.data_wait"), status="implemented",
       doc="Network and rotational disks starve the loader: measured read rate and data-wait share."),
    _t("T20", "on-device", "Create tensors directly on the device", ("B#4",), "-",
       parts=("lint:LS203",),
       preset_keys=(), status="implemented",
       doc="torch.zeros(...).cuda() allocates twice and copies: a lint rule finds it."),
    _t("T21", "non-blocking", "Non-blocking copies from pinned memory", ("B#7",), "-",
       parts=(f"{CB}.data:NonBlockingCheck", f"{CB}.data:LoaderTuning", "lint:LS104"),
       preset_keys=("speedups.loaders.pin_memory", "speedups.monitors.non_blocking"), status="implemented",
       doc="non_blocking=True only overlaps from pinned memory."),
    _t("T22", "fusion", "Fuse element-wise ops with torch.compile", ("B#8",), "gelu 4x faster from 5 kernels in 1",
       parts=(f"{CB}.compile:CompileModules", f"{FN}.compile:compile_modules"),
       preset_keys=("speedups.compile.enabled",), status="implemented",
       doc="Compiles inner modules; falls back to eager with the reason. Can be slower on small models: bench it."),
    _t("T23", "multiple-of-8", "Sizes that are multiples of 8 for tensor cores", ("B#9", "B#10"), "-",
       parts=(f"{FN}.alignment:find_misaligned", f"{FN}.alignment:pad_embedding", f"{FN}.alignment:pad_linear_out"),
       preset_keys=(), status="implemented",
       doc="Batch, channels, hidden and vocabulary sizes divisible by 8 use tensor cores fully."),
    _t("T24", "channels-last", "channels_last memory format for 4D/5D tensors", ("B#16",), "8% to 35% with AMP",
       parts=(f"{CB}.channels_last:ChannelsLast", f"{FN}.channels_last:to_channels_last",
              f"{FN}.channels_last:batch_to_channels_last"),
       preset_keys=("speedups.channels_last",), status="implemented",
       doc="NHWC lets conv kernels skip transposes, mainly on tensor cores."),
)

BY_ID: dict[str, Tip] = {tip.id: tip for tip in TIPS}
BY_SLUG: dict[str, Tip] = {tip.slug: tip for tip in TIPS}


def get_tip(key: str) -> Tip:
    """A tip by id (``"T16"``, ``"t16"``) or slug (``"conv-bias"``).

    Raises:
        KeyError: with the list of valid ids.
    """
    tip = BY_ID.get(key.upper()) or BY_SLUG.get(key.lower())
    if tip is None:
        raise KeyError(f"unknown tip {key!r}; tips are {', '.join(BY_ID)} (or their slugs, e.g. 'conv-bias').")
    return tip


def print_tips(console: Optional[Any] = None) -> None:
    """Print the registry as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lightning_speedups: the tips")
    for col in ("id", "slug", "status", "title", "turned on by"):
        table.add_column(col, overflow="fold")
    for tip in TIPS:
        table.add_row(tip.id, tip.slug, tip.status, tip.title, "\n".join(tip.preset_keys) or "lint / doctor")
    (console or Console()).print(table)


__all__ = ["TIPS", "Tip", "BY_ID", "BY_SLUG", "get_tip", "print_tips"]
