"""Runtime checks without a Trainer: debugging tools left on (T14), device syncs (T08), autograd in
evaluation (T17) and changing input shapes (T07).

These are the plain cores that the callbacks in :mod:`lightning_speedups.callbacks.guards` and the
``doctor`` call. Each returns structured findings (dataclasses with a ``to_finding()`` dict carrying
``tip``, ``slug``, ``severity``, ``evidence`` and ``fix``), never prints.

Card (T14 ``debug-off``, seed A#13 "turn debugging tools off when not debugging"):
    What it does: :func:`find_debug_tools` lists the debugging switches that are on in this process
    (anomaly detection, the autograd / torch profiler, NVTX or ITT ranges, a Lightning profiler,
    deterministic algorithms, cuDNN switches, sync-debug mode, ``CUDA_LAUNCH_BLOCKING`` and
    similar environment variables, a Python tracer such as a debugger or coverage), each with what
    it costs and the fix.
    Expected gain: anomaly detection alone often makes the backward pass several times slower;
    ``CUDA_LAUNCH_BLOCKING=1`` removes all CPU/GPU overlap.
    When it hurts: never by itself; the tools are right while debugging (use the ``debug`` preset,
    :class:`~lightning_speedups.callbacks.guards.DebugMode`, to turn them on deliberately).

Example:
    >>> from lightning_speedups.functional.debug import find_debug_tools
    >>> import torch
    >>> with torch.autograd.set_detect_anomaly(True):
    ...     [tool.id for tool in find_debug_tools()][:1]
    ['anomaly_detection']
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import linecache
import os
import re
import site
import sys
import sysconfig
import threading
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Literal, NamedTuple, Optional

import torch
from torch import nn

__all__ = [
    "DEBUG_TOOL_IDS",
    "SEVERITIES",
    "SYNC_WARNING_PATTERN",
    "DebugTool",
    "EvalGradEvent",
    "EvalGradWatch",
    "ShapeTracker",
    "SyncError",
    "SyncSite",
    "SyncWatcher",
    "batch_shape_signature",
    "classify_sync_frame",
    "find_debug_tools",
    "tensors_requiring_grad",
    "watch_syncs",
]

#: Severity vocabulary of the findings, highest first.
SEVERITIES = ("high", "medium", "low")

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


# ---------------------------------------------------------------------------------------------------
# T14: debugging tools left on
# ---------------------------------------------------------------------------------------------------


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

    def to_finding(self) -> dict[str, str]:
        """The finding as a plain dict (``tip``, ``slug``, ``severity``, ``evidence``, ``fix`` ...)."""
        return {
            "tip": self.tip,
            "slug": self.slug,
            "severity": self.severity,
            "id": self.id,
            "name": self.name,
            "evidence": self.evidence,
            "cost": self.cost,
            "fix": self.fix,
        }

    def __str__(self) -> str:
        return f"{self.name}: {self.evidence}. Cost: {self.cost}. Fix: {self.fix}"


def _cuda_available() -> bool:
    try:
        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - broken driver setups
        return False


def _profiler_type_name() -> Optional[str]:
    """Name of the active autograd profiler (``"KINETO"``, ``"NVTX"``, ...) or ``None``."""
    autograd_c = getattr(torch._C, "_autograd", None)
    enabled = False
    if autograd_c is not None and hasattr(autograd_c, "_profiler_enabled"):
        try:
            enabled = bool(autograd_c._profiler_enabled())
        except Exception:  # pragma: no cover
            enabled = False
    if not enabled:
        enabled = bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))
    if not enabled:
        return None
    kind = "UNKNOWN"
    if autograd_c is not None and hasattr(autograd_c, "_profiler_type"):
        try:
            kind = str(autograd_c._profiler_type()).rsplit(".", 1)[-1]
        except Exception:  # pragma: no cover
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
            except Exception:  # pragma: no cover
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


def find_debug_tools(trainer: Any = None) -> list[DebugTool]:
    """List the debugging tools that are switched on, each with its cost and the fix (tip T14).

    Reads process-wide state (torch flags, environment variables, Python tracers) and, when given,
    the Trainer's settings (``detect_anomaly``, ``profiler``, ``log_every_n_steps``). Reading never
    changes anything and never initialises CUDA.

    Args:
        trainer: an optional ``lightning.pytorch.Trainer`` to inspect as well.

    Returns:
        One :class:`DebugTool` per tool found, in the order of :data:`DEBUG_TOOL_IDS`; empty when
        nothing is on.

    Example:
        >>> import os
        >>> os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
        >>> [t.id for t in find_debug_tools() if t.id == "cuda_launch_blocking"]
        ['cuda_launch_blocking']
        >>> del os.environ["CUDA_LAUNCH_BLOCKING"]
    """
    tools: list[DebugTool] = []
    cuda = _cuda_available()
    no_cuda_note = "" if cuda else " (no effect on this machine: no CUDA device)"

    # anomaly detection: torch's global flag, or the Trainer flag that turns it on during fit
    torch_anomaly = torch.is_anomaly_enabled()
    trainer_anomaly = bool(getattr(trainer, "_detect_anomaly", False)) if trainer is not None else False
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

    # autograd / torch profiler, NVTX and ITT ranges
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

    # a Lightning profiler
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

    # deterministic algorithms (Trainer(deterministic=True) sets this global flag)
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

    # sync-debug mode: only readable without initialising CUDA if CUDA is already initialised
    if cuda and torch.cuda.is_initialized():
        try:
            mode = torch.cuda.get_sync_debug_mode()
        except Exception:  # pragma: no cover
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

    # environment variables
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

    # a Python tracer: debugger, coverage, profiler
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

    # logging every step forces a device->host copy of every logged value every step
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


# ---------------------------------------------------------------------------------------------------
# T08: device synchronisations
# ---------------------------------------------------------------------------------------------------

#: The start of the warning torch emits for each synchronising call in sync-debug mode "warn".
SYNC_WARNING_PATTERN = r"called a synchronizing CUDA operation"
_SYNC_RE = re.compile(SYNC_WARNING_PATTERN)


class SyncError(RuntimeError):
    """Raised by a :class:`SyncWatcher` in mode ``"error"`` when the user's code synchronises."""


class SyncSite(NamedTuple):
    """Where one device synchronisation came from.

    Attributes:
        owner: ``"user"`` (the user's code or model), ``"lightning"`` (Lightning or this package),
            ``"library"`` (another installed package, e.g. torchmetrics) or ``"debug"`` (a debugging
            tool, e.g. anomaly detection's NaN check).
        kind: what it is, e.g. ``"your code"``, ``"progress bar metrics"``, ``"backward pass"``.
        location: ``"path:line in function"`` (user's frame where there is one).
        code: the source line at ``location`` when known, else ``""``.
    """

    owner: str
    kind: str
    location: str
    code: str = ""

    def describe(self) -> str:
        code = f" `{self.code}`" if self.code else ""
        if self.owner == "user":
            return f"{self.location}{code}" + ("" if self.kind == "your code" else f" ({self.kind})")
        return f"{self.kind} at {self.location}{code}"


def _package_dir(name: str) -> Optional[str]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.normcase(os.path.realpath(list(spec.submodule_search_locations)[0]))


@functools.lru_cache(maxsize=1)
def _roots() -> dict[str, Any]:
    stdlib = {
        os.path.normcase(os.path.realpath(p))
        for key in ("stdlib", "platstdlib")
        if (p := sysconfig.get_paths().get(key))
    }
    sites: set[str] = set()
    for getter in (getattr(site, "getsitepackages", None), getattr(site, "getusersitepackages", None)):
        if getter is None:
            continue
        try:
            found = getter()
        except Exception:  # pragma: no cover
            continue
        for p in [found] if isinstance(found, str) else found:
            sites.add(os.path.normcase(os.path.realpath(p)))
    for key in ("purelib", "platlib"):
        if p := sysconfig.get_paths().get(key):
            sites.add(os.path.normcase(os.path.realpath(p)))
    framework = [d for d in map(_package_dir, ("lightning", "pytorch_lightning", "lightning_fabric")) if d]
    own = os.path.normcase(os.path.realpath(os.path.dirname(os.path.dirname(__file__))))
    return {
        "torch": os.path.normcase(os.path.realpath(os.path.dirname(torch.__file__))),
        "framework": framework,
        "own": own,
        "stdlib": sorted(stdlib),
        "sites": sorted(sites, key=len, reverse=True),
        "this": os.path.normcase(os.path.realpath(__file__)),
    }


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


@functools.lru_cache(maxsize=4096)
def _file_class(filename: str) -> tuple[str, str]:
    """``(class, detail)`` of a code file: class in skip/torch/framework/library/user."""
    if filename.startswith("<") and filename.endswith(">"):
        return ("skip", "") if filename.startswith("<frozen") else ("user", "")
    roots = _roots()
    path = os.path.normcase(os.path.realpath(filename))
    if path == roots["this"]:
        return ("skip", "")
    if _under(path, roots["torch"]):
        return ("torch", os.path.relpath(path, roots["torch"]))
    for root in roots["framework"]:
        if _under(path, root):
            return ("framework", os.path.join(os.path.basename(root), os.path.relpath(path, root)))
    if _under(path, roots["own"]):
        return ("framework", os.path.join("lightning_speedups", os.path.relpath(path, roots["own"])))
    for root in roots["sites"]:
        if _under(path, root):
            rel = os.path.relpath(path, root)
            return ("library", rel.split(os.sep, 1)[0])
    for root in roots["stdlib"]:
        if _under(path, root):
            return ("skip", "")
    return ("user", "")


_FRAMEWORK_KINDS = (
    ("callbacks" + os.sep + "progress", "progress bar metrics (Lightning reads logged values each batch)"),
    ("logger_connector", "logging (Lightning converts logged values for loggers and the progress bar)"),
    (os.sep + "result.py", "logging (Lightning converts logged values for loggers and the progress bar)"),
    ("plugins" + os.sep + "precision", "mixed-precision plugin (GradScaler inf/NaN check)"),
    ("strategies", "multi-device reduce/broadcast (Lightning strategy)"),
    ("distributed", "multi-device reduce/broadcast (Lightning strategy)"),
    ("loops", "Lightning training loop"),
    ("lightning_speedups", "lightning_speedups monitor"),
)


def _framework_kind(rel: str) -> str:
    for needle, kind in _FRAMEWORK_KINDS:
        if needle in rel:
            return kind
    return "Lightning internals"


def _short_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # pragma: no cover - other drive on Windows
        return filename
    return filename if rel.startswith("..") else rel


def _frame_location(frame: FrameType, display: Optional[str] = None) -> str:
    return f"{display or _short_path(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def _is_backward_frame(frame: FrameType, rel: str) -> bool:
    return frame.f_code.co_name == "backward" and (rel == "_tensor.py" or rel.startswith("autograd"))


def classify_sync_frame(frame: Optional[FrameType]) -> SyncSite:
    """Attribute a synchronisation to the code that made it, from the Python stack at the sync.

    Walks outwards from ``frame`` (the innermost Python frame at the sync) past torch and the
    standard library, to the first frame of other code:

    - a frame of Lightning (or this package) -> ``owner="lightning"`` with the kind of sync
      (progress bar, logging, precision plugin, multi-device reduce ...), except when the stack
      went through ``Tensor.backward``: the model's own backward ops synchronised -> ``"user"``;
    - a frame of another installed package -> ``owner="library"``, located at the nearest user frame;
    - any other frame -> ``owner="user"``, located there;
    - a sync inside ``backward`` while anomaly detection checks for NaN -> ``owner="debug"``: the
      check reads every backward output on the host, so those syncs are the debug tool's.

    Args:
        frame: innermost frame, e.g. ``sys._getframe()`` where the sync was reported.

    Returns:
        The :class:`SyncSite`.
    """
    saw_backward = False
    first: Optional[tuple[str, str, FrameType]] = None
    nearest_user: Optional[FrameType] = None
    f = frame
    while f is not None:
        cls, detail = _file_class(f.f_code.co_filename)
        if cls == "torch":
            if first is None and _is_backward_frame(f, detail):
                saw_backward = True
        elif cls != "skip":
            if first is None:
                first = (cls, detail, f)
            if cls == "user":
                nearest_user = f
                break
            if cls == "framework" and first[0] == "library":
                break  # a library called from Lightning (e.g. a LightningModule installed as a package)
        f = f.f_back
    if first is None:
        return SyncSite("library", "torch internals", "torch", "")
    cls, detail, f0 = first
    if saw_backward and torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled():
        # anomaly detection checks every backward output for NaN with a host read: its syncs, not the model's
        where = _frame_location(nearest_user) if nearest_user is not None else "loss.backward()"
        return SyncSite("debug", "anomaly detection NaN check in backward (check_nan=True)", where, "")
    if cls == "user":
        return SyncSite("user", "your code", _frame_location(f0), _source_line(f0))
    if cls == "framework":
        if saw_backward:
            where = _frame_location(nearest_user) if nearest_user is not None else "loss.backward()"
            return SyncSite("user", "backward pass of your model", where, "")
        return SyncSite("lightning", _framework_kind(detail), _frame_location(f0, detail), "")
    # another library: point at the user's call into it
    if nearest_user is not None:
        return SyncSite("library", detail, _frame_location(nearest_user), _source_line(nearest_user))
    return SyncSite("library", detail, _frame_location(f0), "")


def _source_line(frame: FrameType) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()


class _SyncHub:
    """Process-wide plumbing shared by all watchers: one warning filter, one showwarning hook, one
    saved sync-debug mode. Reference counted so that watchers can be nested and torn down in any
    order without leaking the hook, the filter or the mode."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.installed: list[SyncWatcher] = []
        self.active: list[SyncWatcher] = []
        self.prev_showwarning: Optional[Callable[..., Any]] = None
        self.filter_entry: Optional[tuple] = None
        self.prev_mode: Optional[int] = None
        # indirection so tests can run the machinery without CUDA
        self.get_mode: Callable[[], int] = lambda: int(torch.cuda.get_sync_debug_mode())
        self.set_mode: Callable[[Any], None] = torch.cuda.set_sync_debug_mode

    # -- warnings plumbing --------------------------------------------------------------------------
    def install(self, watcher: SyncWatcher) -> None:
        with self.lock:
            if watcher in self.installed:
                return
            if not self.installed:
                warnings.filterwarnings("always", message=SYNC_WARNING_PATTERN, category=UserWarning)
                self.filter_entry = warnings.filters[0]
                self.prev_showwarning = warnings.showwarning
                warnings.showwarning = self.showwarning
            self.installed.append(watcher)

    def uninstall(self, watcher: SyncWatcher) -> None:
        with self.lock:
            if watcher in self.active:
                self.stop(watcher)
            if watcher not in self.installed:
                return
            self.installed.remove(watcher)
            if self.installed:
                return
            if self.filter_entry is not None and self.filter_entry in warnings.filters:
                warnings.filters.remove(self.filter_entry)
                mutated = getattr(warnings, "_filters_mutated", None) or getattr(
                    warnings, "_filters_mutated_lock_held", None
                )
                if mutated is not None:
                    mutated()
            self.filter_entry = None
            if warnings.showwarning == self.showwarning:
                warnings.showwarning = self.prev_showwarning  # type: ignore[assignment]
            self.prev_showwarning = None

    def showwarning(self, message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        if self.active and isinstance(category, type) and issubclass(category, UserWarning):
            if _SYNC_RE.match(str(message)):
                site_ = classify_sync_frame(sys._getframe(1))
                raise_for: Optional[SyncWatcher] = None
                for watcher in list(self.active):
                    if watcher._record(site_) and raise_for is None:
                        raise_for = watcher
                if raise_for is not None:
                    raise SyncError(raise_for._error_message(site_))
                return
        self.forward(message, category, filename, lineno, file, line)

    def forward(self, message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        prev = self.prev_showwarning
        orig = getattr(warnings, "_showwarning_orig", None)
        impl = getattr(warnings, "_showwarnmsg_impl", None)
        if prev is None or (prev is orig and impl is not None):
            # honour warnings.catch_warnings(record=True) (pytest.warns and friends)
            if impl is not None:
                impl(warnings.WarningMessage(message, category, filename, lineno, file, line))
                return
            prev = orig
        if prev is not None:
            prev(message, category, filename, lineno, file, line)

    # -- sync-debug mode ----------------------------------------------------------------------------
    def start(self, watcher: SyncWatcher) -> None:
        with self.lock:
            if watcher in self.active:
                return
            if not self.active:
                self.prev_mode = self.get_mode()
                self.set_mode("warn")
            self.active.append(watcher)

    def stop(self, watcher: SyncWatcher) -> None:
        with self.lock:
            if watcher not in self.active:
                return
            self.active.remove(watcher)
            if not self.active and self.prev_mode is not None:
                self.set_mode(self.prev_mode)
                self.prev_mode = None


_HUB = _SyncHub()


class SyncWatcher:
    """Count and attribute the device synchronisations made inside windows of code (tip T08).

    Uses ``torch.cuda.set_sync_debug_mode("warn")`` inside each window: torch then emits a warning
    per synchronising call; the watcher catches each one (no output), attributes it from the Python
    stack with :func:`classify_sync_frame`, and counts it per :class:`SyncSite`. Outside the windows
    the previous sync-debug mode is back; :meth:`uninstall` removes every trace.

    Args:
        mode: ``"count"`` counts; ``"warn"`` also queues each new user site in
            :attr:`new_user_sites` for the caller to report; ``"error"`` raises :class:`SyncError`
            at the first sync made by the user's code (Lightning's own syncs are only counted).

    Example:
        >>> watcher = SyncWatcher("count")
        >>> watcher.install()
        >>> # with watcher.window(): run_one_training_step()
        >>> watcher.uninstall()
        >>> watcher.user_syncs
        0
    """

    def __init__(self, mode: Literal["count", "warn", "error"] = "count") -> None:
        if mode not in ("count", "warn", "error"):
            raise ValueError(f"`mode` must be 'count', 'warn' or 'error', got {mode!r}.")
        self.mode = mode
        self.sites: Counter[SyncSite] = Counter()
        self.windows = 0
        self.new_user_sites: list[SyncSite] = []

    @staticmethod
    def available() -> bool:
        """Whether there is anything to watch: a CUDA device."""
        return _cuda_available()

    def install(self) -> None:
        """Catch torch's sync warnings (once per watcher; idempotent)."""
        _HUB.install(self)

    def uninstall(self) -> None:
        """Close any open window, restore the warning hook and filter (idempotent)."""
        _HUB.uninstall(self)

    def start(self) -> None:
        """Open a window: sync-debug mode ``"warn"`` until :meth:`stop`."""
        self.install()
        _HUB.start(self)
        self.windows += 1

    def stop(self) -> None:
        """Close the window and restore the previous sync-debug mode (idempotent)."""
        _HUB.stop(self)

    @property
    def in_window(self) -> bool:
        return self in _HUB.active

    @contextmanager
    def window(self) -> Iterator[SyncWatcher]:
        """Context manager around :meth:`start` / :meth:`stop`."""
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def _record(self, site_: SyncSite) -> bool:
        """Count one sync; return True when it must become an error."""
        if site_.owner == "user" and site_ not in self.sites and self.mode == "warn":
            self.new_user_sites.append(site_)
        self.sites[site_] += 1
        return self.mode == "error" and site_.owner == "user"

    def _error_message(self, site_: SyncSite) -> str:
        return (
            f"Device synchronisation inside the training step at {site_.describe()}. It stalls the CPU until"
            " the GPU has caught up. Keep the value on the device (log the tensor, not `.item()`), or move"
            " the call out of the step; SyncGuard(mode='warn') reports without stopping."
        )

    def count(self, owner: str) -> int:
        return sum(n for s, n in self.sites.items() if s.owner == owner)

    @property
    def user_syncs(self) -> int:
        """Syncs made by the user's code, including the model's own backward ops."""
        return self.count("user")

    @property
    def lightning_syncs(self) -> int:
        """Syncs made by Lightning itself (progress bar, logging, AMP scaler, multi-device reduce)."""
        return self.count("lightning")

    @property
    def library_syncs(self) -> int:
        """Syncs made inside other installed libraries."""
        return self.count("library")

    @property
    def debug_syncs(self) -> int:
        """Syncs made by debugging tools (anomaly detection's NaN check in backward)."""
        return self.count("debug")

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def by_owner(self, owner: str) -> list[tuple[SyncSite, int]]:
        return [(s, n) for s, n in self.sites.most_common() if s.owner == owner]

    def summary(self) -> str:
        """One paragraph: totals per owner and the top sites."""
        steps = max(self.windows, 1)
        text = f"{self.total} device syncs in {self.windows} training steps ({self.total / steps:.1f} per step)"
        parts = []
        labels = (
            ("user", "in your code"),
            ("lightning", "made by Lightning"),
            ("library", "in libraries"),
            ("debug", "made by debugging tools"),
        )
        for owner, label in labels:
            items = self.by_owner(owner)
            if not items:
                continue
            top = ", ".join(f"{s.describe()}: {n}" for s, n in items[:5])
            more = f", and {len(items) - 5} more sites" if len(items) > 5 else ""
            parts.append(f"{self.count(owner)} {label} ({top}{more})")
        return text + (": " + "; ".join(parts) if parts else "")

    def findings(self) -> list[dict[str, Any]]:
        """One finding per user or library site (Lightning's and debug tools' syncs are named, not findings)."""
        steps = max(self.windows, 1)
        out = []
        for s, n in self.sites.most_common():
            if s.owner in ("lightning", "debug"):
                continue
            out.append(
                {
                    "tip": "T08",
                    "slug": "no-sync",
                    "severity": "medium" if n >= steps else "low",
                    "evidence": f"{n} device syncs in {self.windows} training steps at {s.describe()}",
                    "fix": "keep the value on the device (log tensors, not .item()/.cpu()/print),"
                    " or compute it every N steps outside the step",
                    "owner": s.owner,
                    "location": s.location,
                }
            )
        return out


@contextmanager
def watch_syncs(mode: Literal["count", "warn", "error"] = "count") -> Iterator[SyncWatcher]:
    """Count the device syncs of a block of code (on CUDA; a no-op watcher elsewhere).

    Example:
        >>> with watch_syncs() as w:
        ...     pass  # a few training steps
        >>> w.total
        0
    """
    watcher = SyncWatcher(mode)
    if not SyncWatcher.available():
        yield watcher
        return
    watcher.install()
    try:
        with watcher.window():
            yield watcher
    finally:
        watcher.uninstall()


# ---------------------------------------------------------------------------------------------------
# T17: autograd during evaluation
# ---------------------------------------------------------------------------------------------------


def _walk(obj: Any, prefix: str, seen: Optional[set[int]] = None) -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` for tensors inside dicts, sequences, dataclasses and named tuples."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
        return
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    if isinstance(obj, Mapping):
        seen.add(id(obj))
        for k, v in obj.items():
            yield from _walk(v, f"{prefix}[{k!r}]", seen)
    elif isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for i, v in enumerate(obj):
            yield from _walk(v, f"{prefix}[{i}]", seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        for f in dataclasses.fields(obj):
            yield from _walk(getattr(obj, f.name), f"{prefix}.{f.name}", seen)


def tensors_requiring_grad(obj: Any, prefix: str = "outputs") -> list[tuple[str, torch.Tensor]]:
    """The tensors inside ``obj`` that carry an autograd graph (``requires_grad``).

    Example:
        >>> w = torch.ones(2, requires_grad=True)
        >>> [p for p, _ in tensors_requiring_grad({"loss": (w * 2).sum(), "n": torch.ones(1)})]
        ["outputs['loss']"]
    """
    return [(p, t) for p, t in _walk(obj, prefix) if t.requires_grad]


@dataclass(frozen=True)
class EvalGradEvent:
    """A forward of a sub-module that built an autograd graph during evaluation."""

    module_name: str
    module_type: str
    grad_fn: str

    def describe(self) -> str:
        return f"{self.module_type} '{self.module_name or '<root>'}' built an autograd graph (grad_fn={self.grad_fn})"


class EvalGradWatch:
    """Forward hooks that catch sub-modules building an autograd graph (tip T17).

    A forward counts when grad mode is on *and* an output requires grad: only then does autograd
    keep activations alive and record a graph. Grad mode on with nothing requiring grad (a frozen
    model) costs nothing and is not reported.

    Args:
        module: the model to watch; hooks go on every sub-module that owns parameters.

    Example:
        >>> model = torch.nn.Linear(2, 2)
        >>> with EvalGradWatch(model) as watch, torch.no_grad():
        ...     _ = model(torch.ones(1, 2))
        >>> watch.events
        []
    """

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"`module` must be a torch.nn.Module, got {type(module).__name__}.")
        self.module = module
        self.events: list[EvalGradEvent] = []
        self._seen: set[str] = set()
        self._handles: list[Any] = []

    def attach(self) -> EvalGradWatch:
        if self._handles:
            return self
        for name, sub in self.module.named_modules():
            if any(True for _ in sub.parameters(recurse=False)):
                self._handles.append(sub.register_forward_hook(functools.partial(self._hook, name)))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def _hook(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        if name in self._seen or not torch.is_grad_enabled():
            return
        found = tensors_requiring_grad(output)
        if found:
            self._seen.add(name)
            grad_fn = type(found[0][1].grad_fn).__name__ if found[0][1].grad_fn is not None else "leaf"
            self.events.append(EvalGradEvent(name, type(module).__name__, grad_fn))

    def __enter__(self) -> EvalGradWatch:
        return self.attach()

    def __exit__(self, *exc: Any) -> None:
        self.detach()


# ---------------------------------------------------------------------------------------------------
# T07: input shapes and cudnn.benchmark
# ---------------------------------------------------------------------------------------------------


def batch_shape_signature(batch: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The shapes of a batch's floating-point tensors, with their paths (all tensors if none float).

    Example:
        >>> batch_shape_signature((torch.zeros(8, 3, 32, 32), torch.zeros(8, dtype=torch.long)))
        (('batch[0]', (8, 3, 32, 32)),)
    """
    leaves = list(_walk(batch, "batch"))
    floating = [(p, t) for p, t in leaves if t.is_floating_point() or t.is_complex()]
    chosen = floating or leaves
    return tuple((p, tuple(t.shape)) for p, t in chosen)


@dataclass
class ShapeTracker:
    """Count distinct batch shapes (tip T07: ``cudnn.benchmark`` re-tunes at every new shape).

    Args:
        max_shapes: how many distinct shapes are fine (default 2: the full batch and a last,
            smaller one). More than that with ``cudnn.benchmark`` on is a finding.
        limit: stop storing new shapes after this many (the count keeps growing).

    Example:
        >>> tracker = ShapeTracker()
        >>> for n in (8, 8, 5, 7):
        ...     _ = tracker.update(torch.zeros(n, 3))
        >>> tracker.distinct_shapes, tracker.steps
        (3, 4)
        >>> tracker.finding(benchmark=True)["evidence"]
        '3 distinct input shapes in 4 steps with torch.backends.cudnn.benchmark on'
    """

    max_shapes: int = 2
    limit: int = 10_000
    steps: int = 0
    shape_counts: dict[tuple, int] = field(default_factory=dict)
    _overflow: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_shapes, int) or isinstance(self.max_shapes, bool) or self.max_shapes < 1:
            raise ValueError(f"`max_shapes` must be an int >= 1, got {self.max_shapes!r}.")

    def update(self, batch: Any) -> bool:
        """Record one batch; return True when its shape is new."""
        sig = batch_shape_signature(batch)
        self.steps += 1
        if sig in self.shape_counts:
            self.shape_counts[sig] += 1
            return False
        if len(self.shape_counts) >= self.limit:
            self._overflow += 1
            return True
        self.shape_counts[sig] = 1
        return True

    @property
    def distinct_shapes(self) -> int:
        return len(self.shape_counts) + self._overflow

    @property
    def varying(self) -> bool:
        return self.distinct_shapes > self.max_shapes

    def finding(self, benchmark: Optional[bool] = None) -> Optional[dict[str, Any]]:
        """A T07 finding when shapes vary beyond ``max_shapes`` and benchmark mode is on, else ``None``.

        Args:
            benchmark: whether ``cudnn.benchmark`` is on; default: read ``torch.backends.cudnn.benchmark``.
        """
        benchmark = torch.backends.cudnn.benchmark if benchmark is None else benchmark
        if not (benchmark and self.varying):
            return None
        examples = ", ".join(str(shape) for sig in list(self.shape_counts)[:3] for _, shape in sig[:1])
        return {
            "tip": "T07",
            "slug": "cudnn-benchmark",
            "severity": "medium",
            "evidence": f"{self.distinct_shapes} distinct input shapes in {self.steps} steps"
            " with torch.backends.cudnn.benchmark on",
            "fix": "cudnn.benchmark re-tunes every convolution at each new shape: turn it off"
            " (Trainer(benchmark=False)) or make shapes fixed (pad or bucket to a few sizes, drop_last=True)",
            "examples": examples,
        }
