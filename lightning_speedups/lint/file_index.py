"""What the project of a ``lint`` run works out once per file, from its text or its context: the file's imports,
its plain assignments and its calls by name, whether its text calls a name, whether it is a test file."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from typing import Optional, Protocol, TypeVar

from lightning_speedups.lint.astutil import terminal_name

T = TypeVar("T")


class FileNodes(Protocol):
    """The node lists of a file that the indexes read (a :class:`~lightning_speedups.lint.context.FileContext`)."""

    @property
    def calls(self) -> list[ast.Call]: ...

    @property
    def import_nodes(self) -> list[ast.AST]: ...

    @property
    def assigns(self) -> list[ast.Assign]: ...

    def memo(self, key: str, make: Callable[[], T]) -> T: ...


def norm_path(path: str) -> str:
    return os.path.normpath(path).replace(os.sep, "/")


def text_calls(source: str, name: str) -> bool:
    """``source`` holds ``name`` as a whole identifier followed by ``(`` (spaces and line breaks allowed
    between): plain ``str.find`` steps, cheaper than a regular expression that must check the character
    before every candidate."""
    end = len(source)
    size = len(name)
    i = source.find(name)
    while i != -1:
        before = source[i - 1] if i else " "
        if not (before.isalnum() or before == "_"):
            j = i + size
            while j < end and source[j] in " \t\r\n\\":
                j += 1
            if j < end and source[j] == "(":
                return True
        i = source.find(name, i + size)
    return False


def is_test_path(path: str) -> bool:
    """A test file (``test_*.py``, ``*_test.py``, ``conftest.py``, or under a ``tests`` / ``test`` folder)."""
    parts = norm_path(path).lower().split("/")
    name = parts[-1]
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return True
    return any(p in ("tests", "test") for p in parts[:-1])


def calls_named(ctx: FileNodes) -> dict[str, list[ast.Call]]:
    """The file's calls by the name they call (``terminal_name``), worked out once."""

    def index() -> dict[str, list[ast.Call]]:
        named: dict[str, list[ast.Call]] = {}
        for call in ctx.calls:
            name = terminal_name(call.func)
            if name:
                named.setdefault(name, []).append(call)
        return named

    return ctx.memo("calls_named", index)


def import_table(ctx: FileNodes) -> dict[str, tuple[str, Optional[str], int]]:
    """``{local name: (module, attribute or None, level)}`` of the file's imports (any depth)."""
    table: dict[str, tuple[str, Optional[str], int]] = {}
    for node in ctx.import_nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    table[a.asname] = (a.name, None, 0)
                else:
                    top = a.name.split(".")[0]
                    table.setdefault(top, (top, None, 0))
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    table[a.asname or a.name] = (node.module or "", a.name, node.level)
    return table


def assign_index(ctx: FileNodes) -> dict[str, list[ast.Assign]]:
    """The file's plain ``name = value`` assignments, by name."""
    index: dict[str, list[ast.Assign]] = {}
    for node in ctx.assigns:
        for target in node.targets:
            if isinstance(target, ast.Name):
                index.setdefault(target.id, []).append(node)
    return index
