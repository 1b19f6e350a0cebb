"""The rule record shared by every rule module."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Tuple, Union

from lightning_speedups.lint.context import FileContext

#: A rule's check yields ``(node, message)`` or ``(node, message, fix)`` (a fix for this one finding).
Hit = Union[Tuple[ast.AST, str], Tuple[ast.AST, str, Optional[str]]]
Check = Callable[[FileContext], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    """One lint rule.

    Attributes:
        code: the rule code, e.g. ``"LS201"`` (``LS1xx`` data, ``LS2xx`` device/sync, ``LS3xx`` loop).
        tip: the tip id of the registry, e.g. ``"T08"``.
        name: a short slug, e.g. ``"sync-in-step"``.
        summary: what it finds, one line (for docs and ``--list-rules``).
        fix: the default fix shown with every finding.
        check: ``check(ctx)`` yields the hits in one file.
    """

    code: str
    tip: str
    name: str
    summary: str
    fix: str
    check: Check = field(repr=False, compare=False)
