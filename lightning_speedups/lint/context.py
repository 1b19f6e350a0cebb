"""What the rules know about one file: imports, scopes, bindings (the classifiers live in
``classify.py``, where code runs and how often in ``where.py``).

Everything here is plain :mod:`ast` (no torch import, no execution). The classifiers answer "is this
expression *visibly* a numpy array / a tensor / a device?" and return ``False`` whenever they cannot
tell: a lint rule built on them reports nothing rather than guess.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from pathlib import PurePath
from typing import Any, Optional, TypeVar, Union, cast

from lightning_speedups.lint.astutil import (  # noqa: F401 - re-exported for the rules
    _CANONICAL,
    _CHILD_FIELDS,
    COMP_TYPES,
    DATALOADER,
    DEF_TYPES,
    FUNC_TYPES,
    LOOP_TYPES,
    SCOPE_TYPES,
    TRAINER,
    Binding,
    _child_fields,
    argument,
    child_nodes,
    is_const,
    keyword,
    snippet,
    terminal_name,
)
from lightning_speedups.lint.classify import Classifiers
from lightning_speedups.lint.graph import Project
from lightning_speedups.lint.where import FuncDef, Runs, Where, nodes_within

_AST = ast.AST
#: Fields that hold statements (or the with-items, except handlers and match cases holding them):
#: without a `:=` in the file, only these are walked for bindings.
_STMT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases", "items"})
_BRANCH_TYPES = frozenset({ast.If, ast.While, ast.IfExp, ast.Assert})
#: The nodes whose ``test`` decides a branch (:attr:`FileContext.branches`).
Branch = Union[ast.If, ast.While, ast.IfExp, ast.Assert]
_Call, _Assign, _ClassDef, _Import, _ImportFrom, _Constant = (
    ast.Call,
    ast.Assign,
    ast.ClassDef,
    ast.Import,
    ast.ImportFrom,
    ast.Constant,
)


T = TypeVar("T")


class FileContext(Classifiers, Where):
    """One parsed file and the facts rules share about it (computed once, lazily)."""

    def __init__(self, tree: ast.Module, path: Union[str, os.PathLike[str]] = "<string>", source: str = "") -> None:
        #: what rules and the project worked out about this file once, by name (:meth:`memo`)
        self.memos: dict[str, Any] = {}
        self.tree = tree
        self.path = PurePath(path)
        self.source = source
        self.parents: dict[ast.AST, ast.AST] = {}
        self.calls: list[ast.Call] = []
        self.assigns: list[ast.Assign] = []
        self.classes: list[ast.ClassDef] = []
        self.strings: list[str] = []
        self.branches: list[Branch] = []  # if / while / x if c else y / assert: their tests
        self.aliases: dict[str, str] = {}
        self._ambiguous: set[str] = set()
        parents = self.parents
        calls, assigns, classes, strings, branches = self.calls, self.assigns, self.classes, self.strings, self.branches
        imports: list[ast.AST] = []
        stack: list[ast.AST] = [tree]
        pop, push = stack.pop, stack.append
        fields_of = _CHILD_FIELDS
        while stack:  # one pass: parent links and the node lists the rules use
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
        for node in imports:
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
        self.import_nodes: list[ast.AST] = imports
        self._bindings: dict[ast.AST, dict[str, list[Binding]]] = {}
        self._self_attrs: dict[ast.ClassDef, tuple[dict[str, list[ast.AST]], set[str]]] = {}
        self._training_loop: dict[ast.AST, bool] = {}
        self._runs: dict[ast.AST, Runs] = {}
        #: the :class:`~lightning_speedups.lint.graph.Project` of the run (callers in other files).
        self.project: Optional[Project[FileContext]] = None

    # ------------------------------------------------------------------ names

    def memo(self, key: str, make: Callable[[], T]) -> T:
        """What ``make()`` returns, worked out once per file under ``key`` (a rule's or the project's cache: a
        mapping it fills, an index it builds)."""
        if key not in self.memos:
            self.memos[key] = make()
        return cast(T, self.memos[key])

    def release(self) -> None:
        """Drop everything worked out about the file and its link to the project (the project's ``close``)."""
        self.memos.clear()
        self.project = None

    def imports_name(self, name: str) -> bool:
        """``name`` is bound by an import somewhere in the file (resolvable or not)."""
        return name in self.aliases or name in self._ambiguous

    def _alias(self, name: str, target: Optional[str]) -> None:
        """Record an import; a name imported as two different things is dropped (cannot tell)."""
        if target is None or self.aliases.get(name, target) != target:
            self._ambiguous.add(name)
        else:
            self.aliases[name] = target

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

    # ------------------------------------------------------------------ bindings
    def bindings(self, scope: ast.AST) -> dict[str, list[Binding]]:
        """Every binding of a local name directly in ``scope`` (nested scopes excluded)."""
        cached = self._bindings.get(scope)
        if cached is not None:
            return cached
        out: dict[str, list[Binding]] = {}

        def add(name: str, binding: Binding) -> None:
            out.setdefault(name, []).append(binding)

        def bind(target: ast.AST, kind: str, value: Optional[ast.AST], line: int) -> None:
            if isinstance(target, ast.Name):
                add(target.id, Binding(line, kind, value))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for elt in target.elts:
                    bind(elt, "unpack" if kind == "value" else kind, value, line)
            elif isinstance(target, ast.Starred):
                bind(target.value, "other", None, line)

        body: list[ast.AST]
        if isinstance(scope, FUNC_TYPES):
            args = scope.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            params += [a for a in (args.vararg, args.kwarg) if a is not None]
            for arg in params:
                # parameters are bound before any use in the body: line 0
                kind = "param" if arg not in (args.vararg, args.kwarg) else "other"
                add(arg.arg, Binding(0, kind, arg.annotation))
            body = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)
        else:
            assert isinstance(scope, (ast.Module, ast.ClassDef))  # scope_of() returns only SCOPE_TYPES
            body = list(scope.body)

        walrus = ":=" in self.source or not self.source
        stack = body[::-1]
        while stack:
            node = stack.pop()
            if isinstance(node, (*DEF_TYPES, ast.ClassDef)):
                add(node.name, Binding(node.lineno, "other", None))
                continue
            if isinstance(node, (ast.Lambda, *COMP_TYPES)):
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, "value", node.value, node.lineno)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                bind(node.target, "value", node.value, node.lineno)
            elif isinstance(node, ast.AugAssign):
                bind(node.target, "other", None, node.lineno)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, "value", node.value, node.lineno)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, "other", None, node.lineno)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, "other", None, node.optional_vars.lineno)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                add(node.name, Binding(node.lineno, "other", None))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    add((alias.asname or alias.name).split(".")[0], Binding(node.lineno, "other", None))
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    add(name, Binding(0, "other", None))
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    bind(target, "other", None, node.lineno)
            if walrus:
                stack.extend(reversed(child_nodes(node)))
            else:  # only statements bind (no `:=` in the file): their expressions need no walk
                kids: list[ast.AST] = []
                for field in type(node)._fields:
                    if field in _STMT_FIELDS:
                        value = getattr(node, field, None)
                        if type(value) is list:
                            kids.extend(value)
                stack.extend(reversed(kids))
        self._bindings[scope] = out
        return out

    def bindings_before(self, name: ast.Name) -> Optional[list[Binding]]:
        """The bindings of ``name`` in its own scope that come before its use; ``None`` if unknown."""
        for anc, _ in self.ancestors(name):
            if isinstance(anc, COMP_TYPES):
                for gen in anc.generators:
                    if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(gen.target)):
                        return None
            if isinstance(anc, SCOPE_TYPES):
                break
        scope = self.scope_of(name)
        prior = [b for b in self.bindings(scope).get(name.id, ()) if b.line < name.lineno]
        return prior or None

    def _assigns_within(self, node: ast.AST) -> list[ast.Assign]:
        """The plain assignments on the lines of ``node`` (a bisection of the file's assignments by line)."""
        return nodes_within(self, "_assigns_by_line", self.assigns, node)

    def self_attrs(self, cls: ast.ClassDef) -> tuple[dict[str, list[ast.AST]], set[str]]:
        """``({attr: [values assigned to self.attr]}, {method names})`` of a class."""
        cached = self._self_attrs.get(cls)
        if cached is not None:
            return cached
        attrs: dict[str, list[ast.AST]] = {}
        methods = {n.name for n in cls.body if isinstance(n, DEF_TYPES)}
        for method in cls.body:
            if not isinstance(method, DEF_TYPES):
                continue
            for node in self._assigns_within(method):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        attrs.setdefault(target.attr, []).append(node.value)
        self._self_attrs[cls] = (attrs, methods)
        return attrs, methods
