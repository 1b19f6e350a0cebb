"""T08: count and attribute the device synchronisations made inside windows of code.

The plain core of :class:`~lightning_speedups.callbacks.SyncGuard` and of the doctor's sync check.
"""

from __future__ import annotations

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Literal, NamedTuple, Optional, cast

import torch

from lightning_speedups.errors import SettingError

__all__ = ["SYNC_WARNING_PATTERN", "SyncError", "SyncSite", "SyncWatcher", "classify_sync_frame", "watch_syncs"]

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
        except (AttributeError, OSError):  # pragma: no cover - a virtualenv's site module without them
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


def short_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # pragma: no cover - other drive on Windows
        return filename
    return filename if rel.startswith("..") else rel


def _frame_location(frame: FrameType, display: Optional[str] = None) -> str:
    return f"{display or short_path(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


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
                cast("list[Any]", warnings.filters).remove(self.filter_entry)  # a list at runtime (typeshed: Sequence)
                mutated = getattr(warnings, "_filters_mutated", None) or getattr(
                    warnings, "_filters_mutated_lock_held", None
                )
                if mutated is not None:
                    mutated()
            self.filter_entry = None
            if warnings.showwarning == self.showwarning:
                assert self.prev_showwarning is not None  # saved by install() when it set the hook
                warnings.showwarning = self.prev_showwarning
            self.prev_showwarning = None

    def showwarning(self, message, category, filename, lineno, file=None, line=None):
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

    def forward(self, message, category, filename, lineno, file=None, line=None):
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

    Examples:
        >>> watcher = SyncWatcher("count")
        >>> watcher.install()
        >>> # with watcher.window(): run_one_training_step()
        >>> watcher.uninstall()
        >>> watcher.user_syncs
        0
    """

    def __init__(self, mode: Literal["count", "warn", "error"] = "count") -> None:
        if mode not in ("count", "warn", "error"):
            raise SettingError(f"`mode` must be 'count', 'warn' or 'error', got {mode!r}.")
        self.mode = mode
        self.sites: Counter[SyncSite] = Counter()
        self.windows = 0
        self.new_user_sites: list[SyncSite] = []

    @staticmethod
    def available() -> bool:
        """Whether there is anything to watch: a CUDA device."""
        try:
            return torch.cuda.is_available()
        except RuntimeError:  # pragma: no cover - broken driver setups
            return False

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

    Examples:
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
