"""Walk nested batches and step outputs (dicts, sequences, dataclasses) for their tensors, with readable paths."""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Iterator, Mapping
from typing import Any, Optional

import torch

__all__ = ["tensors_in", "walk_tensors"]


def walk_tensors(obj: Any, prefix: str, seen: Optional[set[int]] = None) -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` for tensors inside dicts, sequences, dataclasses and named tuples."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
        return
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    if isinstance(obj, Mapping):
        seen.add(id(obj))
        for k, v in obj.items():
            yield from walk_tensors(v, f"{prefix}[{k!r}]", seen)
    elif isinstance(obj, (list, tuple)):
        seen.add(id(obj))
        for i, v in enumerate(obj):
            yield from walk_tensors(v, f"{prefix}[{i}]", seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        for f in dataclasses.fields(obj):
            yield from walk_tensors(getattr(obj, f.name), f"{prefix}.{f.name}", seen)


#: how deep and how wide :func:`tensors_in` looks into an object it does not know
_MAX_DEPTH = 8
_MAX_NODES = 20_000
#: objects whose attributes are never walked: classes, modules (model layers, Python modules), functions
_OPAQUE = (
    type,
    torch.nn.Module,
    types.ModuleType,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    functools.partial,
)


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """Every tensor reachable from ``obj`` (a batch, a step's output), each once, found by reading only.

    Containers are never rebuilt: mappings (a ``dict``, a ``UserDict`` such as Hugging Face's ``BatchEncoding``,
    a tensordict), sequences, dataclasses (read through their fields, so a ``__post_init__`` that validates them
    never runs) and, for other objects (a graph batch), their instance attributes, to a bounded depth. A property
    is never read.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Batch:
        ...     image: torch.Tensor
        ...     label: torch.Tensor
        ...     def __post_init__(self):
        ...         assert isinstance(self.image, torch.Tensor), "validated"
        >>> b = Batch(torch.zeros(2, 3), torch.ones(2))
        >>> [tuple(t.shape) for t in tensors_in({"batch": b, "extra": (b.image, 1)})]
        [(2, 3), (2,)]
    """
    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack and len(seen) < _MAX_NODES:
        item, depth = stack.pop()
        if isinstance(item, torch.Tensor):
            found.setdefault(id(item), item)
            continue
        if item is None or isinstance(item, (str, bytes, int, float, bool, complex)) or id(item) in seen:
            continue
        if depth >= _MAX_DEPTH or isinstance(item, _OPAQUE):
            continue
        seen.add(id(item))
        children: list[Any]
        if isinstance(item, Mapping):
            try:
                children = list(item.values())
            except (TypeError, KeyError, AttributeError, NotImplementedError, RuntimeError):
                children = []  # a mapping that cannot list its values holds nothing we read
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = list(item)
        elif dataclasses.is_dataclass(item):
            children = [vars(item).get(f.name) for f in dataclasses.fields(item)] if hasattr(item, "__dict__") else []
        else:
            children = list(vars(item).values()) if hasattr(item, "__dict__") else []
        stack.extend((child, depth + 1) for child in reversed(children))
    return list(found.values())
