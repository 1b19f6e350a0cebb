"""T14: warn about debugging tools left on, with what each costs and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.callbacks.debug_mode import DebugMode
from lightning_speedups.callbacks.sync_guard import SyncGuard
from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.debug_tools import (
    DEBUG_TOOL_IDS,
    DebugTool,
    find_debug_tools,
)
from lightning_speedups.trainer.internals import detect_anomaly


class DebugToolsCheck(SpeedupCallback):
    """Warn about debugging tools left on, with what each costs and the fix (tip T14 ``debug-off``).

    When training starts, runs :func:`~lightning_speedups.functional.debug_tools.find_debug_tools` on the
    trainer (anomaly detection, the torch / autograd profiler, NVTX ranges, a Lightning profiler,
    deterministic algorithms, cuDNN switches, sync-debug mode, ``CUDA_LAUNCH_BLOCKING`` and
    friends, a debugger or coverage tracer, logging every step) and warns once, listing each.
    Tools turned on deliberately by a :class:`DebugMode` (or a :class:`SyncGuard`) in the same
    trainer, or named in ``ignore``, are not reported.

    Card: tip T14 ``debug-off``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        ignore: tool ids not to report (see
            :data:`~lightning_speedups.functional.debug_tools.DEBUG_TOOL_IDS`), e.g.
            ``("deterministic_algorithms",)`` when reproducibility is required.

    Examples:
        >>> check = DebugToolsCheck(ignore=["deterministic_algorithms"])
        >>> # after fit: check.found lists the DebugTool records that were reported
    """

    tip = "T14"
    part = "debug_tools_check"

    def __init__(self, ignore: Iterable[str] = ()) -> None:
        super().__init__()
        if isinstance(ignore, str):
            raise SettingTypeError("`DebugToolsCheck(ignore=...)` must be a list of tool ids, not a single string.")
        ignore = tuple(ignore)
        unknown = [i for i in ignore if i not in DEBUG_TOOL_IDS]
        if unknown:
            raise SettingError(
                f"`DebugToolsCheck(ignore=...)` has unknown tool ids {unknown}; known ids: {', '.join(DEBUG_TOOL_IDS)}."
            )
        self.ignore = frozenset(ignore)
        self.found: list[DebugTool] = []
        self.deliberate: list[DebugTool] = []

    @staticmethod
    def deliberate_ids(trainer: Trainer) -> frozenset[str]:
        """Tool ids that other callbacks of ``trainer`` turn on on purpose."""
        ids: set[str] = set()
        for cb in getattr(trainer, "callbacks", []):
            if isinstance(cb, DebugMode):
                ids |= cb.deliberate_tools
            elif isinstance(cb, SyncGuard):
                ids.add("sync_debug_mode")
        return frozenset(ids)

    def check(self, trainer: Optional[Trainer] = None) -> list[DebugTool]:
        """Run the check now; return the tools to report (also stored in :attr:`found`)."""
        skip = self.ignore | (self.deliberate_ids(trainer) if trainer is not None else frozenset())
        tools = find_debug_tools(trainer, trainer_anomaly=detect_anomaly(trainer))
        self.found = [t for t in tools if t.id not in skip]
        self.deliberate = [t for t in tools if t.id in skip]
        return self.found

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        found = self.check(trainer)
        if not found:
            self.report(True, "checked: no debugging tools left on")
            return
        lines = "\n".join(f"  - {t}" for t in found)
        rank_zero_warn(
            f"{len(found)} debugging tool(s) left on slow this training run down (tip T14):\n{lines}\n"
            "Use the `debug` preset (DebugMode) to turn them on deliberately while debugging.",
            category=PossibleUserWarning,
        )
        self.report(True, "debugging tools left on: " + ", ".join(t.id for t in found))
