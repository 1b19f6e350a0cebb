"""T14: debugging tools left on, each with what it costs and the fix.

The plain core that :class:`~lightning_speedups.callbacks.DebugToolsCheck` and the ``doctor`` call.
It returns structured findings (:class:`DebugTool`: ``tip``, ``slug``, ``severity``, ``evidence``, ``fix``
and what it costs), never prints.

What it does: :func:`find_debug_tools` lists the debugging switches that are on in this process (anomaly
detection, the autograd / torch profiler, NVTX or ITT ranges, a Lightning profiler, deterministic algorithms,
cuDNN switches, sync-debug mode, ``CUDA_LAUNCH_BLOCKING`` and similar environment variables, a Python tracer
such as a debugger or coverage), each with what it costs and the fix.

Card: tip T14 ``debug-off``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

Examples:
    >>> from lightning_speedups.functional.debug_tools import find_debug_tools
    >>> import torch
    >>> with torch.autograd.set_detect_anomaly(True):
    ...     [tool.id for tool in find_debug_tools()][:1]
    ['anomaly_detection']
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

import torch

__all__ = ["DEBUG_TOOL_IDS", "DebugTool", "find_debug_tools"]

#: Every id :func:`find_debug_tools` can return.
DEBUG_TOOL_IDS = (
    "anomaly_detection",
    "autograd_profiler",
    "nvtx_emission",
    "lightning_profiler",
    "deterministic_algorithms",
    "cudnn_deterministic",
    "cudnn_disabled",
    "sync_debug_mode",
    "cuda_launch_blocking",
    "no_cuda_memory_caching",
    "distributed_debug",
    "python_tracer",
    "log_every_step",
)


@dataclass(frozen=True)
class DebugTool:
    """One debugging tool found switched on.

    Attributes:
        id: stable id, one of :data:`DEBUG_TOOL_IDS`.
        name: human name, e.g. ``"autograd anomaly detection"``.
        evidence: what was observed, e.g. ``"torch.is_anomaly_enabled() is True (check_nan=True)"``.
        cost: one line: what it costs while training.
        fix: one line: how to turn it off.
        severity: ``"high"``, ``"medium"`` or ``"low"``.
    """

    id: str
    name: str
    evidence: str
    cost: str
    fix: str
    severity: str = "medium"
    tip: str = "T14"
    slug: str = "debug-off"

    def __str__(self) -> str:
        return f"{self.name}: {self.evidence}. Cost: {self.cost}. Fix: {self.fix}"


def _cuda_available() -> bool:
    try:
        return torch.cuda.is_available()
    except RuntimeError:  # pragma: no cover - broken driver setups
        return False


def _profiler_type_name() -> Optional[str]:
    """Name of the active autograd profiler (``"KINETO"``, ``"NVTX"``, ...) or ``None``."""
    # private: torch has no public way to ask whether (and which) autograd profiler is recording
    autograd_c = getattr(torch._C, "_autograd", None)
    enabled = False
    if autograd_c is not None and hasattr(autograd_c, "_profiler_enabled"):
        try:
            enabled = bool(autograd_c._profiler_enabled())
        except RuntimeError:  # pragma: no cover
            enabled = False
    if not enabled:
        enabled = bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))
    if not enabled:
        return None
    kind = "UNKNOWN"
    if autograd_c is not None and hasattr(autograd_c, "_profiler_type"):
        try:
            kind = str(autograd_c._profiler_type()).rsplit(".", 1)[-1]
        except RuntimeError:  # pragma: no cover
            pass
    return kind


def _python_tracers() -> list[str]:
    """Names of Python-level tracers active in this thread (debugger, coverage, profiler)."""
    found = []
    tracer = sys.gettrace()
    if tracer is not None:
        found.append(f"sys.settrace hook from {_owner_module(tracer)}")
    profiler = sys.getprofile()
    if profiler is not None:
        found.append(f"sys.setprofile hook from {_owner_module(profiler)}")
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is not None:
        for tool_id, role in ((0, "debugger"), (1, "coverage"), (2, "profiler")):
            try:
                name = monitoring.get_tool(tool_id)
                events = monitoring.get_events(tool_id) if name else 0
            except ValueError:  # pragma: no cover - a tool id this Python does not have
                continue
            if name and events:
                found.append(f"sys.monitoring {role} tool {name!r}")
    return found


def _owner_module(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return str(module)


def _env_flag(name: str) -> Optional[str]:
    value = os.environ.get(name)
    if value is None or value.strip().lower() in ("", "0", "false", "no", "off"):
        return None
    return value


def find_debug_tools(trainer: Any = None, trainer_anomaly: bool = False) -> list[DebugTool]:
    """List the debugging tools that are switched on, each with its cost and the fix (tip T14).

    Reads process-wide state (torch flags, environment variables, Python tracers) and, when given,
    the Trainer's settings (``detect_anomaly``, ``profiler``, ``log_every_n_steps``). Reading never
    changes anything and never initialises CUDA.

    Args:
        trainer: an optional ``lightning.pytorch.Trainer`` to inspect as well.
        trainer_anomaly: whether that Trainer was given ``detect_anomaly=True`` (Lightning keeps it only in a private
            attribute; the caller reads it with :func:`~lightning_speedups.trainer.internals.detect_anomaly`).

    Returns:
        One :class:`DebugTool` per tool found, in the order of :data:`DEBUG_TOOL_IDS`; empty when
        nothing is on.

    Examples:
        >>> import os
        >>> os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
        >>> [t.id for t in find_debug_tools() if t.id == "cuda_launch_blocking"]
        ['cuda_launch_blocking']
        >>> del os.environ["CUDA_LAUNCH_BLOCKING"]
    """
    cuda = _cuda_available()
    no_cuda_note = "" if cuda else " (no effect on this machine: no CUDA device)"
    return [
        *_anomaly_detection(trainer_anomaly),
        *_torch_profiler(),
        *_lightning_profiler(trainer),
        *_determinism(cuda, no_cuda_note),
        *_sync_debug_mode(cuda),
        *_environment_variables(cuda, no_cuda_note),
        *_python_tracer(),
        *_log_every_step(trainer),
    ]


def _anomaly_detection(trainer_anomaly: bool) -> list[DebugTool]:
    """Anomaly detection: torch's global flag, or the Trainer flag that turns it on during fit."""
    tools: list[DebugTool] = []
    torch_anomaly = torch.is_anomaly_enabled()
    if torch_anomaly or trainer_anomaly:
        check_nan = torch.is_anomaly_check_nan_enabled() if hasattr(torch, "is_anomaly_check_nan_enabled") else True
        parts = []
        if trainer_anomaly:
            parts.append("Trainer(detect_anomaly=True)")
        if torch_anomaly:
            parts.append(f"torch.is_anomaly_enabled() is True (check_nan={check_nan})")
        tools.append(
            DebugTool(
                id="anomaly_detection",
                name="autograd anomaly detection",
                evidence="; ".join(parts),
                cost=(
                    "records a Python traceback for every autograd node and checks every backward output"
                    " for NaN (a device sync per op): the backward pass often runs several times slower"
                ),
                fix=(
                    "remove Trainer(detect_anomaly=True)"
                    if trainer_anomaly
                    else "remove torch.autograd.set_detect_anomaly(True) / detect_anomaly() from the code"
                )
                + "; use the debug preset (DebugMode) when you do want it",
                severity="high",
            )
        )
    return tools


def _torch_profiler() -> list[DebugTool]:
    """The autograd / torch profiler, or NVTX and ITT ranges."""
    tools: list[DebugTool] = []
    kind = _profiler_type_name()
    if kind in ("NVTX", "ITT"):
        tools.append(
            DebugTool(
                id="nvtx_emission",
                name=f"{kind} range emission",
                evidence=f"the autograd profiler is active in {kind} mode"
                f" (torch.autograd.profiler.emit_{kind.lower()}())",
                cost="pushes and pops a profiler range around every operator, on the CPU critical path",
                fix=f"drop the `with torch.autograd.profiler.emit_{kind.lower()}():` block outside profiling runs",
                severity="medium",
            )
        )
    elif kind is not None:
        tools.append(
            DebugTool(
                id="autograd_profiler",
                name="torch profiler",
                evidence=f"the autograd profiler is recording (profiler type {kind})",
                cost="records every operator (and kernel, with CUDA activities): slower steps and growing memory",
                fix="close the torch.profiler.profile / torch.autograd.profiler.profile block outside profiling runs",
                severity="high",
            )
        )
    return tools


def _lightning_profiler(trainer: Any) -> list[DebugTool]:
    """A Lightning profiler other than the pass-through one."""
    tools: list[DebugTool] = []
    profiler = getattr(trainer, "profiler", None) if trainer is not None else None
    if profiler is not None and type(profiler).__name__ != "PassThroughProfiler":
        pname = type(profiler).__name__
        heavy = pname in ("AdvancedProfiler", "PyTorchProfiler")
        tools.append(
            DebugTool(
                id="lightning_profiler",
                name=f"Lightning {pname}",
                evidence=f"trainer.profiler is a {pname}",
                cost=(
                    "profiles every hook call (cProfile or the torch profiler): a large slowdown"
                    if heavy
                    else "times every hook call and keeps the durations: small per-step overhead"
                ),
                fix="remove Trainer(profiler=...) outside profiling runs",
                severity="high" if heavy else "low",
            )
        )
    return tools


def _determinism(cuda: bool, no_cuda_note: str) -> list[DebugTool]:
    """Deterministic algorithms (``Trainer(deterministic=True)`` sets this global flag) and cuDNN's switches."""
    tools: list[DebugTool] = []
    if torch.are_deterministic_algorithms_enabled():
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        tools.append(
            DebugTool(
                id="deterministic_algorithms",
                name="deterministic algorithms",
                evidence="torch.are_deterministic_algorithms_enabled() is True"
                + (" (warn_only)" if warn_only else "")
                + ", set by Trainer(deterministic=True) or torch.use_deterministic_algorithms(True)",
                cost=(
                    "picks slower deterministic kernels (scatter/index_add, some convolutions and poolings)"
                    " or fails on ops that have none" + no_cuda_note
                ),
                fix="remove Trainer(deterministic=True) / torch.use_deterministic_algorithms(True) when"
                " bitwise reproducibility is not needed",
                severity="medium" if cuda else "low",
            )
        )
    if torch.backends.cudnn.deterministic:
        tools.append(
            DebugTool(
                id="cudnn_deterministic",
                name="cuDNN deterministic mode",
                evidence="torch.backends.cudnn.deterministic is True",
                cost="limits cuDNN to deterministic convolution algorithms, often not the fastest" + no_cuda_note,
                fix="leave torch.backends.cudnn.deterministic at False when reproducibility is not needed",
                severity="medium" if cuda else "low",
            )
        )
    if not torch.backends.cudnn.enabled and cuda:
        tools.append(
            DebugTool(
                id="cudnn_disabled",
                name="cuDNN disabled",
                evidence="torch.backends.cudnn.enabled is False",
                cost="convolutions, RNNs and batch norm fall back to slower native CUDA kernels",
                fix="do not set torch.backends.cudnn.enabled = False outside debugging",
                severity="high",
            )
        )
    return tools


def _sync_debug_mode(cuda: bool) -> list[DebugTool]:
    """Sync-debug mode: only readable without initialising CUDA if CUDA is already initialised."""
    tools: list[DebugTool] = []
    if cuda and torch.cuda.is_initialized():
        try:
            mode = torch.cuda.get_sync_debug_mode()
        except RuntimeError:  # pragma: no cover
            mode = 0
        if mode:
            label = {1: "warn", 2: "error"}.get(int(mode), str(mode))
            tools.append(
                DebugTool(
                    id="sync_debug_mode",
                    name="CUDA sync-debug mode",
                    evidence=f"torch.cuda.get_sync_debug_mode() is {int(mode)} ({label!r})",
                    cost="checks every synchronizing call and raises a Python warning or error for each",
                    fix="torch.cuda.set_sync_debug_mode('default'), or use SyncGuard only while checking",
                    severity="medium",
                )
            )
    return tools


def _environment_variables(cuda: bool, no_cuda_note: str) -> list[DebugTool]:
    """Debugging environment variables: ``CUDA_LAUNCH_BLOCKING`` and the like."""
    tools: list[DebugTool] = []
    value = _env_flag("CUDA_LAUNCH_BLOCKING")
    if value is not None:
        tools.append(
            DebugTool(
                id="cuda_launch_blocking",
                name="CUDA_LAUNCH_BLOCKING",
                evidence=f"environment variable CUDA_LAUNCH_BLOCKING={value}" + no_cuda_note,
                cost="every kernel launch waits for the kernel to finish: no CPU/GPU overlap at all",
                fix="unset CUDA_LAUNCH_BLOCKING outside debugging",
                severity="high" if cuda else "low",
            )
        )
    value = _env_flag("PYTORCH_NO_CUDA_MEMORY_CACHING")
    if value is not None:
        tools.append(
            DebugTool(
                id="no_cuda_memory_caching",
                name="CUDA caching allocator off",
                evidence=f"environment variable PYTORCH_NO_CUDA_MEMORY_CACHING={value}" + no_cuda_note,
                cost="every tensor allocation and free calls cudaMalloc/cudaFree, which synchronise the device",
                fix="unset PYTORCH_NO_CUDA_MEMORY_CACHING (it is meant for memory checkers)",
                severity="high" if cuda else "low",
            )
        )
    value = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").strip().upper()
    if value in ("INFO", "DETAIL"):
        tools.append(
            DebugTool(
                id="distributed_debug",
                name="torch.distributed debug mode",
                evidence=f"environment variable TORCH_DISTRIBUTED_DEBUG={value}",
                cost=(
                    "wraps every collective with a consistency check (extra collectives) and logs"
                    if value == "DETAIL"
                    else "extra logging and DDP unused-parameter checks"
                ),
                fix="unset TORCH_DISTRIBUTED_DEBUG outside debugging",
                severity="medium" if value == "DETAIL" else "low",
            )
        )
    return tools


def _python_tracer() -> list[DebugTool]:
    """A Python tracer: debugger, coverage, profiler."""
    tools: list[DebugTool] = []
    tracers = _python_tracers()
    if tracers:
        tools.append(
            DebugTool(
                id="python_tracer",
                name="Python tracer (debugger, coverage or profiler)",
                evidence="; ".join(tracers),
                cost="runs Python code on every call or line: data loading and Lightning hooks slow down many times",
                fix="train without the debugger, coverage or profiler attached",
                severity="medium",
            )
        )
    return tools


def _log_every_step(trainer: Any) -> list[DebugTool]:
    """Logging every step forces a device->host copy of every logged value every step."""
    tools: list[DebugTool] = []
    if trainer is not None and getattr(trainer, "log_every_n_steps", None) == 1 and getattr(trainer, "loggers", None):
        tools.append(
            DebugTool(
                id="log_every_step",
                name="logging every step",
                evidence="Trainer(log_every_n_steps=1) with a logger",
                cost="every logged tensor is copied to the host every step: a device sync per step",
                fix="keep log_every_n_steps at its default (50) or larger",
                severity="low",
            )
        )
    return tools
