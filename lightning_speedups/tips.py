"""The tip registry: one record per tip T01-T24 of the seed documents.

It is the single source that the docs, ``doctor``, ``bench`` and the shared test suite read. A tip's
``parts`` are dotted names (``module:attribute``) of what implements it: callbacks, functions,
doctor checks (``lightning_speedups.doctor.checks:check_T16``) and lint rules (``lint:LS101``).
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


def _t(*args: Any, **kwargs: Any) -> Tip:
    return Tip(*args, **kwargs)


CB = "lightning_speedups.callbacks"
FN = "lightning_speedups.functional"

TIPS: tuple[Tip, ...] = (
    _t("T01", "lr-schedule", "One-cycle / cyclic learning-rate schedules stepped per optimizer step", ("A#1",),
       "huge speed-ups in the best case ('super-convergence')",
       (f"{CB}.trainer:LRSchedule",), ("speedups.lr_schedule.name",), "implemented",
       "Total steps come from trainer.estimated_stepping_batches; stepped per optimizer step. A one-cycle "
       "schedule stepped per epoch is warned about. Changes the optimisation: compare accuracy, not only speed."),
    _t("T02", "loader-workers", "DataLoader workers decided from the CPUs really available", ("A#2", "B#2"),
       "2x on one epoch (4 workers + pinned memory)", (), ("speedups.loaders.num_workers",), "planned",
       "On a 2-core CPU machine extra workers compete with the training step and are slower; auto decides."),
    _t("T03", "pin-memory", "Pinned host memory for loaders feeding a GPU", ("A#2", "B#3"),
       "skips the pageable-to-pinned copy", (), ("speedups.loaders.pin_memory",), "planned",
       "Only helps when batches go to CUDA; on CPU it only costs."),
    _t("T04", "max-batch", "Largest batch that fits, learning rate scaled by the linear rule", ("A#3", "B#10"),
       "faster epochs", (), ("speedups.largest_batch",), "planned",
       "Bigger batches use the device better; the learning rate must follow (linear or square-root rule)."),
    _t("T05", "amp", "Automatic mixed precision chosen for the hardware", ("A#4", "B#11"),
       "2.75x faster, 37% less memory on BERT-size models",
       ("lightning_speedups.functional.precision:resolve_precision", f"{CB}.trainer:MatmulPrecision"),
       ("speedups.precision", "speedups.tf32"), "implemented",
       "bf16-mixed on Ampere+ GPUs, 16-mixed on older ones, bf16 on CPUs only with AMX (slower without)."),
    _t("T06", "optimizer", "Fused / foreach optimizer implementations", ("A#5",), "-",
       (f"{CB}.trainer:FusedOptimizer",), ("speedups.optimizer",), "implemented",
       "Fused kernels update all parameters at once; under fp16 with clipping foreach is used (fused cannot be clipped)."),
    _t("T07", "cudnn-benchmark", "cudnn.benchmark for fixed input shapes, restored afterwards", ("A#6", "B#15"),
       "1.27x to 1.70x forward+backward", (f"{CB}.trainer:CudnnBenchmark",), ("speedups.cudnn_benchmark",),
       "implemented", "Re-tunes at every new input shape: turned back off when shapes keep changing."),
    _t("T08", "no-sync", "No needless CPU<->GPU synchronisations in the training step", ("A#7", "B#5"), "-",
       (), ("speedups.monitors.sync_guard",), "planned",
       ".item(), .cpu(), print(tensor) in the step stall the GPU queue."),
    _t("T09", "activation-checkpointing", "Activation (gradient) checkpointing of chosen blocks", ("A#8",),
       "trade compute for memory", (), ("speedups.checkpointing.targets",), "planned",
       "Recomputes activations in backward: less memory, about 1.3x-1.5x more compute."),
    _t("T10", "grad-accumulation", "Gradient accumulation to reach an effective batch", ("A#9", "B#13"),
       "simulates a big batch", (f"{CB}.trainer:EffectiveBatchSize",), ("speedups.effective_batch_size",),
       "implemented", "accumulate_grad_batches computed from batch size, devices and nodes."),
    _t("T11", "ddp", "DistributedDataParallel, never DataParallel", ("A#10", "B#18"), "one process per GPU, no GIL",
       ("lightning_speedups.strategies:ddp_strategy",), ("speedups.ddp.enabled",), "implemented",
       "Bucket views, static graph, bf16/fp16 compression hooks on CUDA (not on gloo: said so)."),
    _t("T12", "grads-to-none", "zero_grad(set_to_none=True)", ("A#11", "B#12"), "no memset, write-only grads",
       (), ("speedups.monitors.checks",), "planned", "Zeroed gradients cost a memset and memory."),
    _t("T13", "zero-copy", "torch.as_tensor / from_numpy instead of torch.tensor", ("A#12", "B#6"), "no copy",
       (), ("speedups.loaders",), "planned", "torch.tensor always copies numpy data."),
    _t("T14", "debug-off", "Debugging tools off when not debugging", ("A#13",), "debuggers slow training",
       (), ("speedups.monitors.checks", "speedups.debug"), "planned",
       "Anomaly detection, profilers, NVTX, deterministic algorithms each cost time."),
    _t("T15", "grad-clipping", "Gradient clipping: norm, value, adaptive (AGC)", ("A#14",),
       "faster convergence, avoids explosions", ("lightning_speedups.config:ClipSettings",),
       ("speedups.grad_clip",), "implemented", "Norm and value clipping through the Trainer; AGC as a callback."),
    _t("T16", "conv-bias", "No bias in a convolution right before BatchNorm", ("A#15", "B#17"),
       "fewer parameters, less memory", (), ("speedups.conv_bias",), "planned",
       "BatchNorm subtracts the mean, so the bias is dead weight; removed with outputs unchanged."),
    _t("T17", "no-grad-eval", "No gradients during validation / inference", ("A#16", "B#14"), "-",
       (), ("speedups.monitors.checks",), "planned", "Autograd bookkeeping in evaluation wastes time and memory."),
    _t("T18", "input-norm", "Normalised inputs, normalisation on the device", ("A#17",), "-",
       (), ("speedups.monitors.input_stats",), "planned", "uint8 over the bus is 4x fewer bytes than float32."),
    _t("T19", "fast-storage", "Data on fast local storage", ("B#1",), "-", (), ("speedups.monitors.data_wait",),
       "planned", "Network and rotational disks starve the loader: measured read rate and data-wait share."),
    _t("T20", "on-device", "Create tensors directly on the device", ("B#4",), "-", (), (), "planned",
       "torch.zeros(...).cuda() allocates twice and copies."),
    _t("T21", "non-blocking", "Non-blocking copies from pinned memory", ("B#7",), "-", (), ("speedups.loaders.pin_memory",),
       "planned", "non_blocking=True only overlaps from pinned memory."),
    _t("T22", "fusion", "Fuse element-wise ops with torch.compile", ("B#8",), "gelu 4x faster from 5 kernels in 1",
       (), ("speedups.compile.enabled",), "planned",
       "Compiles inner modules; falls back to eager with the reason. Can be slower on small models: bench it."),
    _t("T23", "multiple-of-8", "Sizes that are multiples of 8 for tensor cores", ("B#9", "B#10"), "-",
       (), (), "planned", "Batch, channels, hidden and vocabulary sizes divisible by 8 use tensor cores fully."),
    _t("T24", "channels-last", "channels_last memory format for 4D/5D tensors", ("B#16",), "8% to 35% with AMP",
       (), ("speedups.channels_last",), "planned", "NHWC lets conv kernels skip transposes, mainly on tensor cores."),
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
