"""T16 conv-bias, source analysis: for modules fx cannot trace, prove ``conv -> bn`` pairs from the class source.

Used by :func:`~lightning_speedups.functional.conv_bias_plan.plan_conv_bias_removal` (steps 3 and 4 of
the decision described in :mod:`lightning_speedups.functional.conv_bias`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Iterator
from typing import Optional, Union

from torch import nn

__all__ = ["ast_pairs", "class_trees", "dead_methods", "reaches_in", "referenced_names"]

# source scans ignore classes defined by these libraries (their code never reaches into user modules)
_LIBRARY_PREFIXES = ("torch", "lightning", "pytorch_lightning", "builtins", "typing", "abc")


def _user_classes_of(module_cls: type) -> list[type]:
    out = []
    for cls in module_cls.__mro__:
        mod = getattr(cls, "__module__", "") or ""
        if cls is object or mod.split(".")[0] in _LIBRARY_PREFIXES:
            continue
        out.append(cls)
    return out


def class_trees(module: nn.Module) -> Optional[list[ast.AST]]:
    # the class is the cache's key: it hashes, but mypy would check type[Module] for Hashable with the
    # instances' __hash__ (an unbound method on the class); as a plain `type` it passes
    cls: type = type(module)
    trees = _class_trees_of(cls)
    return None if trees is None else list(trees)


@functools.lru_cache(maxsize=512)
def _class_trees_of(module_cls: type) -> Optional[tuple[ast.AST, ...]]:
    trees = []
    for cls in _user_classes_of(module_cls):
        try:
            src = textwrap.dedent(inspect.getsource(cls))
            trees.append(ast.parse(src))
        except (OSError, TypeError, SyntaxError):
            return None
    return tuple(trees)


def _walk(trees: list[ast.AST], skip: frozenset[str] = frozenset()) -> Iterator[ast.AST]:
    """Walk the class sources, skipping ``__init__`` (it has run before the surgery), the methods in
    ``skip`` (they do not run in training, :func:`dead_methods`) and stores."""
    stack = list(trees)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.name == "__init__" or node.name in skip):
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _chain(node: ast.AST) -> Optional[list[str]]:
    """``self.a.b[0]`` -> ``["a", "b", "0"]`` (``"*"`` for a computed index); None if not self-rooted."""
    parts: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        else:
            sl = node.slice
            parts.append(str(sl.value) if isinstance(sl, ast.Constant) else "*")
        node = node.value
    return parts[::-1] if _is_self(node) else None


def referenced_names(model: nn.Module) -> frozenset[str]:
    """Every attribute name and string constant in the source of the model's own classes (``None``
    sources are skipped): the methods a class's code can call by name."""
    out: set[str] = set()
    seen: set[type] = set()
    for module in model.modules():
        if type(module) in seen:
            continue
        seen.add(type(module))
        for node in _walk(class_trees(module) or []):
            if isinstance(node, ast.Attribute):
                out.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return frozenset(out)


#: methods a LightningModule's trainer calls by name (none of them is named in the user's source)
_LIGHTNING_HOOKS = ("training_step", "validation_step", "test_step", "predict_step", "configure_")


def dead_methods(module: nn.Module, trees: list[ast.AST], referenced: frozenset[str]) -> frozenset[str]:
    r"""Methods of ``module``'s classes that a training run never calls: not ``forward``, not a dunder
    or an ``nn.Module`` method torch calls itself (``train``, ``_load_from_state_dict``, ...), not a
    LightningModule's (Lightning calls its hooks by name), and never named in the model's source
    (``referenced``, :func:`referenced_names`). timm's ``forward_intermediates`` and
    ``prune_intermediate_layers`` are such methods: feature-extraction APIs a plain training step does
    not run. Nothing is dead when the class calls methods by a computed name (``getattr(self, name)``).

    Examples:
        >>> import ast
        >>> from torch import nn
        >>> class Net(nn.Module):
        ...     def forward(self, x): return self.head(x)
        ...     def head(self, x): return x
        ...     def taps(self, x): return [layer(x) for layer in self.features[:2]]
        >>> tree = ast.parse("class Net:\n def forward(self, x): return self.head(x)\n def head(self, x): return x\n"
        ...                  " def taps(self, x): return [layer(x) for layer in self.features[:2]]")
        >>> sorted(dead_methods(Net(), [tree], frozenset({"head"})))
        ['taps']
    """
    if any(hasattr(cls, "training_step") for cls in type(module).__mro__):
        return frozenset()
    names: list[str] = []
    for tree in trees:
        for cls_node in ast.walk(tree):
            if not isinstance(cls_node, ast.ClassDef):
                continue
            for fn in cls_node.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.append(fn.name)
                for node in ast.walk(fn):
                    if (
                        isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Name)
                        and node.func.id == "getattr"
                        and len(node.args) >= 2
                        and not isinstance(node.args[1], ast.Constant)
                    ):
                        return frozenset()
    return frozenset(
        n
        for n in names
        if n != "forward"
        and not (n.startswith("__") and n.endswith("__"))
        and not hasattr(nn.Module, n)
        and not n.startswith(_LIGHTNING_HOOKS)
        and n not in referenced
    )


def reaches_in(
    trees: list[ast.AST], tokens: set[str], path: list[str], skip: frozenset[str] = frozenset()
) -> Optional[str]:
    """Find code in an untraceable ancestor that reaches below the submodule at ``path`` (relative).

    Flags ``self.<path>.<token>`` / ``self.<path>[<token>]`` chains, any ``<expr>.<token>`` attribute
    access not rooted at ``self`` and any string equal to a non-numeric token, outside the methods in
    ``skip`` (those a training run never calls, :func:`dead_methods`).
    """
    named = {t for t in tokens if not t.isdigit()}
    for node in _walk(trees, skip):
        chain = _chain(node) if isinstance(node, (ast.Attribute, ast.Subscript)) else None
        if chain is not None:
            n = len(path)
            if len(chain) > n and all(c in (p, "*") for c, p in zip(chain, path)) and chain[n] in tokens | {"*"}:
                return f"'self.{'.'.join(chain)}' is accessed directly (line {getattr(node, 'lineno', '?')})"
        elif isinstance(node, ast.Attribute) and node.attr in named:
            return f"'.{node.attr}' is accessed directly (line {node.lineno})"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in named:
            return f"the name '{node.value}' appears as a string (line {node.lineno})"
    return None


_REFLECTION = {"children", "named_children", "modules", "named_modules", "_modules", "__dict__"}


def ast_pairs(module: nn.Module, trees: list[ast.AST]) -> dict[str, str]:
    """Direct-child pairs ``conv attr -> bn attr`` proven by the source patterns (see module doc)."""
    mentions: dict[str, list[Union[ast.Attribute, ast.Constant]]] = {}  # self.<name> or "<name>"
    for node in _walk(trees):
        if isinstance(node, ast.Attribute):
            if node.attr in _REFLECTION:
                return {}
            mentions.setdefault(node.attr, []).append(node)
        elif isinstance(node, ast.Name) and node.id in {"getattr", "vars", "setattr"}:
            return {}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            mentions.setdefault(node.value, []).append(node)

    found: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # conv attr -> [(conv attr node, bn attr node)]
    found_bn: dict[str, str] = {}
    for node in _walk(trees):
        # self.bn(self.conv(...))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_self(node.func.value):
            if len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Call):
                inner = node.args[0]
                if isinstance(inner.func, ast.Attribute) and _is_self(inner.func.value):
                    found.setdefault(inner.func.attr, []).append((inner.func, node.func))
                    found_bn.setdefault(inner.func.attr, node.func.attr)
        # v = self.conv(...); v = self.bn(v)
        body = getattr(node, "body", None)
        for block in (body, getattr(node, "orelse", None), getattr(node, "finalbody", None)):
            if not isinstance(block, list):
                continue
            for first, second in zip(block, block[1:]):
                if not (isinstance(first, ast.Assign) and isinstance(second, ast.Assign)):
                    continue
                if len(first.targets) != 1 or len(second.targets) != 1:
                    continue
                t1, t2 = first.targets[0], second.targets[0]
                if not (isinstance(t1, ast.Name) and isinstance(t2, ast.Name) and t1.id == t2.id):
                    continue
                v1, v2 = first.value, second.value
                if not (isinstance(v1, ast.Call) and isinstance(v1.func, ast.Attribute) and _is_self(v1.func.value)):
                    continue
                if not (isinstance(v2, ast.Call) and isinstance(v2.func, ast.Attribute) and _is_self(v2.func.value)):
                    continue
                if (
                    len(v2.args) != 1
                    or v2.keywords
                    or not (isinstance(v2.args[0], ast.Name) and v2.args[0].id == t1.id)
                ):
                    continue
                found.setdefault(v1.func.attr, []).append((v1.func, v2.func))
                found_bn.setdefault(v1.func.attr, v2.func.attr)
    out = {}
    for conv_attr, uses in found.items():
        bn_attr = found_bn[conv_attr]
        if any(getattr(b, "attr", None) != bn_attr for _, b in uses):
            continue
        conv_nodes = {id(c) for c, _ in uses}
        bn_nodes = {id(b) for _, b in uses}
        # every mention of both names must be one of the matched patterns
        if {id(n) for n in mentions.get(conv_attr, [])} != conv_nodes:
            continue
        if {id(n) for n in mentions.get(bn_attr, [])} != bn_nodes:
            continue
        # the bn must not be fed by another conv pattern either
        if any(found_bn.get(other) == bn_attr for other in found if other != conv_attr):
            continue
        out[conv_attr] = bn_attr
    return out
