"""One parsed file as the rules see it: :class:`FileContext` holds the per-file basics (the tree, its node lists,
the imported names, tree navigation, a memo) and the analyses built on them, one object each:

- ``ctx.scopes`` (:class:`~lightning_speedups.lint.scopes.Scopes`): the bindings of names in each scope;
- ``ctx.classify`` (:class:`~lightning_speedups.lint.classify.Classifier`): is an expression visibly a numpy
  array, a tensor, a module, a device;
- ``ctx.facts`` (:class:`~lightning_speedups.lint.facts.Facts`): what the file shows as a whole (it runs on a
  GPU, it never leaves the CPU, it asks for determinism);
- ``ctx.loops`` (:class:`~lightning_speedups.lint.loops.Loops`): its functions, step functions and loops;
- ``ctx.where`` (:class:`~lightning_speedups.lint.where.Where`): how often a line runs;
- ``ctx.purpose`` (:class:`~lightning_speedups.lint.purpose.Purpose`): test, debugging or inference code.

Each analysis is given the basics (:class:`~lightning_speedups.lint.basics.FileBasics`) and the analyses it
builds on; what it asks about other files goes through :class:`ProjectLink`. Everything is plain :mod:`ast`
(no torch import, no execution). The classifiers answer "is this expression *visibly* a numpy array / a
tensor / a device?" and return ``False`` whenever they cannot tell: a rule built on them reports nothing
rather than guess.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from pathlib import PurePath
from typing import Any, Optional, TypeVar, Union, cast

from lightning_speedups.lint.astutil import _CANONICAL, DEF_TYPES, SCOPE_TYPES, TRAINER
from lightning_speedups.lint.basics import Branch, index_nodes, nodes_within
from lightning_speedups.lint.classify import Classifier
from lightning_speedups.lint.facts import Facts
from lightning_speedups.lint.graph import Project
from lightning_speedups.lint.loops import Loops
from lightning_speedups.lint.purpose import Purpose
from lightning_speedups.lint.runs import FuncDef
from lightning_speedups.lint.scopes import Scopes
from lightning_speedups.lint.where import Where

T = TypeVar("T")


class FileContext:
    """One parsed file and the facts rules share about it (each computed once, when first asked)."""

    def __init__(
        self,
        tree: ast.Module,
        path: Union[str, os.PathLike[str]] = "<string>",
        source: str = "",
        project: Optional[Project[FileContext]] = None,
    ) -> None:
        #: what rules and the project worked out about this file once, by name (:meth:`memo`)
        self.memos: dict[str, Any] = {}
        self.tree = tree
        self.path = PurePath(path)
        self.source = source
        nodes = index_nodes(tree)
        self.parents: dict[ast.AST, ast.AST] = nodes.parents
        self.calls: list[ast.Call] = nodes.calls
        self.assigns: list[ast.Assign] = nodes.assigns
        self.classes: list[ast.ClassDef] = nodes.classes
        self.strings: list[str] = nodes.strings
        self.branches: list[Branch] = nodes.branches  # if / while / x if c else y / assert: their tests
        self.import_nodes: list[ast.AST] = nodes.imports
        self.aliases: dict[str, str] = {}
        self._ambiguous: set[str] = set()
        self._read_imports()
        #: the :class:`~lightning_speedups.lint.graph.Project` of the run (callers in other files).
        self.project = project
        link = ProjectLink(self)
        self.scopes = Scopes(self)
        self.classify = Classifier(self, self.scopes)
        self.facts = Facts(self, self.classify)
        self.loops = Loops(self)
        self.where = Where(self, self.scopes, self.loops, self.facts, link)
        self.purpose = Purpose(self, link)

    # ------------------------------------------------------------------ memo
    def memo(self, key: str, make: Callable[[], T]) -> T:
        """What ``make()`` returns, worked out once per file under ``key`` (a rule's or the project's cache: a
        mapping it fills, an index it builds)."""
        if key not in self.memos:
            self.memos[key] = make()
        return cast(T, self.memos[key])

    def release(self) -> None:
        """Drop everything worked out about the file, its analyses and its link to the project (the project's
        ``close``, once the run is over). The analyses point back at the file: left alone, that reference cycle
        would keep the file's tree alive until the garbage collector walks every ast node of the run."""
        self.memos.clear()
        self.project = None
        del self.scopes, self.classify, self.facts, self.loops, self.where, self.purpose

    # ------------------------------------------------------------------ names
    def _read_imports(self) -> None:
        """The names the file's imports bind (:attr:`aliases`); a name imported as two things is dropped."""
        for node in self.import_nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._alias(alias.asname, alias.name)
                    else:
                        top = alias.name.split(".")[0]
                        self._alias(top, top)
            else:
                assert isinstance(node, ast.ImportFrom)
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    if node.level or not node.module:  # relative import: a local name we cannot resolve
                        self._alias(alias.asname or alias.name, None)
                    else:
                        self._alias(alias.asname or alias.name, f"{node.module}.{alias.name}")
        for name in self._ambiguous:
            self.aliases.pop(name, None)

    def _alias(self, name: str, target: Optional[str]) -> None:
        """Record an import; a name imported as two different things is dropped (cannot tell)."""
        if target is None or self.aliases.get(name, target) != target:
            self._ambiguous.add(name)
        else:
            self.aliases[name] = target

    def imports_name(self, name: str) -> bool:
        """``name`` is bound by an import somewhere in the file (resolvable or not)."""
        return name in self.aliases or name in self._ambiguous

    def qualname(self, node: Optional[ast.AST]) -> Optional[str]:
        """Dotted name of an imported object (``th.zeros`` -> ``torch.zeros``), else ``None``."""
        if isinstance(node, ast.Name):
            name = self.aliases.get(node.id)
        elif isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            name = f"{base}.{node.attr}" if base else None
        else:
            return None
        return _CANONICAL.get(name, name) if name else None

    def call_name(self, call: ast.Call) -> Optional[str]:
        return self.qualname(call.func)

    def is_trainer(self, call: ast.Call) -> bool:
        return self.call_name(call) == TRAINER

    # ------------------------------------------------------------------ tree navigation
    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        """Yield ``(ancestor, child_on_the_way)`` pairs from the innermost outwards."""
        child = node
        parent = self.parents.get(node)
        while parent is not None:
            yield parent, child
            child, parent = parent, self.parents.get(parent)

    def scope_of(self, node: ast.AST) -> ast.AST:
        for anc, _ in self.ancestors(node):
            if isinstance(anc, SCOPE_TYPES):
                return anc
        return self.tree

    def enclosing_function(self, node: ast.AST) -> Optional[FuncDef]:
        """The innermost ``def`` around ``node`` (``None`` at module level)."""
        for anc, _ in self.ancestors(node):
            if isinstance(anc, DEF_TYPES):
                return anc
        return None

    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]:
        for anc, _ in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return anc
        return None

    def calls_within(self, node: ast.AST) -> list[ast.Call]:
        """The calls on the lines of ``node`` (from its first line to its last), by a bisection of the
        file's calls sorted by line: what ``ast.walk(node)`` would find, without walking."""
        return nodes_within(self, "_calls_by_line", self.calls, node)

    def assigns_within(self, node: ast.AST) -> list[ast.Assign]:
        """The plain assignments on the lines of ``node`` (a bisection of the file's assignments by line)."""
        return nodes_within(self, "_assigns_by_line", self.assigns, node)


class ProjectLink:
    """What the analyses of one file ask about the other files of the run, answered by the file's project (as
    if the file were linted alone while it has none): :class:`~lightning_speedups.lint.where.ProjectView` and
    :class:`~lightning_speedups.lint.purpose.RelatedFiles`."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx

    def callers(self, fn: FuncDef) -> list[tuple[Where, ast.Call]]:
        project = self.ctx.project
        if project is None:
            return []
        return [(other.where, call) for other, call in project.callers(self.ctx, fn)]

    def file_count(self) -> int:
        return len(self.ctx.project or ()) or 1

    def near_gpu_module(self) -> bool:
        project = self.ctx.project
        return project is not None and (
            project.imports_gpu_module(self.ctx) or project.imported_by_gpu_module(self.ctx)
        )

    def hot_functions(self) -> Optional[set[ast.AST]]:
        project = self.ctx.project
        return project.hot_functions() if project is not None else None

    def related_file_mentions(self, words: tuple[str, ...], test: Callable[[str], bool]) -> bool:
        project = self.ctx.project
        return project is not None and project.related_file_mentions(self.ctx, words, test)
