"""Whose error it is: bad input from the user, or a bug in the pack.

Bad input (a setting out of range, an unknown name, a file that is not there) is raised as
:class:`SettingError` / :class:`SettingTypeError` (still a ``ValueError`` / ``TypeError`` for code that
catches those) or :class:`BadInput`: the command line prints its message on one line and exits 2. Any
other exception raised by the pack's own code is a bug: the command line shows the traceback with
:func:`bug_report` and exits 1, never 2.

Examples:
    >>> try:
    ...     raise SettingError("`speedups.precision` must be one of auto, 32-true, got 'fp7'.")
    ... except ValueError as err:
    ...     print(bad_input(err) is err)
    True
"""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Optional

__all__ = [
    "BadInput",
    "MissingFileError",
    "SettingError",
    "SettingTypeError",
    "UnknownNameError",
    "bad_input",
    "bug_report",
    "refuses_the_run",
]

#: Where to report a bug of the pack.
ISSUES = "the project's issue tracker"


class BadInput(Exception):
    """Input the user gave is wrong (a setting, an argument, a file): one line, exit 2."""


class SettingError(BadInput, ValueError):
    """A value the user gave is not allowed (the message names the setting and the fix)."""


class SettingTypeError(BadInput, TypeError):
    """A value the user gave has the wrong type (the message names the setting and the fix)."""


class MissingFileError(BadInput, FileNotFoundError):
    """A file or folder the user named, or data the user must install, is not there (the message says how to get it)."""


class UnknownNameError(BadInput, KeyError):
    """A name the user gave (a tip's id or slug) is not known (the message lists the known ones)."""

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0]) if self.args else ""


def refuses_the_run(err: BaseException) -> bool:
    """Whether ``err`` says the user's setup is wrong, so that a part raising it must stop the run rather than
    step aside: the pack's :class:`BadInput`, or Lightning's own ``MisconfigurationException`` (of either
    Lightning package; matched by name, this module imports no Lightning)."""
    return isinstance(err, BadInput) or any(c.__name__ == "MisconfigurationException" for c in type(err).__mro__)


def bad_input(err: BaseException) -> Optional[BadInput]:
    """The :class:`BadInput` behind ``err`` (itself, or what it was raised from / while handling), else ``None``."""
    seen: set[int] = set()
    cur: Optional[BaseException] = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, BadInput):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def bug_report(err: BaseException) -> str:
    """The lines printed above the traceback of an exception the pack's own code raised."""
    versions = ", ".join(
        f"{name} {_version(dist)}"
        for name, dist in (("lightning_speedups", "lightning_speedups"), ("torch", "torch"), ("lightning", "lightning"))
    )
    return (
        f"error: {type(err).__name__}: {err}\n"
        f"This is a bug in lightning_speedups, not in your input ({versions}, Python {platform.python_version()}).\n"
        f"Please report it on {ISSUES} with the command you ran and the traceback below."
    )
