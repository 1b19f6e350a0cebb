"""What the doctor knows about a run: the facts every check reads.

:class:`Facts` holds plain values (numbers, names, small summaries) and a few references (the model,
the optimizers, the train loaders) gathered by :func:`collect_static` once everything is set up (at
the first training batch, after every callback's ``setup`` and ``on_train_start``), plus the
runtime evidence the :class:`~lightning_speedups.advisor.SpeedAdvisor` monitors record during the
first steps. The model's part is :func:`~lightning_speedups.inspection.model.inspect_model`, the
same inspection bench plans with. Each fact that cannot be read (the user's model or trainer raised
while it was read) is left at its default and the reason is kept in :attr:`Facts.unavailable`, so a
check can say "not checked here" with that reason instead of failing.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Subset, TensorDataset

from lightning_speedups.callbacks import DebugToolsCheck
from lightning_speedups.commands import PACKAGE_DIR
from lightning_speedups.functional import (
    available_cpus,
    find_data_root,
    find_debug_tools,
    named_tensors,
    storage_report,
)
from lightning_speedups.inspection.model import error_text, inspect_model
from lightning_speedups.trainer.internals import data_source, detect_anomaly
from lightning_speedups.trainer.namespace import is_overridden

__all__ = ["Facts", "TensorInfo", "collect_static", "user_source_files"]

#: Packages whose source files are never linted as "the user's code".
_PACKAGE_DIR = PACKAGE_DIR + os.sep
_LIBRARY_ROOTS = ("torch", "lightning", "pytorch_lightning", "torchmetrics", "lightning_utilities", "numpy")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the first training batch (as the model receives it)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    floating: bool
    channels_last: bool  # 4D/5D tensor in channels-last layout (and not also plain contiguous)
    nchw: bool  # 4D/5D floating tensor in plain contiguous layout with channels > 1
    nbytes: int


@dataclass
class Facts:
    """Everything the checks read. Defaults mean "unknown"."""

    # -- the run ------------------------------------------------------------------------------------
    device_type: str = "cpu"
    device_name: str = "cpu"
    num_devices: int = 1
    num_nodes: int = 1
    world_size: int = 1
    configured_devices: str | None = None  # what the config asked when the doctor ran fewer
    strategy: str = ""
    strategy_obj: Any = None
    cuda_count: int = 0
    precision: str = "32-true"
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    callbacks: list[Any] = field(default_factory=list)
    speedups: Any = None  # the config's Speedups section (doctor only)
    cudnn_benchmark: bool | None = None
    matmul_precision: str = "highest"
    cpus: int | None = None
    cpus_reason: str = ""

    # -- model, optimizers, data --------------------------------------------------------------------
    model: nn.Module | None = None
    model_name: str = ""
    datamodule: Any = None
    datamodule_name: str = ""
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[tuple[str, str, bool]] = field(default_factory=list)  # (class, interval, cyclic)
    train_loaders: list[Any] = field(default_factory=list)
    batch: list[TensorInfo] = field(default_factory=list)
    batch_size: int | None = None
    input_shape: tuple[int, ...] | None = None
    has_eval_loop: bool | None = None
    automatic_optimization: bool = True

    # -- static analysis of the model (filled at collection, before anything can change it) -------
    conv_bias_plan: Any = None
    channels_last_modules: list[tuple[str, str, str]] = field(default_factory=list)  # (name, class, layout)
    misaligned: list[Any] = field(default_factory=list)
    compile_status: dict[str, str] = field(default_factory=dict)
    checkpointed: list[str] = field(default_factory=list)
    checkpoint_candidates: list[str] = field(default_factory=list)
    module_counts: dict[str, int] = field(default_factory=dict)
    data_parallel_modules: list[str] = field(default_factory=list)
    n_params: int = 0

    # -- debugging tools ----------------------------------------------------------------------------
    debug_tools: list[Any] = field(default_factory=list)
    deliberate_tools: list[Any] = field(default_factory=list)

    # -- runtime evidence ---------------------------------------------------------------------------
    steps_run: int = 0
    seconds: float | None = None
    data_wait_fraction: float | None = None
    data_wait_steps: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)  # median forward / backward / optimizer seconds
    # the fixed cost per op, from a few steps after the watched ones, with no monitor on (None: not measured):
    ops_per_step: int | None = None  # top-level operator calls of one training step: forward, backward, optimizer
    op_cost_seconds: float | None = None  # this device's fixed cost of one op (one-element, forward and backward)
    step_seconds: float | None = None  # median seconds from a training batch's start to its end (data wait aside)
    input_stats: dict[str, Any] = field(default_factory=dict)
    input_problems: dict[str, list[str]] = field(default_factory=dict)
    input_batches: int = 0
    shape_tracker: Any = None
    sync_watcher: Any = None
    host_reads: Any = None  # off CUDA: a HostReadCounter over the checked steps
    zeroed_grads: Any = None
    zeroed_culprit: str | None = None
    grads_checked: int = 0
    eval_findings: list[dict[str, Any]] = field(default_factory=list)
    eval_batches_checked: int = 0
    grad_norms: list[float] = field(default_factory=list)
    peak_memory: int | None = None
    total_memory: int | None = None
    unpinned: dict[str, list[str]] = field(default_factory=dict)
    pinned_checked: bool = False
    storage: Any = None
    storage_root: str | None = None
    storage_error: str | None = None
    data_in_memory: bool | None = None

    # -- lint of the user's source files ------------------------------------------------------------
    lint_ran: bool = False
    lint_files: list[str] = field(default_factory=list)
    lint_findings: list[Any] = field(default_factory=list)
    lint_error: str | None = None

    # -- what went wrong ----------------------------------------------------------------------------
    run_error: str | None = None
    collected: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)

    # -- helpers ------------------------------------------------------------------------------------
    @property
    def on_cuda(self) -> bool:
        return self.device_type == "cuda"

    @property
    def half_precision(self) -> bool:
        return any(k in str(self.precision) for k in ("16", "bf16"))

    @property
    def op_overhead_fraction(self) -> float | None:
        """``ops_per_step x op_cost_seconds / step_seconds`` (at most 1): the share of a step its ops' fixed cost
        takes, what a larger batch or fused ops save; ``None`` when one of the three was not measured."""
        if not self.ops_per_step or not self.op_cost_seconds or not self.step_seconds:
            return None
        return min(1.0, self.ops_per_step * self.op_cost_seconds / self.step_seconds)

    def callback_of(self, class_name: str) -> Any:
        """The first trainer callback whose class is called ``class_name`` (``None`` when absent)."""
        for cb in self.callbacks:
            if type(cb).__name__ == class_name:
                return cb
        return None

    def run_note(self) -> str:
        """Why runtime evidence is missing, in words."""
        if self.run_error:
            return f"the training steps failed ({self.run_error})"
        if self.steps_run == 0:
            return "no training step ran"
        return ""


# ------------------------------------------------------------------------------------------ collect


def _safe(facts: Facts, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as err:
        facts.unavailable[key] = _could_not(error_text(err))
    return None


def _could_not(reason: str) -> str:
    return f"could not inspect: {reason}"[:300]


def _tensor_infos(batch: Any) -> list[TensorInfo]:
    out = []
    for name, t in named_tensors(batch):
        fmt = None
        if t.dim() == 4:
            fmt = torch.channels_last
        elif t.dim() == 5:
            fmt = torch.channels_last_3d
        cl = bool(fmt is not None and t.is_contiguous(memory_format=fmt) and not t.is_contiguous())
        nchw = bool(
            fmt is not None
            and t.is_floating_point()
            and t.is_contiguous()
            and t.shape[1] > 1
            and not t.is_contiguous(memory_format=fmt)
        )
        out.append(
            TensorInfo(
                name=name,
                shape=tuple(t.shape),
                dtype=str(t.dtype).replace("torch.", ""),
                floating=t.is_floating_point(),
                channels_last=cl,
                nchw=nchw,
                nbytes=t.numel() * t.element_size(),
            )
        )
    return out


def _flat_loaders(loaders: Any) -> list[Any]:
    if loaders is None:
        return []
    flat = getattr(loaders, "flattened", None)
    if flat is not None:
        return list(flat)
    if isinstance(loaders, dict):
        return list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return list(loaders)
    return [loaders]


def _loader_batch_size(loader: Any) -> int | None:
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(size) if isinstance(size, int) else None


def _has_eval_loop(trainer: Any, model: Any) -> bool | None:
    if model is None:
        return None
    if not is_overridden("validation_step", model):
        return False
    dm = getattr(trainer, "datamodule", None)
    if dm is not None and is_overridden("val_dataloader", dm):
        return True
    if is_overridden("val_dataloader", model):
        return True
    source = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    val_loop = getattr(source, "val_loop", None)
    return bool(getattr(data_source(val_loop), "instance", None) is not None)


def _cuda_name(device: torch.device) -> str:
    try:
        return torch.cuda.get_device_name(device)
    except (RuntimeError, AssertionError, AttributeError):  # a broken or absent driver: a generic name
        return "CUDA device"


def _storage(facts: Facts, trainer: Any) -> None:
    root = find_data_root(getattr(trainer, "datamodule", None))
    if root is None:
        for loader in facts.train_loaders:
            root = find_data_root(getattr(loader, "dataset", None))
            if root is not None:
                break
    if root is None:
        facts.data_in_memory = (
            all(_in_memory(getattr(dl, "dataset", None)) for dl in facts.train_loaders) if facts.train_loaders else None
        )
        return
    facts.storage_root = str(root)
    try:
        facts.storage = storage_report(root, sample_files=8, max_bytes=16 * 2**20)
    except (OSError, ValueError) as err:
        facts.storage_error = str(err)


def _in_memory(dataset: Any) -> bool:
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


_STDLIB_NAMES = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins", "typing", "abc"}


def _stdlib_dirs() -> list[str]:
    dirs = []
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(os.path.abspath(path) + os.sep)
    return dirs


def user_source_files(objects: list[Any]) -> list[str]:
    """Source files of the classes of ``objects`` and their base classes, outside torch / Lightning."""
    files: list[str] = []
    prefixes = []
    for name in _LIBRARY_ROOTS:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if path:
            prefixes.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    for obj in objects:
        if obj is None:
            continue
        for cls in type(obj).__mro__:
            if cls.__module__.split(".")[0] in _LIBRARY_ROOTS or cls.__module__.split(".")[0] in _STDLIB_NAMES:
                continue
            try:
                path = inspect.getsourcefile(cls)
            except (TypeError, OSError):
                continue
            if not path or not os.path.isfile(path):
                continue
            path = os.path.abspath(path)
            if path.startswith(_PACKAGE_DIR):
                if not path.startswith(os.path.join(_PACKAGE_DIR, "demo") + os.sep):
                    continue  # the pack's own parts are not the user's code; its demo model is
            elif "site-packages" in Path(path).parts or "dist-packages" in Path(path).parts:
                continue
            if any(path.startswith(p) for p in prefixes) or any(path.startswith(p) for p in _stdlib_dirs()):
                continue
            if path not in files:
                files.append(path)
    return files


def collect_static(facts: Facts, trainer: Any, pl_module: Any, batch: Any = None) -> Facts:
    """Fill the static facts from a set-up Trainer and model (and, when given, the first batch).

    Reading never changes anything. Every part that fails is recorded in ``facts.unavailable``.
    """
    facts.collected = True
    facts.model = pl_module
    facts.model_name = type(pl_module).__name__ if pl_module is not None else ""
    dm = getattr(trainer, "datamodule", None)
    facts.datamodule = dm
    facts.datamodule_name = type(dm).__name__ if dm is not None else ""
    facts.callbacks = list(getattr(trainer, "callbacks", []) or [])

    device = _safe(facts, "device", lambda: trainer.strategy.root_device)
    if device is not None:
        facts.device_type = device.type
        facts.device_name = _cuda_name(device) if device.type == "cuda" else str(device)
    facts.num_devices = int(getattr(trainer, "num_devices", 1) or 1)
    facts.num_nodes = int(getattr(trainer, "num_nodes", 1) or 1)
    facts.world_size = int(getattr(trainer, "world_size", 1) or 1)
    facts.strategy_obj = getattr(trainer, "strategy", None)
    facts.strategy = type(facts.strategy_obj).__name__ if facts.strategy_obj is not None else ""
    facts.cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    facts.precision = str(_safe(facts, "precision", lambda: trainer.precision) or "32-true")
    facts.accumulate_grad_batches = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
    facts.gradient_clip_val = getattr(trainer, "gradient_clip_val", None)
    facts.gradient_clip_algorithm = getattr(trainer, "gradient_clip_algorithm", None)
    facts.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
    facts.matmul_precision = torch.get_float32_matmul_precision()
    cpu = _safe(facts, "cpus", available_cpus)
    if cpu is not None:
        facts.cpus, facts.cpus_reason = cpu.count, cpu.reason

    facts.optimizers = list(getattr(trainer, "optimizers", []) or [])
    scheds = []
    for config in getattr(trainer, "lr_scheduler_configs", []) or []:
        sched = config.scheduler
        cyclic = isinstance(sched, (torch.optim.lr_scheduler.OneCycleLR, torch.optim.lr_scheduler.CyclicLR))
        scheds.append((type(sched).__name__, str(config.interval), cyclic))
    facts.schedulers = scheds

    facts.train_loaders = _safe(facts, "loaders", lambda: _flat_loaders(trainer.train_dataloader)) or []
    sizes = [s for s in (_loader_batch_size(dl) for dl in facts.train_loaders) if s is not None]
    facts.batch_size = sizes[0] if sizes else None
    facts.has_eval_loop = _safe(facts, "eval_loop", _has_eval_loop, trainer, pl_module)
    facts.automatic_optimization = bool(getattr(pl_module, "automatic_optimization", True))

    if batch is not None:
        facts.batch = _safe(facts, "batch", _tensor_infos, batch) or []
        floating = [t for t in facts.batch if t.floating and len(t.shape) >= 2]
        chosen = floating[0] if floating else (facts.batch[0] if facts.batch else None)
        if chosen is not None:
            facts.input_shape = chosen.shape
            if facts.batch_size is None and chosen.shape:
                facts.batch_size = chosen.shape[0]

    if isinstance(pl_module, nn.Module):
        _fill_model(facts, pl_module)

    tools = _safe(facts, "debug_tools", _debug_tools, trainer)
    if tools is not None:
        facts.debug_tools, facts.deliberate_tools = tools
    _safe(facts, "storage", _storage, facts, trainer)
    return facts


def _fill_model(facts: Facts, model: nn.Module) -> None:
    """The model's facts, from the inspection bench shares (:func:`inspect_model`)."""
    m = inspect_model(model, facts.device_type, batch_size=facts.batch_size, input_shape=facts.input_shape)
    facts.n_params = m.n_params or 0
    facts.module_counts = m.module_counts or {}
    facts.data_parallel_modules = m.data_parallel_modules or []
    facts.conv_bias_plan = m.conv_bias_plan
    facts.channels_last_modules = m.channels_last_modules or []
    facts.misaligned = m.misaligned or []
    facts.compile_status = m.compile_status or {}
    facts.checkpointed = m.checkpointed or []
    facts.checkpoint_candidates = m.checkpoint_candidates or []
    for part, reason in m.errors.items():
        facts.unavailable[part] = _could_not(reason)


def _debug_tools(trainer: Any) -> tuple[list[Any], list[Any]]:
    deliberate = DebugToolsCheck.deliberate_ids(trainer)
    tools = find_debug_tools(trainer, trainer_anomaly=detect_anomaly(trainer) if trainer is not None else False)
    return [t for t in tools if t.id not in deliberate], [t for t in tools if t.id in deliberate]
