"""Walk nested batches and step outputs (dicts, sequences, dataclasses) for their tensors, with readable paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Optional

import torch

__all__ = ["walk_tensors"]


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
