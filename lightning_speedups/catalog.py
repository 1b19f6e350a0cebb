"""The ``tips`` command's table, written out from the registry so that it prints without importing it.

Importing the tip records imports every callback, and so torch and Lightning (several seconds); ``tips``
must answer at once. :data:`ROWS` is :func:`lightning_speedups.tips.catalog_rows` written out to ``catalog.json`` by
``python -m lightning_speedups.tips.generate``, which ``tests/test_registry.py`` runs in ``--check`` mode.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Optional

#: id, slug, title, the keys that turn it on, how bench times it (``catalog.json``, written by
#: ``python -m lightning_speedups.tips.generate`` from the records)
ROWS: tuple[tuple[str, str, str, str, str], ...] = tuple(
    (row[0], row[1], row[2], row[3], row[4])
    for row in json.loads(resources.files("lightning_speedups").joinpath("catalog.json").read_text(encoding="utf-8"))
)


def tip_lines(rows: tuple[tuple[str, str, str, str, str], ...] = ROWS, width: int = 80) -> list[str]:
    """The ``tips`` listing as lines of at most ``width`` characters: per tip its id, slug and title, then
    the keys that turn it on and how bench times it, each wrapped under it.

    Examples:
        >>> for line in tip_lines(ROWS[23:], width=60):
        ...     print(line)
        T24 channels-last: channels_last memory format for 4D/5D
            tensors
            on: speedups.channels_last
            bench: throughput: 1
    """
    import textwrap

    width = max(width, 40)
    out: list[str] = []
    for tip, slug, title, keys, bench in rows:
        out += textwrap.wrap(f"{tip} {slug}: {title}", width, subsequent_indent="    ")
        on = ", ".join(keys.split("\n"))
        out += textwrap.wrap(f"on: {on}", width, initial_indent="    ", subsequent_indent="        ")
        out += textwrap.wrap(f"bench: {bench}", width, initial_indent="    ", subsequent_indent="        ")
    return out


def print_rows(rows: tuple[tuple[str, str, str, str, str], ...] = ROWS, console: Optional[Any] = None) -> None:
    """Print the ``tips`` listing at the terminal's width (``COLUMNS``; 80 when unknown), one block per tip."""
    import shutil

    width = console.width if console is not None else shutil.get_terminal_size((80, 24)).columns
    text = "\n".join(["lightning_speedups: the tips (T01-T24)", "", *tip_lines(rows, width)])
    if console is not None:
        console.print(text, markup=False, highlight=False)
    else:
        print(text)


def print_tips(console: Optional[Any] = None) -> None:
    """The ``tips`` command."""
    print_rows(ROWS, console)
