"""The lint rules, one module per group: ``data`` (LS1xx), ``device`` (LS2xx), ``loop`` (LS3xx)."""

from __future__ import annotations

from lightning_speedups.lint.rules import data, device, loop
from lightning_speedups.lint.rules.base import Rule

#: Every rule, ordered by code.
RULES: tuple[Rule, ...] = tuple(sorted([*data.RULES, *device.RULES, *loop.RULES], key=lambda r: r.code))


def rules_for_tip(tip: str) -> list[Rule]:
    """The rules that serve tip ``tip`` (e.g. ``"T08"``), for the tip registry."""
    return [r for r in RULES if r.tip == tip]


__all__ = ["RULES", "Rule", "rules_for_tip"]
