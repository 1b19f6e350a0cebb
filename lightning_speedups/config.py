"""The typed ``speedups:`` section of a preset, generated from the tip records.

Plain Trainer flags (precision, accumulate_grad_batches, gradient_clip_val, benchmark, strategy) could
live in ``trainer:``; but LightningCLI replaces ``trainer.callbacks`` wholesale when a second config
sets it (Lightning issue #15256), and Trainer flags cannot say ``auto``. So every part of the pack is a
keyed setting here. Keys merge one by one across ``--config a.yaml --config b.yaml``.

Nothing here lists tips: each tip's record (``lightning_speedups/tips/tNN_*.py``) declares the keys
it owns (:class:`~lightning_speedups.tips.record.Setting`), and :class:`Speedups` is generated from
them, with the pack's own two keys (``summary`` and ``monitors.advisor``). The same object serves the
CLI and Python users (``preset("fast").callbacks()``): :meth:`Speedups.trainer_kwargs` asks every
record for its Trainer arguments, :meth:`Speedups.callbacks` for its callbacks, placed by their order.

Examples:
    >>> from lightning_speedups.config import Speedups
    >>> s = Speedups(conv_bias=True, channels_last=True)
    >>> sorted(s.active_parts())
    ['channels_last', 'conv_bias']
    >>> [type(cb).__name__ for cb in s.callbacks()]
    ['ConvBiasRemoval', 'ChannelsLast', 'Safeguard', 'SpeedupsSummary']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

from lightning.pytorch.callbacks import Callback

from lightning_speedups.advisor import SpeedAdvisor
from lightning_speedups.callbacks import AutomaticOptimizationFlags, AutoProbe, SpeedupCallback, SpeedupsSummary
from lightning_speedups.callbacks.safeguard import Safeguard
from lightning_speedups.errors import SettingError
from lightning_speedups.tips import TIPS
from lightning_speedups.tips.record import BuildContext, Note, Placed, Setting, at
from lightning_speedups.tips.t01_lr_schedule import ScheduleSettings
from lightning_speedups.tips.t02_loader_workers import LoaderSettings
from lightning_speedups.tips.t04_max_batch import LargestBatchSettings
from lightning_speedups.tips.t05_amp import PrecisionSetting
from lightning_speedups.tips.t07_cudnn_benchmark import Toggle
from lightning_speedups.tips.t09_activation_checkpointing import CheckpointingSettings
from lightning_speedups.tips.t11_ddp import DDPSettings
from lightning_speedups.tips.t15_grad_clipping import ClipSettings
from lightning_speedups.tips.t18_input_norm import DeviceNormalizeSettings
from lightning_speedups.tips.t22_fusion import CompileSettings

#: The pack's own keys (not a tip's): the start-up summary and the doctor's checks inside a fit.
PACK_SETTINGS: tuple[Setting, ...] = (
    Setting("monitors.advisor", bool, False, doc="Run the doctor's checks inside the fit (SpeedAdvisor)."),
    Setting("summary", bool, True, doc="Print which speed-ups are active and which were skipped, and why."),
)


def all_settings() -> list[tuple[str, Setting]]:
    """``(owner, setting)`` for every ``speedups:`` key: each tip's, then the pack's own."""
    out = [(tip.id, s) for tip in TIPS for s in tip.settings]
    out += [("pack", s) for s in PACK_SETTINGS]
    paths = [s.path for _, s in out]
    dup = sorted({p for p in paths if paths.count(p) > 1})
    if dup:
        raise RuntimeError(f"speedups keys owned by more than one record: {dup}")
    return out


def _doc(title: str, settings: Iterable[tuple[str, Setting]], strip: str = "") -> str:
    lines = [title, "", "Attributes:"]
    for owner, s in settings:
        name = s.path.removeprefix(strip)
        lines.append(f"    {name}: {s.doc or owner}")
    return "\n".join(lines)


def _group(name: str, prefix: str, settings: list[tuple[str, Setting]]) -> type:
    cls = dataclasses.make_dataclass(
        name, [(s.path.removeprefix(prefix), s.type, s.dataclass_field()) for _, s in settings]
    )
    cls.__module__ = __name__
    cls.__doc__ = _doc(
        "Runtime monitors and checks, each owned by a tip (the doctor's checks with ``advisor``).", settings, prefix
    )
    return cls


def _generate() -> tuple[type, dict[str, type]]:
    top: list[tuple[str, Any, Any]] = []
    top_doc: list[tuple[str, Setting]] = []
    grouped: dict[str, list[tuple[str, Setting]]] = {}
    for owner, s in all_settings():
        if "." in s.path:
            grouped.setdefault(s.path.split(".", 1)[0], []).append((owner, s))
        else:
            top.append((s.path, s.type, s.dataclass_field()))
            top_doc.append((owner, s))
    groups: dict[str, type] = {}
    for group, settings in grouped.items():
        cls = _group(f"{group.title().replace('_', '')}Settings", f"{group}.", settings)
        groups[group] = cls
        # a group sits before the pack's ``summary`` key, where its first setting's tip put it
        top.insert(len(top) - 1, (group, cls, dataclasses.field(default_factory=cls)))
        top_doc.insert(
            len(top_doc) - 1,
            (group, Setting(group, cls, doc=f"{', '.join(sorted({o for o, _ in settings}))}: {group}.")),
        )
    cls = dataclasses.make_dataclass("Speedups", top, bases=(SpeedupsBase,))
    cls.__module__ = __name__
    cls.__doc__ = _doc(
        "Every tip of the pack as a keyed setting. Defaults are off: an empty section is plain Lightning.", top_doc
    )
    return cls, groups


class SpeedupsBase:
    """The methods of the generated :class:`Speedups` (they ask every record; no tip is named here)."""

    if TYPE_CHECKING:  # the fields are generated from the records at import time

        def __init__(self, **settings: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    def __post_init__(self) -> None:
        """Refuse a value out of the range its record declares, before any work (one line: key, value, fix)."""
        problems = [p for _, s in all_settings() for p in s.problems(self.setting_value(s.path))]
        if problems:
            raise SettingError("; ".join(problems))

    def setting_value(self, path: str) -> Any:
        """The value of a dotted key (``"monitors.sync_guard"``)."""
        node: Any = self
        for part in path.split("."):
            node = getattr(node, part)
        return node

    def active_parts(self) -> set[str]:
        """Names of the parts this section turns on (the setting paths that are on)."""
        return {s.path for _, s in all_settings() if s.path != "summary" and s.is_on(self.setting_value(s.path))}

    def trainer_kwargs(
        self,
        accelerator: Optional[str] = "auto",
        devices: Any = "auto",
        model: Any = None,
        lightning: Optional[str] = None,
    ) -> tuple[dict[str, Any], list[Note]]:
        """The Trainer arguments this section sets, and one ``(name, active, reason)`` note per decision.

        Args:
            accelerator: the accelerator the Trainer will use (decides ``auto`` settings).
            devices: the Trainer's ``devices``.
            model: the LightningModule to fit, when known: a setting Lightning refuses for it (gradient
                clipping under manual optimization) is skipped here with the reason and the fix. Without
                it such settings are left out and :meth:`callbacks` adds a part that decides in ``setup``.
            lightning: the Trainer's Lightning package (``"pytorch_lightning"`` for the older one) when no model is
                given; the model's package otherwise. A strategy is built on that package's classes.
        """
        ctx = self._build_context(accelerator, devices, model, lightning)
        return ctx.trainer_kwargs, ctx.notes

    def _build_context(
        self, accelerator: Optional[str], devices: Any, model: Any, lightning: Optional[str] = None
    ) -> BuildContext:
        ctx = BuildContext(accelerator=accelerator, devices=devices, model=model, lightning=lightning)
        for tip in TIPS:
            tip.trainer_kwargs(self, ctx)
        return ctx

    def callbacks(
        self, notes: Optional[list[Note]] = None, accelerator: Optional[str] = "auto", model: Any = None
    ) -> list[Callback]:
        """The callbacks this section turns on, in the order the records place them, the summary last.

        Args:
            notes: decisions made before the Trainer existed, shown in the start-up summary.
            accelerator: the Trainer's accelerator (decides ``compile.enabled: auto``).
            model: the LightningModule to fit, when known (as for :meth:`trainer_kwargs`).
        """
        ctx = BuildContext(accelerator=accelerator, notes=list(notes or []), model=model)
        placed: list[Placed] = []
        # Trainer arguments that waited for the model: set (or skipped with the fix) in setup, first
        for d in self._build_context(accelerator, "auto", model).deferred:
            placed.append((at("deferred_flags"), AutomaticOptimizationFlags(d.name, d.tip, d.kwargs, d.what, d.fix)))
        for tip in TIPS:
            placed.extend(tip.callbacks(self, ctx))
        if any(isinstance(cb, SpeedupCallback) and cb.uses_probe for _, cb in placed):
            # the auto settings that depend on the model are timed on it at the first batch
            placed.append((at("auto_probe"), AutoProbe()))
        if self.monitors.advisor:
            placed.append((at("advisor"), SpeedAdvisor()))
        # after every part: what changes the step is tried on the first batch and watched in the first steps
        chosen = self._build_context(accelerator, "auto", model).trainer_kwargs.get("precision")
        placed.append((at("safeguard"), Safeguard(precision=None if chosen is None else str(chosen))))
        if self.summary:
            placed.append((at("summary"), SpeedupsSummary(ctx.notes)))
        # a stable sort: parts at the same order keep the records' order
        return [cb for _, cb in sorted(placed, key=lambda pair: pair[0])]


if TYPE_CHECKING:
    Speedups = SpeedupsBase
    MonitorSettings = Any
    GROUPS: dict[str, type]
else:
    Speedups, GROUPS = _generate()
    MonitorSettings = GROUPS["monitors"]

__all__ = [
    "CheckpointingSettings",
    "ClipSettings",
    "CompileSettings",
    "DDPSettings",
    "DeviceNormalizeSettings",
    "LargestBatchSettings",
    "LoaderSettings",
    "MonitorSettings",
    "PACK_SETTINGS",
    "PrecisionSetting",
    "ScheduleSettings",
    "Speedups",
    "SpeedupsBase",
    "Toggle",
    "all_settings",
]
