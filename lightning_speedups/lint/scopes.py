"""Names bound in a scope, as far as the file shows: every binding of a local name (:meth:`Scopes.bindings`),
those before a use (:meth:`Scopes.bindings_before`), and what a class assigns to ``self.<attr>``
(:meth:`Scopes.self_attrs`). ``ctx.scopes`` of a :class:`~lightning_speedups.lint.context.FileContext`."""

from __future__ import annotations

import ast
from typing import Optional

from lightning_speedups.lint.astutil import COMP_TYPES, DEF_TYPES, FUNC_TYPES, SCOPE_TYPES, Binding, child_nodes
from lightning_speedups.lint.basics import FileBasics

#: Fields that hold statements (or the with-items, except handlers and match cases holding them):
#: without a `:=` in the file, only these are walked for bindings.
_STMT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases", "items"})


class Scopes:
    """The bindings of one file's scopes (each scope's worked out once, when first asked)."""

    def __init__(self, file: FileBasics) -> None:
        self.file = file
        self._bindings: dict[ast.AST, dict[str, list[Binding]]] = {}
        self._self_attrs: dict[ast.ClassDef, tuple[dict[str, list[ast.AST]], set[str]]] = {}

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

        walrus = ":=" in self.file.source or not self.file.source
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
        for anc, _ in self.file.ancestors(name):
            if isinstance(anc, COMP_TYPES):
                for gen in anc.generators:
                    if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(gen.target)):
                        return None
            if isinstance(anc, SCOPE_TYPES):
                break
        scope = self.file.scope_of(name)
        prior = [b for b in self.bindings(scope).get(name.id, ()) if b.line < name.lineno]
        return prior or None

    def self_attrs(self, cls: ast.ClassDef) -> tuple[dict[str, list[ast.AST]], set[str]]:
        """``({attr: [values assigned to self.attr]}, {method names})`` of a class."""
        cached = self._self_attrs.get(cls)
        if cached is not None:
            return cached
        file = self.file
        attrs: dict[str, list[ast.AST]] = {}
        methods = {n.name for n in cls.body if isinstance(n, DEF_TYPES)}
        for method in cls.body:
            if not isinstance(method, DEF_TYPES):
                continue
            for node in file.assigns_within(method):
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        attrs.setdefault(target.attr, []).append(node.value)
        self._self_attrs[cls] = (attrs, methods)
        return attrs, methods
