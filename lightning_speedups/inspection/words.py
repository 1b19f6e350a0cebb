"""Small formatting helpers that turn facts into the words of a finding.

Shared by every tip's doctor check (and the report): sizes in binary units, short lists of module
names, counted class names, plurals, and the few lookups on :class:`~lightning_speedups.inspection.facts.Facts`
that many checks repeat.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from lightning_speedups.functional.memory import format_bytes
from lightning_speedups.functional.syncs import short_path

if TYPE_CHECKING:
    from lightning_speedups.inspection.facts import Facts

__all__ = [
    "counted",
    "device_words",
    "fmt_bytes",
    "has_callback",
    "loader_label",
    "missing_reason",
    "names_text",
    "plural",
    "short_path",
]


def fmt_bytes(n: float | None) -> str:
    """``n`` bytes in binary units (``"1.5 MiB"``); ``"?"`` when unknown."""
    return "?" if n is None else format_bytes(n)


def names_text(names: list[str], limit: int = 4) -> str:
    """The first ``limit`` module names (``""`` shown as ``<root>``) and how many more."""
    shown = ", ".join(n or "<root>" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def counted(types: list[str]) -> str:
    """``["Conv2d", "Conv2d", "Linear"]`` -> ``"2 Conv2d, 1 Linear"`` (most common first)."""
    return ", ".join(f"{n} {t}" for t, n in Counter(types).most_common())


def plural(n: int, word: str, plural: str | None = None) -> str:
    """``"1 step"``, ``"3 steps"`` (``plural`` for irregular words)."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def missing_reason(facts: Facts, key: str) -> str | None:
    """Why the fact ``key`` could not be read (``None`` when it was)."""
    return facts.unavailable.get(key)


def device_words(facts: Facts) -> str:
    """The device's name on CUDA (``"NVIDIA H100"``), its type otherwise (``"cpu"``)."""
    return facts.device_name if facts.on_cuda else facts.device_type


def has_callback(facts: Facts, *names: str) -> Any:
    """The first trainer callback whose class name is one of ``names`` (``None`` when none is)."""
    for name in names:
        cb = facts.callback_of(name)
        if cb is not None:
            return cb
    return None


def loader_label(i: int, n: int) -> str:
    """``"train loader"`` when there is one, ``"train loader {i}"`` among ``n``."""
    return "train loader" if n == 1 else f"train loader {i}"
