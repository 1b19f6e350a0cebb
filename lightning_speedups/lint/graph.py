"""One call graph over every file given to ``lint``: which function a call reaches, in any file.

``where.py`` decides how often a line runs inside its own file; a function whose callers live in
another file (a metric logger's ``update``, a grad-clipping helper, a setup helper called once from
``main.py``) asks the :class:`Project` for its call sites in the other files and takes the busiest
of them, through any number of calls and files (a recursion guard stops cycles).

A call is resolved only when the code shows what it calls:

- ``f(...)`` for a function of this file or one imported with ``from mod import f`` (absolute or
  relative, also through one re-export in a package's ``__init__.py``);
- ``mod.f(...)`` with ``import pkg.mod as mod`` / ``from pkg import mod``;
- ``obj.m(...)`` where ``obj`` is bound in the same function (or at module level) to ``Cls(...)``, or
  is ``self.attr`` assigned ``Cls(...)`` in the class, with ``Cls`` a class of the project (methods
  of its bases in the project are found too);
- ``self.m(...)`` for a method inherited from a base class defined in another file.

Modules are matched to files by their dotted path (``pkg.mod`` -> ``.../pkg/mod.py`` or
``.../pkg/mod/__init__.py``; of several candidates the one nearest the importing file). Nothing is
imported or executed. Contexts of files are built lazily: only files whose text mentions a
function's name are searched for its callers.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from pathlib import PurePath
from typing import Generic, Optional, Protocol, TypeVar, Union

from lightning_speedups.lint.astutil import DEF_TYPES, FUNC_TYPES, mentions_step, terminal_name
from lightning_speedups.lint.file_index import (
    FileNodes,
    assign_index,
    calls_named,
    import_table,
    is_test_path,
    norm_path,
    text_calls,
)
from lightning_speedups.lint.loops import Loops
from lightning_speedups.lint.scopes import Scopes


class ProjectFile(FileNodes, Protocol):
    """What the project reads of a file's context. :class:`lightning_speedups.lint.context.FileContext` provides it;
    it is a protocol here because that module imports this one (a project links the contexts of its files)."""

    tree: ast.Module
    path: PurePath
    parents: dict[ast.AST, ast.AST]
    scopes: Scopes
    loops: Loops

    def release(self) -> None: ...

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]: ...

    def scope_of(self, node: ast.AST) -> ast.AST: ...

    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]: ...

    def calls_within(self, node: ast.AST) -> list[ast.Call]: ...


#: the project's file context type (FileContext for the linter; the protocol is all the project reads of it)
C = TypeVar("C", bound=ProjectFile)

_Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]


class Project(Generic[C]):
    """The files of one ``lint`` run: ``{path: (tree, source)}`` (``tree`` ``None``: not parsed yet);
    contexts are made on demand."""

    def __init__(
        self,
        files: dict[str, tuple[Optional[ast.Module], str]],
        make_context: Optional[Callable[[ast.Module, str, str, Project[C]], C]] = None,
    ) -> None:
        # C's module imports this one: the class comes in as an argument (no import cycle); it is given the
        # tree, the path, the text and this project (the context's link to the other files)
        self._make_context = make_context
        self._files = files
        self._norm = {norm_path(p): p for p in files}
        self._contexts: dict[str, C] = {}
        self._by_stem: dict[str, list[str]] = {}
        for p in self._norm:
            stem = p.rsplit("/", 1)[-1]
            stem = stem[: -len(".py")] if stem.endswith(".py") else stem
            if stem == "__init__":
                stem = p.rsplit("/", 2)[-2] if p.count("/") else stem
            self._by_stem.setdefault(stem, []).append(p)
        self._callers: dict[_Def, list[tuple[C, ast.Call]]] = {}
        self._module_file: dict[tuple[str, str, int], Optional[str]] = {}
        self._tokens: Optional[dict[str, list[str]]] = None
        self._hot: Optional[set[ast.AST]] = None
        self._hot_files: set[str] = set()
        self._resolving: set[ast.AST] = set()  # calls whose returned class is being resolved
        self._defs: Optional[tuple[frozenset[str], frozenset[str]]] = None  # _def_names, worked out once

    def close(self) -> None:
        """Drop the contexts and their links back to the project (a reference cycle: left alone, the
        garbage collector would later walk every ast node of the run to free them)."""
        for ctx in self._contexts.values():
            ctx.release()  # drops its link to the project too
        self._contexts.clear()
        self._callers.clear()
        self._files = {}
        self._hot = None
        self._defs = None
        self._tokens = None

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, path: object) -> bool:
        """``path`` (a display path) is one of the run's files."""
        return path in self._files

    # ------------------------------------------------------------------ files and contexts
    def context(self, path: str) -> C:
        """The :class:`C` of ``path`` (made once)."""
        ctx = self._contexts.get(path)
        if ctx is None:
            if self._make_context is None:
                raise RuntimeError("Project(files, make_context=FileContext) builds contexts")
            tree, source = self._files[path]
            if tree is None:  # only syntax-checked so far
                tree = ast.parse(source, filename=path)
                self._files[path] = (tree, source)
            ctx = self._make_context(tree, path, source, self)
            self._contexts[path] = ctx
        return ctx

    def adopt(self, ctx: C, path: str) -> None:
        """Use ``ctx`` (already made by the runner, with this project) as the context of ``path``."""
        self._contexts[path] = ctx

    def module_file(self, importer: str, module: str, level: int) -> Optional[str]:
        """The file (display path) of ``module`` imported from ``importer`` (``level`` dots), or ``None``."""
        key = (importer, module, level)
        if key in self._module_file:
            return self._module_file[key]
        found = self._find_module(norm_path(importer), module, level)
        out = self._norm[found] if found is not None else None
        self._module_file[key] = out
        return out

    def _find_module(self, importer: str, module: str, level: int) -> Optional[str]:
        parts = [p for p in module.split(".") if p]
        if level:
            base = importer.rsplit("/", 1)[0] if "/" in importer else ""
            for _ in range(level - 1):
                base = base.rsplit("/", 1)[0] if "/" in base else ""
            rel = "/".join(parts)
            stem = f"{base}/{rel}" if base and rel else (base or rel)
            for cand in (f"{stem}.py", f"{stem}/__init__.py"):
                if cand in self._norm:
                    return cand
            return None
        if not parts:
            return None
        suffixes = ("/" + "/".join(parts) + ".py", "/" + "/".join(parts) + "/__init__.py")
        cands = [
            p
            for p in self._by_stem.get(parts[-1], ())
            if ("/" + p).endswith(suffixes) or p in (suffixes[0][1:], suffixes[1][1:])
        ]
        if not cands:
            return None
        return max(cands, key=lambda p: len(os.path.commonprefix([p, importer])))

    # ------------------------------------------------------------------ names of a file
    def top_level(self, ctx: C) -> dict[str, ast.AST]:
        """Module-level functions and classes of a file, by name."""
        return ctx.memo(
            "top_level", lambda: {n.name: n for n in ctx.tree.body if isinstance(n, (*DEF_TYPES, ast.ClassDef))}
        )

    def imports(self, ctx: C) -> dict[str, tuple[str, Optional[str], int]]:
        """``{local name: (module, attribute or None, level)}`` of the file's imports (any depth)."""
        return ctx.memo("import_table", lambda: import_table(ctx))

    def _lookup(self, path: str, name: str, depth: int = 0) -> Optional[tuple[C, ast.AST]]:
        """The function or class ``name`` defined (or re-exported) in the file ``path``."""
        ctx = self.context(path)
        node = self.top_level(ctx).get(name)
        if node is not None:
            return ctx, node
        if depth < 2:
            entry = self.imports(ctx).get(name)
            if entry is not None:
                return self._resolve_import(ctx, entry, depth + 1)
        return None

    def _resolve_import(
        self, ctx: C, entry: tuple[str, Optional[str], int], depth: int = 0
    ) -> Optional[tuple[C, ast.AST]]:
        module, attr, level = entry
        if attr is None:
            return None
        path = self.module_file(str(ctx.path), module, level)
        if path is not None:
            found = self._lookup(path, attr, depth)
            if found is not None:
                return found
        return None

    def _module_of(self, ctx: C, name: str) -> Optional[str]:
        """The file of the module that ``name`` is bound to by an import (``import pkg.mod as m``)."""
        entry = self.imports(ctx).get(name)
        if entry is None:
            return None
        module, attr, level = entry
        if attr is None:
            return self.module_file(str(ctx.path), module, level)
        if level or module:
            sub = f"{module}.{attr}" if module else attr
            return self.module_file(str(ctx.path), sub, level)
        return None

    def resolve_name(self, ctx: C, node: ast.AST) -> Optional[tuple[C, ast.AST]]:
        """The function or class of the project that the name ``node`` (``f``, ``mod.f``) denotes."""
        if isinstance(node, ast.Name):
            found = self.top_level(ctx).get(node.id)
            if found is not None:
                return ctx, found
            entry = self.imports(ctx).get(node.id)
            return self._resolve_import(ctx, entry) if entry is not None else None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            path = self._module_of(ctx, node.value.id)
            if path is not None:
                return self._lookup(path, node.attr)
        return None

    def _class_of_value(self, ctx: C, value: Optional[ast.AST], depth: int = 0) -> Optional[tuple[C, ast.ClassDef]]:
        """``value`` is ``Cls(...)`` for a class of the project (also ``Cls(...).to(device)``, ``.cuda()``,
        and ``f(...)`` / ``self.m(...)`` whose every return is a ``Cls(...)``)."""
        while (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in ("to", "cuda", "cpu", "train", "eval", "float", "half", "double", "bfloat16")
        ):
            value = value.func.value
        if not isinstance(value, ast.Call):
            return None
        found = self.resolve_name(ctx, value.func)
        if found is not None and isinstance(found[1], ast.ClassDef):
            return found[0], found[1]
        if depth < 2 and terminal_name(value.func) in self.defined_names() and value not in self._resolving:
            # a function or method of the project whose every return is one class's object
            # (posterior = self.encode(x); posterior.sample(): encode returns DiagonalGaussian(...));
            # x = x.m() refers to itself: the guard stops that cycle
            self._resolving.add(value)
            try:
                fn = self.resolve_call(ctx, value)
                if fn is not None:
                    return self._returned_class(fn[0], fn[1], depth + 1)
            finally:
                self._resolving.discard(value)
        return None

    def _returned_class(self, ctx: C, fn: _Def, depth: int) -> Optional[tuple[C, ast.ClassDef]]:
        """The class of the project whose object ``fn`` returns on every ``return`` (``None`` when the
        returns differ, return something else, or there is none)."""
        memo: dict[_Def, Optional[tuple[C, ast.ClassDef]]] = ctx.memo("returned_class", dict)
        if fn in memo:
            return memo[fn]
        memo[fn] = None  # recursion guard
        values: list[ast.AST] = []
        stack: list[ast.AST] = list(fn.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (*DEF_TYPES, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(node, ast.Return):
                if node.value is None:
                    return None
                values.append(node.value)
                continue
            if isinstance(node, ast.stmt):
                stack.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, (ast.stmt, ast.excepthandler)))
        classes: set[Optional[tuple[C, ast.ClassDef]]] = set()
        for value in values:
            if isinstance(value, ast.Name):
                assigned = self._assigned_values(ctx, value)
                if not assigned:
                    return None
                classes.update(self._class_of_value(ctx, v, depth) for v in assigned)
            else:
                classes.add(self._class_of_value(ctx, value, depth))
            if len(classes) > 1 or None in classes:
                return None
        result = next(iter(classes)) if len(classes) == 1 else None
        memo[fn] = result
        return result

    def _assigned_values(self, ctx: C, owner: ast.Name) -> list[ast.AST]:
        """What ``owner`` is assigned in its own scope (or, when nothing there, at module level); empty
        when it is a parameter there. Cheaper than the full bindings of the scope: only plain
        ``name = value`` assignments of the file are looked at, indexed once by name."""
        index: dict[str, list[ast.Assign]] = ctx.memo("assign_index", lambda: assign_index(ctx))
        found = index.get(owner.id)
        if not found:
            return []
        scope = ctx.scope_of(owner)
        if isinstance(scope, FUNC_TYPES):
            args = scope.args
            if any(a.arg == owner.id for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]):
                return []
        values: list[ast.AST] = [a.value for a in found if ctx.scope_of(a) is scope]
        if not values and scope is not ctx.tree:
            values = [a.value for a in found if ctx.scope_of(a) is ctx.tree]
        return values

    def method(self, ctx: C, cls: ast.ClassDef, name: str, depth: int = 0) -> Optional[tuple[C, _Def]]:
        """Method ``name`` of ``cls`` or of one of its bases in the project."""
        for node in cls.body:
            if isinstance(node, DEF_TYPES) and node.name == name:
                return ctx, node
        if depth < 4:
            for base in cls.bases:
                found = self.resolve_name(ctx, base)
                if found is not None and isinstance(found[1], ast.ClassDef):
                    m = self.method(found[0], found[1], name, depth + 1)
                    if m is not None:
                        return m
        return None

    def resolve_call(self, ctx: C, call: ast.Call) -> Optional[tuple[C, _Def]]:
        """The function of the project that ``call`` runs, when the code shows it (see the module docstring)."""
        func = call.func
        found: Optional[tuple[C, ast.AST]]
        if isinstance(func, ast.Name):
            found = self.resolve_name(ctx, func)
            return (found[0], found[1]) if found is not None and isinstance(found[1], DEF_TYPES) else None
        if not isinstance(func, ast.Attribute):
            return None
        owner = func.value
        if isinstance(owner, ast.Name):
            if owner.id in ("self", "cls"):
                cls = ctx.enclosing_class(call)
                return self.method(ctx, cls, func.attr) if cls is not None else None
            found = self.resolve_name(ctx, func)
            if found is not None:
                return (found[0], found[1]) if isinstance(found[1], DEF_TYPES) else None
            if func.attr not in self.method_names():
                return None  # no class of the project has such a method
            values = self._assigned_values(ctx, owner)
            classes = {self._class_of_value(ctx, v) for v in values}
            if len(classes) == 1:
                only = next(iter(classes))
                if only is not None:
                    return self.method(only[0], only[1], func.attr)
            return None
        if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and owner.value.id == "self":
            cls = ctx.enclosing_class(call)
            if cls is None:
                return None
            attrs, _ = ctx.scopes.self_attrs(cls)
            classes = {self._class_of_value(ctx, v) for v in attrs.get(owner.attr, ())}
            if len(classes) == 1:
                only = next(iter(classes))
                if only is not None:
                    return self.method(only[0], only[1], func.attr)
        return None

    # ------------------------------------------------------------------ what a training step reaches
    def hot_functions(self) -> set[ast.AST]:
        """Every function a training step can reach: training_step / validation_step methods, step
        functions (backward or an optimizer step outside loops) and the functions called from them or
        from the body of a training loop, through any number of calls and files. Only these can run per
        step through a caller; the others are never searched for callers by the sync rules."""
        if self._hot is not None:
            return self._hot
        from lightning_speedups.lint.where import STEP_METHODS, TRAIN_BATCH_HOOKS

        roots = STEP_METHODS | TRAIN_BATCH_HOOKS

        hot: set[ast.AST] = set()
        self._hot = hot
        work: list[tuple[C, ast.AST]] = []
        for path, (_, source) in self._files.items():
            if is_test_path(path) or not mentions_step(source):
                continue
            ctx = self.context(path)
            for defs in ctx.loops.functions.values():
                for fn in defs:
                    method = isinstance(ctx.parents.get(fn), ast.ClassDef)
                    if (method and fn.name in roots) or ctx.loops.is_step_function(fn):
                        if fn not in hot:
                            hot.add(fn)
                            work.append((ctx, fn))
            for call in ctx.calls:  # the bodies of training loops, wherever they are
                func = call.func
                if not (
                    (isinstance(func, ast.Attribute) and func.attr in ("backward", "manual_backward", "step"))
                    or terminal_name(func).lower().endswith("scaler")
                ):
                    continue
                for anc, _ in ctx.ancestors(call):
                    if isinstance(anc, (ast.For, ast.AsyncFor, ast.While)) and ctx.loops.is_training_loop(anc):
                        work.append((ctx, anc))
                        break
        defined = self.defined_names()
        seen: set[ast.AST] = set()
        while work:
            ctx, body = work.pop()
            if body in seen:
                continue
            seen.add(body)
            self._hot_files.add(str(ctx.path))
            for node in ctx.calls_within(body):
                if terminal_name(node.func) in defined:
                    found = self.resolve_call(ctx, node)
                    if found is not None and found[1] not in hot:
                        hot.add(found[1])
                        work.append(found)
        return hot

    def _def_names(self) -> tuple[frozenset[str], frozenset[str]]:
        """``(every def's name, every indented def's name)`` of the project's text, in one pass."""
        cached = self._defs
        if cached is None:
            import re

            pattern = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
            every: set[str] = set()
            indented: set[str] = set()
            for _, source in self._files.values():
                if "def" not in source:
                    continue
                for indent, name in pattern.findall(source):
                    every.add(name)
                    if indent:
                        indented.add(name)
            cached = self._defs = (frozenset(every), frozenset(indented))
        return cached

    def method_names(self) -> frozenset[str]:
        """Names of every indented ``def`` (methods, nested functions): ``obj.m()`` can resolve only to these."""
        return self._def_names()[1]

    def defined_names(self) -> frozenset[str]:
        """Names of every ``def`` in the project's text: a call of any other name resolves to nothing here."""
        return self._def_names()[0]

    def imports_gpu_module(self, ctx: C) -> bool:
        """A project module that ``ctx`` imports mentions CUDA (where its device comes from)."""
        return bool(ctx.memo("imports_gpu", lambda: self._imports_gpu(ctx)))

    def _imports_gpu(self, ctx: C) -> bool:
        for module, attr, level in self.imports(ctx).values():
            for mod in (module, f"{module}.{attr}" if attr else module):
                path = self.module_file(str(ctx.path), mod, level) if mod or level else None
                if path is not None and "cuda" in self._files[path][1]:
                    return True
        return False

    def imported_by_gpu_module(self, ctx: C) -> bool:
        """A project file that mentions CUDA imports ``ctx``'s module (or its package): the tensors an
        algorithm's ``update()`` trains on may come from there (``agent.update(rollouts)`` in a
        ``main.py`` that moves them to the device)."""
        return bool(ctx.memo("imported_by_gpu", lambda: self._imported_by_gpu(ctx)))

    def _imported_by_gpu(self, ctx: C) -> bool:
        own = str(ctx.path)
        parts = norm_path(own).split("/")
        stem = parts[-1][: -len(".py")] if parts[-1].endswith(".py") else parts[-1]
        package = parts[-2] if len(parts) > 1 else ""
        targets = {norm_path(own)}
        if package:
            targets.add("/".join(parts[:-1]) + "/__init__.py")
        names = [n for n in (stem, package) if n and n != "__init__"]
        memo = False
        for path, (_, source) in self._files.items():
            if path == own or "cuda" not in source or not any(n in source for n in names) or is_test_path(path):
                continue
            other = self.context(path)
            for module, attr, level in self.imports(other).values():
                for mod in (module, f"{module}.{attr}" if attr else module):
                    found = self.module_file(path, mod, level) if mod or level else None
                    if found is not None and norm_path(found) in targets:
                        memo = True
                        break
                if memo:
                    break
            if memo:
                break
        return memo

    def _imports_file(self, importer: C, target: str) -> bool:
        """``importer`` imports the module of the file ``target`` (or its package's ``__init__``)."""
        parts = norm_path(target).split("/")
        targets = {norm_path(target)}
        if len(parts) > 1:
            targets.add("/".join(parts[:-1]) + "/__init__.py")
        for module, attr, level in self.imports(importer).values():
            for mod in (module, f"{module}.{attr}" if attr else module):
                found = self.module_file(str(importer.path), mod, level) if mod or level else None
                if found is not None and norm_path(found) in targets:
                    return True
        return False

    def related_file_mentions(
        self, ctx: C, words: tuple[str, ...], test: Optional[Callable[[str], bool]] = None
    ) -> bool:
        """A project file that ``ctx`` imports, or that imports ``ctx``, holds one of ``words`` (a
        switch set in the training script that imports a helper, or in a module the script imports) and
        passes ``test`` on its text, if one is given."""
        own = norm_path(str(ctx.path))
        for word in words:
            for path in self.files_naming(word):
                if norm_path(path) == own or is_test_path(path):
                    continue
                if test is not None and not test(self._files[path][1]):
                    continue
                if self._imports_file(ctx, path) or self._imports_file(self.context(path), own):
                    return True
        return False

    def is_hot_file(self, path: str) -> bool:
        """``path`` holds a function a training step reaches (or a training step itself)."""
        self.hot_functions()
        return str(path) in self._hot_files

    # ------------------------------------------------------------------ callers
    def callers(self, ctx: C, fn: _Def) -> list[tuple[C, ast.Call]]:
        """Every call in the project (this file included) that resolves to ``fn`` of ``ctx``."""
        cached = self._callers.get(fn)
        if cached is not None:
            return cached
        out: list[tuple[C, ast.Call]] = []
        self._callers[fn] = out
        name = fn.name
        cls = ctx.parents.get(fn)
        method = isinstance(cls, ast.ClassDef)
        paths = self.files_calling(name)
        if method:  # obj.m() resolves only where the class (or a subclass of it) is named
            assert isinstance(cls, ast.ClassDef)
            with_class = set(self.files_naming(cls.name))
            paths = [p for p in paths if p in with_class]
        elif isinstance(cls, ast.Module):
            # f() of another file resolves only through an import naming f's module (``from .misc
            # import f``, ``import misc``) or its package (a re-export in ``__init__.py``)
            parts = norm_path(str(ctx.path)).split("/")
            stem = parts[-1][: -len(".py")] if parts[-1].endswith(".py") else parts[-1]
            names = {stem, parts[-2]} if stem == "__init__" and len(parts) > 1 else {stem}
            if len(parts) > 1 and stem != "__init__":
                names.add(parts[-2])
            own = str(ctx.path)
            paths = [p for p in paths if p == own or any(n in self._files[p][1] for n in names)]
        for path in paths:
            if is_test_path(path):
                continue  # a test calling a helper in a loop is not training
            other = self.context(path)
            for call in calls_named(other).get(name, ()):
                if method != isinstance(call.func, ast.Attribute) and not (
                    not method and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                ):
                    continue  # a function is called by name or as module.f(); a method as obj.m()
                found = self.resolve_call(other, call)
                if found is not None and found[1] is fn:
                    out.append((other, call))
        return out

    def files_calling(self, name: str) -> list[str]:
        """The files whose text holds a call of ``name`` (``name(`` / ``.name(``, spaces allowed before the
        parenthesis): only there can a call resolve to it. Fewer contexts to build than every file that
        merely names it (remembered per name)."""
        key = "(" + name
        if self._tokens is None:
            self._tokens = {}
        found = self._tokens.get(key)
        if found is None:
            found = self._tokens[key] = [
                path for path in self.files_naming(name) if text_calls(self._files[path][1], name)
            ]
        return found

    def files_naming(self, name: str) -> list[str]:
        """The files whose text holds ``name`` (a substring test, remembered per name)."""
        if self._tokens is None:
            self._tokens = {}
        found = self._tokens.get(name)
        if found is None:
            found = self._tokens[name] = [path for path, (_, source) in self._files.items() if name in source]
        return found


__all__ = ["Project", "ProjectFile"]
