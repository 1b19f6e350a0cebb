"""The rule record shared by every rule module, and the hit a rule yields."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Union

from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.graph import Project
from lightning_speedups.lint.runs import ON_ERROR, ONCE, PER_BATCH, PER_SAMPLE, Runs

WARNING = "warning"
INFO = "info"


class Hit(NamedTuple):
    """One hit of a rule: the node, the message, a fix for this finding (``None``: the rule's fix),
    how often the line (or the cost it sets up) runs, and the severity that follows from it."""

    node: ast.AST
    message: str
    fix: Optional[str] = None
    runs: str = PER_BATCH
    severity: str = WARNING
    #: source text that replaces the node's own (a mechanical fix: same dtype, device and values).
    replacement: Optional[str] = None


#: A rule's check yields :class:`Hit` (or a plain ``(node, message[, fix])``: a per-batch warning).
AnyHit = Union[Hit, tuple[ast.AST, str], tuple[ast.AST, str, Optional[str]]]
Check = Callable[[FileContext], Iterable[AnyHit]]


def severity_for(runs: Runs) -> Optional[str]:
    """``warning`` for a line that runs per batch or per sample, ``info`` for every N batches, per
    epoch or unknown, ``None`` (no finding) for a line that runs once or only on an error."""
    if runs.how in (PER_BATCH, PER_SAMPLE):
        return WARNING
    if runs.how in (ONCE, ON_ERROR):
        return None
    return INFO


def hit_at(node: ast.AST, message: str, runs: Runs, fix: Optional[str] = None) -> Optional[Hit]:
    """A :class:`Hit` whose severity follows from how often ``node`` runs (``None`` when it runs once)."""
    severity = severity_for(runs)
    if severity is None:
        return None
    return Hit(node, message, fix, runs.how, severity)


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
        gate: see the attribute.
        triggers: regular expressions that must all occur in the source text for the rule to fire
            at all (a necessary condition, checked before the file is parsed: a file that triggers
            no selected rule is not parsed).
    """

    code: str
    tip: str
    name: str
    summary: str
    fix: str
    check: Check = field(repr=False, compare=False)
    triggers: tuple[Union[str, Callable[[str], bool]], ...] = field(default=(), repr=False, compare=False)
    #: ``gate(project, path)``: the rule can fire in this file of the project at all (checked after
    #: the triggers, before the file's context is built; LS206 needs a function a training step reaches).
    gate: Optional[Callable[[Project, str], bool]] = field(default=None, repr=False, compare=False)

    def triggered(self, source: str) -> bool:
        return all(_matcher(t)(source) for t in self.triggers)


_MATCHERS: dict[str, Callable[[str], object]] = {}
_PLAIN = re.compile(r"[\w|]+")


def _matcher(trigger: Union[str, Callable[[str], bool]]) -> Callable[[str], object]:
    """A trigger is a callable, ``"a|b"`` (plain words: substring tests, the fastest) or a regex.

    The matcher's result is used for its truth (a regex's ``search`` returns a match or ``None``).
    """
    if callable(trigger):
        return trigger
    m = _MATCHERS.get(trigger)
    if m is None:
        if _PLAIN.fullmatch(trigger):
            words = tuple(trigger.split("|"))
            m = lambda source: any(w in source for w in words)  # noqa: E731
        else:
            m = re.compile(trigger).search
        _MATCHERS[trigger] = m
    return m
