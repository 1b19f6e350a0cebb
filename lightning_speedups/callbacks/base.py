"""Common base for the pack's callbacks: one status line per part, reported once.

Every callback of the pack records whether it applied and why (``"active"`` or ``"skipped"`` with a
one-line reason). The :class:`~lightning_speedups.callbacks.summary.SpeedupsSummary` callback prints
these lines when training starts, so a user sees at a glance what is on, what was skipped and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, Union, cast

import torch
from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

if TYPE_CHECKING:  # pragma: no cover - types only
    from lightning_speedups.functional.probe import Axis


class TrainerSetAtInit(Protocol):
    """The attributes Lightning's connectors set on every ``Trainer`` in its ``__init__``, which the class
    does not declare (so the type checker does not know them)."""

    #: CallbackConnector
    callbacks: list[Callback]
    #: DataConnector (``None`` until a fit / validate / test / predict is given one)
    datamodule: Optional[LightningDataModule]
    #: Trainer._init_debugging_flags
    fast_dev_run: Union[int, bool]
    #: LoggerConnector
    log_every_n_steps: int


def set_at_init(trainer: Trainer) -> TrainerSetAtInit:
    """``trainer`` typed with the attributes Lightning sets on it at init (:class:`TrainerSetAtInit`)."""
    return cast(TrainerSetAtInit, trainer)  # every constructed Trainer has them


def on_cuda(trainer) -> bool:
    """Whether the trainer runs on a CUDA device (where cuDNN, syncs and pinned copies matter)."""
    device = getattr(trainer.strategy, "root_device", None)
    return device is not None and device.type == "cuda" and torch.cuda.is_available()


def probe_pending(trainer: Any) -> bool:
    """Whether a start-up probe (:class:`~lightning_speedups.callbacks.AutoProbe`) in the trainer's callbacks has
    yet to run in this fit: an ``auto`` part leaves its decision to it, and the summary waits for it."""
    return any(getattr(cb, "awaits_probe", False) for cb in getattr(trainer, "callbacks", ()))


class SpeedupCallback(Callback):
    """Base class of the pack's callbacks.

    Subclasses set ``tip`` (the registry id, e.g. ``"T24"``) and ``part`` (a short name shown in the
    start-up summary, e.g. ``"channels_last"``) and call :meth:`report` once they know whether they
    apply. ``report`` is idempotent per (state, reason): the same line is never logged twice.
    """

    # set by each subclass on the class; not ClassVars: AutomaticOptimizationFlags sets its own per instance
    tip: str = ""
    part: str = ""

    def __init__(self) -> None:
        super().__init__()
        self._status: Optional[tuple[str, str]] = None
        self._printed: set[tuple[str, str]] = set()

    @property
    def status(self) -> Optional[tuple[str, str]]:
        """``("active" | "skipped", reason)`` once the part has decided, else ``None``."""
        return self._status

    @property
    def awaits_probe(self) -> bool:
        """Whether the start-up probe (:class:`~lightning_speedups.callbacks.AutoProbe`) has yet to run in this
        fit: parts with an ``auto`` setting leave their decision to it, and the summary waits for it."""
        return False

    @property
    def uses_probe(self) -> bool:
        """Whether this part leaves an ``auto`` decision to the start-up probe (the presets add one for it)."""
        return False

    def probe_axes(self, trainer: Any, pl_module: Any) -> list[Axis]:
        """The ``auto`` decisions this part leaves to the start-up probe, as candidates to time (none by default)."""
        return []

    @property
    def active(self) -> bool:
        return self._status is not None and self._status[0] == "active"

    def report(self, active: bool, reason: str, *, echo: bool = False) -> None:
        """Record whether this part applies, with a one-line reason.

        Args:
            active: ``True`` when the part changed something, ``False`` when it skipped.
            reason: one short line: what it did, or why it did nothing.
            echo: also print the line now (rank zero only), once.
        """
        self._status = ("active" if active else "skipped", reason)
        if echo and self._status not in self._printed:
            self._printed.add(self._status)
            word = "" if reason.startswith(("skipped", "active")) else f"{self._status[0]}, "
            rank_zero_info(f"{self.part}: {word}{reason}")
