"""What the pack says while a Trainer runs, through a logger of its own, and nothing done to Lightning's.

Lightning prints its start-up lines through one logger that its two packages share: every import of
``lightning.pytorch`` or ``pytorch_lightning`` repoints ``lightning_utilities``' rank-zero logger at its own
``<package>.utilities.rank_zero``. A library built on ``pytorch_lightning`` that silenced those lines
(``logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)``) would hear them again
the moment the pack imported ``lightning.pytorch``. So the pack imports Lightning under
:func:`keep_rank_zero_logger`, which puts the shared logger back, and speaks through its own logger,
``lightning_speedups`` (INFO, rank zero only; silence it with
``logging.getLogger("lightning_speedups").setLevel(logging.WARNING)``).

Examples:
    >>> import logging
    >>> logging.getLogger(LOGGER).name
    'lightning_speedups'
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

__all__ = ["LOGGER", "keep_rank_zero_logger", "say", "warn_once"]

#: the pack's logger: its start-up summary and the few lines a part says at the end of a fit
LOGGER = "lightning_speedups"


class _CurrentStderr(logging.Handler):
    """A handler that writes to whatever ``sys.stderr`` is when it emits (a test's capture, a notebook's)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # swallowed on purpose, as logging.StreamHandler does: a handler never raises
            self.handleError(record)


_log = logging.getLogger(LOGGER)
_log.setLevel(logging.INFO)
# Lightning's own convention: a handler of its own unless the application configured logging
if not logging.getLogger().hasHandlers():
    _log.addHandler(_CurrentStderr())
    _log.propagate = False


def _rank() -> int:
    from lightning_utilities.core.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def say(text: str) -> None:
    """Log ``text`` at INFO on the pack's logger, on global rank zero only."""
    if _rank() == 0:
        _log.info(text)


_WARNED: set[str] = set()


def warn_once(text: str) -> None:
    """Log ``text`` at WARNING on the pack's logger once per process, on rank zero."""
    if text not in _WARNED and _rank() == 0:
        _WARNED.add(text)
        _log.warning(text)


@contextlib.contextmanager
def keep_rank_zero_logger() -> Iterator[None]:
    """Whatever is imported inside leaves Lightning's shared rank-zero logger where it was (see the module)."""
    try:
        import lightning_utilities.core.rank_zero as shared
    except ImportError:  # pragma: no cover - Lightning always brings it
        yield
        return
    before = shared.log
    try:
        yield
    finally:
        # put back a Lightning package's logger; lightning_utilities' own (no Lightning imported before) is the one
        # Lightning's first import is meant to replace
        if before.name.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric"):
            shared.log = before
