"""The per-file basics every analysis reads: one walk of the tree (:func:`index_nodes`: parent links and the
node lists), the lines a node spans (:func:`nodes_within`), and :class:`FileBasics`, the protocol that names
what an analysis may ask of its file.

:class:`~lightning_speedups.lint.context.FileContext` holds the basics and the analyses built on them
(``ctx.scopes``, ``ctx.classify``, ``ctx.facts``, ``ctx.loops``, ``ctx.where``, ``ctx.purpose``); each analysis
is given the :class:`FileBasics` of its file and the analyses it builds on, so no module of an analysis imports
the context (which imports them all).
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Optional, Protocol, TypeVar, Union, cast

from lightning_speedups.lint.astutil import _CHILD_FIELDS, _child_fields
from lightning_speedups.lint.runs import FuncDef

T = TypeVar("T")
#: what :func:`nodes_within` bisects: statements or expressions (they have line numbers)
N = TypeVar("N", bound=Union[ast.stmt, ast.expr])

_AST = ast.AST
_BRANCH_TYPES = frozenset({ast.If, ast.While, ast.IfExp, ast.Assert})
#: The nodes whose ``test`` decides a branch (:attr:`NodeLists.branches`).
Branch = Union[ast.If, ast.While, ast.IfExp, ast.Assert]
_Call, _Assign, _ClassDef, _Import, _ImportFrom, _Constant = (
    ast.Call,
    ast.Assign,
    ast.ClassDef,
    ast.Import,
    ast.ImportFrom,
    ast.Constant,
)


@dataclass
class NodeLists:
    """What one walk of a file's tree finds: the parent of every node, and the nodes the rules look at."""

    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    calls: list[ast.Call] = field(default_factory=list)
    assigns: list[ast.Assign] = field(default_factory=list)
    classes: list[ast.ClassDef] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    #: if / while / x if c else y / assert: their tests decide a branch
    branches: list[Branch] = field(default_factory=list)
    #: ``import`` and ``from ... import`` statements, at any depth
    imports: list[ast.AST] = field(default_factory=list)


def index_nodes(tree: ast.Module) -> NodeLists:
    """One pass over ``tree``: parent links and the node lists (calls, assignments and classes in source order)."""
    found = NodeLists()
    parents = found.parents
    calls, assigns, classes, strings = found.calls, found.assigns, found.classes, found.strings
    branches, imports = found.branches, found.imports
    stack: list[ast.AST] = [tree]
    pop, push = stack.pop, stack.append
    fields_of = _CHILD_FIELDS
    while stack:
        node = pop()
        cls = type(node)
        fields = fields_of.get(cls) or _child_fields(cls)
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if type(value) is list:
                for item in value:
                    if isinstance(item, _AST):
                        parents[item] = node
                        push(item)
            elif isinstance(value, _AST):
                parents[value] = node
                push(value)
        # dispatched on the exact class (faster than isinstance chains): the casts say what `cls` showed
        if cls is _Call:
            calls.append(cast(ast.Call, node))
        elif cls is _Constant:
            value = cast(ast.Constant, node).value
            if type(value) is str:
                strings.append(value)
        elif cls is _Assign:
            assigns.append(cast(ast.Assign, node))
        elif cls is _ClassDef:
            classes.append(cast(ast.ClassDef, node))
        elif cls is _Import or cls is _ImportFrom:
            imports.append(node)
        elif cls in _BRANCH_TYPES:
            branches.append(cast(Branch, node))
    # source order (the walk is depth-first, right to left)
    calls.reverse()
    assigns.reverse()
    classes.reverse()
    return found


class Memo(Protocol):
    """An owner of per-file memos (:meth:`FileBasics.memo`)."""

    def memo(self, key: str, make: Callable[[], T]) -> T: ...


def nodes_within(owner: Memo, key: str, nodes: Sequence[N], node: ast.AST) -> list[N]:
    """The ``nodes`` on the lines of ``node`` (from its first line to its last; all of them for a module), by a
    bisection of ``nodes`` sorted by line, the sorted index kept in ``owner``'s memo under ``key``: what
    ``ast.walk(node)`` would find of them, without walking."""

    def build() -> tuple[list[int], list[N]]:
        ordered = sorted(nodes, key=lambda n: n.lineno)
        return [n.lineno for n in ordered], ordered

    lines, ordered = owner.memo(key, build)
    if not hasattr(node, "lineno"):  # the module: all of them
        return list(ordered)
    lo = bisect.bisect_left(lines, node.lineno)
    hi = bisect.bisect_right(lines, getattr(node, "end_lineno", None) or node.lineno)
    return ordered[lo:hi]


class FileBasics(Memo, Protocol):
    """What an analysis reads of its file: the tree and its node lists, imported names, tree navigation and
    the per-file memo. :class:`~lightning_speedups.lint.context.FileContext` provides it."""

    tree: ast.Module
    path: PurePath
    source: str
    parents: dict[ast.AST, ast.AST]
    calls: list[ast.Call]
    assigns: list[ast.Assign]
    classes: list[ast.ClassDef]
    strings: list[str]

    def qualname(self, node: Optional[ast.AST]) -> Optional[str]: ...

    def call_name(self, call: ast.Call) -> Optional[str]: ...

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]: ...

    def scope_of(self, node: ast.AST) -> ast.AST: ...

    def enclosing_function(self, node: ast.AST) -> Optional[FuncDef]: ...

    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]: ...

    def calls_within(self, node: ast.AST) -> list[ast.Call]: ...

    def assigns_within(self, node: ast.AST) -> list[ast.Assign]: ...
