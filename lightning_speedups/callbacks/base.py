"""Common base for the pack's callbacks: one status line per part, reported once.

Every callback of the pack records whether it applied and why (``"active"`` or ``"skipped"`` with a
one-line reason). The :class:`~lightning_speedups.callbacks.summary.SpeedupsSummary` callback prints
these lines when training starts, so a user sees at a glance what is on, what was skipped and why.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from lightning_speedups.errors import refuses_the_run
from lightning_speedups.functional.failures import error_phrase
from lightning_speedups.messages import say, warn_once
from lightning_speedups.trainer.namespace import MixedLightningError, mixed_namespace_error

if TYPE_CHECKING:  # pragma: no cover - types only
    from lightning_speedups.functional.probe import Axis


def on_cuda(trainer) -> bool:
    """Whether the trainer runs on a CUDA device (where cuDNN, syncs and pinned copies matter)."""
    device = getattr(trainer.strategy, "root_device", None)
    return device is not None and device.type == "cuda" and torch.cuda.is_available()


def probe_pending(trainer: Any) -> bool:
    """Whether a start-up probe (:class:`~lightning_speedups.callbacks.AutoProbe`) in the trainer's callbacks has
    yet to run in this fit: an ``auto`` part leaves its decision to it, and the summary waits for it."""
    return any(getattr(cb, "awaits_probe", False) for cb in getattr(trainer, "callbacks", ()))


def summary_pending(trainer: Any) -> bool:
    """Whether a part decides at the first batch (the start-up probe, the Safeguard's trial): the summary waits."""
    return any(getattr(cb, "delays_summary", False) for cb in getattr(trainer, "callbacks", ()))


#: the callback hooks a part's own failure is caught in: the part steps aside and the fit goes on. The checkpoint
#: hooks are not among them (a checkpoint that cannot be read or written is the user's to know), nor on_exception.
GUARDED_HOOKS = frozenset(
    name
    for name in vars(Callback)
    if (name.startswith("on_") or name in ("setup", "teardown"))
    and name not in ("on_exception", "on_save_checkpoint", "on_load_checkpoint")
)
#: set to show the traceback of a part that steps aside (and stop there instead)
TRACEBACK_ENV = "LIGHTNING_SPEEDUPS_TRACEBACK"


def wants_traceback() -> bool:
    """Whether the user asked for a part's error as a traceback instead of the part stepping aside."""
    return bool(os.environ.get(TRACEBACK_ENV))


_GUARD = "__speedups_guard__"
_log = logging.getLogger("lightning_speedups")


def _guarded(name: str, hook: Callable[..., Any], timed: bool = True) -> Callable[..., Any]:
    """``hook`` of a part, such that an exception of its own turns the part off for the run instead of ending the
    fit. Bad input (:func:`~lightning_speedups.errors.refuses_the_run`: the pack's ``BadInput``, Lightning's
    ``MisconfigurationException``) still stops the run: it is the user's to fix. With ``timed`` the hook's seconds
    are added to the part's :attr:`~SpeedupCallback.hook_seconds`."""

    @functools.wraps(hook)
    def guarded(self: SpeedupCallback, *args: Any, **kwargs: Any) -> Any:
        if self._aside is not None and name != "teardown":
            return None
        if (name == "setup" or self._quiet is None) and args and hasattr(args[0], "callbacks"):
            self._quiet = any(type(cb).__name__ == "SpeedupsSummary" for cb in getattr(args[0], "callbacks", ()) or ())
        start = time.perf_counter() if timed else 0.0
        try:
            return hook(self, *args, **kwargs)
        except Exception as err:
            if refuses_the_run(err) or wants_traceback():
                raise
            trainer = args[0] if args else None
            pl_module = args[1] if len(args) > 1 else None
            self.step_aside(trainer, pl_module, f"{error_phrase(err)} (in its {name})", error=err)
            return None
        finally:  # the part's own time, which the summary adds up (what the pack cost the run)
            if timed:
                vars(self)["hook_seconds"] = vars(self).get("hook_seconds", 0.0) + time.perf_counter() - start

    vars(guarded)[_GUARD] = True
    return guarded


class SpeedupCallback(Callback):
    """Base class of the pack's callbacks.

    Subclasses set ``tip`` (the registry id, e.g. ``"T24"``) and ``part`` (a short name shown in the
    start-up summary, e.g. ``"channels_last"``) and call :meth:`report` once they know whether they
    apply. ``report`` is idempotent per (state, reason): the same line is never logged twice.

    A part never ends a fit that plain Lightning would complete: every hook a subclass defines
    (:data:`GUARDED_HOOKS`) runs guarded, and an exception of the part's own (anything but bad input) makes it
    :meth:`step_aside`: what it changed is taken off (:meth:`suspend`), its line in the summary says why, and
    its later hooks do nothing. A part that changes what a training step computes says so
    (:attr:`changes_step`), and the :class:`~lightning_speedups.callbacks.safeguard.Safeguard` watches the first
    steps for it.
    """

    # set by each subclass on the class; not ClassVars: AutomaticOptimizationFlags sets its own per instance
    tip: str = ""
    part: str = ""
    #: hooks whose seconds are not added to :attr:`hook_seconds`: per-step hooks of a part that times its own
    #: cost otherwise (two clock reads per call are a few percent of a tiny model's CPU step)
    untimed_hooks: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in GUARDED_HOOKS:
            hook = cls.__dict__.get(name)
            if callable(hook) and not vars(hook).get(_GUARD, False):
                setattr(cls, name, _guarded(name, hook, timed=name not in cls.untimed_hooks))

    def __init__(self) -> None:
        super().__init__()
        self._status: Optional[tuple[str, str]] = None
        self._printed: set[tuple[str, str]] = set()
        self._aside: Optional[str] = None
        #: seconds this part's hooks took so far (timed by the guard around each hook)
        self.hook_seconds = 0.0
        self._quiet: Optional[bool] = None  # whether a start-up summary in the Trainer says what the part says
        #: lines said with :meth:`tell` while a start-up summary waits to print them under this part's line
        self.told: list[str] = []
        #: lines told after the summary printed: the summary's closing block at the end of the fit says them
        self.told_late: list[str] = []
        self._summarized = False

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
    def shown_in_summary(self) -> bool:
        """Whether the start-up summary has a line for this part (every part's, but the Safeguard's when it had
        nothing to try)."""
        return True

    @property
    def delays_summary(self) -> bool:
        """Whether the start-up summary waits for this part's decision at the first batch."""
        return self.awaits_probe

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

    @property
    def changes_step(self) -> bool:
        """Whether this part, as it stands, changes what a training step computes (the model's layers or layout,
        the precision, the optimizer's kernels): the :class:`~lightning_speedups.callbacks.safeguard.Safeguard`
        watches the first steps after such a change and can take it off again (:meth:`suspend`)."""
        return False

    @property
    def needs_trial(self) -> bool:
        """Whether this part's change is tried on the first batch before the run takes it (a precision, which an op
        may have no kernel for; checkpointing, which a block that changes its inputs breaks): the
        :class:`~lightning_speedups.callbacks.safeguard.Safeguard` takes one forward and backward pass of the real
        model on the real batch, with nothing kept, and takes the part off when it fails there."""
        return False

    def trial_watch(self, trainer: Any, pl_module: Any) -> contextlib.AbstractContextManager[Any]:
        """A context the Safeguard's trial step runs in, for the part to watch its own change (none by default)."""
        return contextlib.nullcontext()

    def after_trial(self, trainer: Any, pl_module: Any, error: Optional[BaseException]) -> bool:
        """What the part makes of the trial step (``error``: what it raised, if anything); ``True`` when the part
        changed itself after what it saw (the trial is then taken again)."""
        return False

    def suspend(self, trainer: Any, pl_module: Any) -> Callable[[], None]:
        """Take this part's change off the model for a moment; returns the function that puts it back.

        The :class:`~lightning_speedups.callbacks.safeguard.Safeguard` calls it to find which part makes a step
        fail, and :meth:`step_aside` to take the change off for good. Nothing to take off by default."""
        return no_op

    @property
    def stepped_aside(self) -> bool:
        """Whether this part was turned off for the run after it failed (:meth:`step_aside`)."""
        return self._aside is not None

    def step_aside(self, trainer: Any, pl_module: Any, why: str, error: Optional[BaseException] = None) -> None:
        """Turn this part off for the rest of the run: take its change off (:meth:`suspend`, never put back), put
        back what it set globally (its ``teardown``), and say why in its summary line. Its later hooks do nothing.

        Args:
            why: what failed, in a phrase (``"RuntimeError: ... (in its setup)"``).
            error: the exception, logged with its traceback at DEBUG on the ``lightning_speedups`` logger.
        """
        if self.stepped_aside:
            return
        self._aside = why
        if error is not None:
            _log.debug("%s stepped aside: %s", self.part, why, exc_info=error)
        for undo in (self.suspend, self.teardown):
            try:
                if trainer is not None:
                    undo(trainer, pl_module, *(("fit",) if undo == self.teardown else ()))
            except Exception as err:  # swallowed on purpose: the part is off either way; say it in the line
                why = f"{why}; undoing it raised {error_phrase(err)}"
        self._status = ("skipped", f"stepped aside: {why}; the run goes on without it{self.aside_advice}")
        if self._summarized:  # the start-up summary has printed this part's line already: say it now, once
            tip = f" ({self.tip})" if self.tip else ""
            warn_once(f"lightning_speedups: {self.part}{tip} {self._status[1]}")

    @property
    def aside_advice(self) -> str:
        """What the summary line of a part that stepped aside tells the user to do (after a ``;``)."""
        return f" (set {TRACEBACK_ENV}=1 for the traceback, and please report it)"

    def report(self, active: bool, reason: str, *, echo: bool = False) -> None:
        """Record whether this part applies, with a one-line reason.

        Args:
            active: ``True`` when the part changed something, ``False`` when it skipped.
            reason: one short line: what it did, or why it did nothing.
            echo: also print the line now (rank zero only), once, when no start-up summary is in the Trainer
                to say it.
        """
        if self.stepped_aside:
            return
        self._status = ("active" if active else "skipped", reason)
        if echo and not self._quiet and self._status not in self._printed:
            self._printed.add(self._status)
            word = "" if reason.startswith(("skipped", "active")) else f"{self._status[0]}, "
            say(f"{self.part}: {word}{reason}")

    def tell(self, message: str) -> None:
        """Say an informational line beyond the part's status line (what it chose, what it measured).

        With a start-up summary in the Trainer (the presets' runs), the line goes under the part's own line in that
        block, or, once the block has printed, into the summary's closing block at the end of the fit: a run says
        what it does in the pack's own blocks. A part added by hand, with no summary, says it through Lightning's ``rank_zero_info`` as it runs.
        Warnings are not told: they stay Python warnings (``rank_zero_warn``), which a user can filter.
        """
        if not self._quiet:
            rank_zero_info(f"{self.part}: {message}")
        elif message not in self.told and message not in self.told_late:
            (self.told_late if self._summarized else self.told).append(message)


def no_op() -> None:
    """Nothing to put back (what :meth:`SpeedupCallback.suspend` returns for a part with nothing to take off)."""
    return None


def refuse_mixed_namespaces(trainer: Any) -> None:
    """Raise :class:`~lightning_speedups.trainer.namespace.MixedLightningError` (one line, with the fix) when
    ``trainer`` holds a Lightning object of the other package (the pack's own callbacks, which work in either, are
    never named)."""
    mixed = mixed_namespace_error(trainer, SpeedupCallback)
    if mixed:
        raise MixedLightningError(f"lightning_speedups: {mixed}")
