"""A setup the pack refuses as Lightning refuses one: Lightning's own ``MisconfigurationException`` (code that
catches Lightning's refusals catches it) and the pack's :class:`~lightning_speedups.errors.BadInput` (the command
line prints it on one line and exits 2, never as a bug of the pack)."""

from __future__ import annotations

from lightning.fabric.utilities.exceptions import MisconfigurationException

from lightning_speedups.errors import BadInput

__all__ = ["SetupRefused"]


class SetupRefused(BadInput, MisconfigurationException):
    """The user's setup cannot run with a part as given (the message names the part and the fix)."""
