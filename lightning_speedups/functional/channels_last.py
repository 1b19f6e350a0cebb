"""T24 channels-last: store 4D (NCHW) tensors as NHWC and 5D (NCDHW) tensors as NDHWC.

What it does: converts the model's 4D parameters and buffers to ``torch.channels_last`` and its 5D ones to
``torch.channels_last_3d``, and the floating-point 4D / 5D tensors of each batch likewise. Only the memory
layout changes: the logical shape and every value stay the same, so outputs are equal to the contiguous
model's (up to the kernel's summation order, i.e. the dtype tolerance). Measure with the bench. Random ops on
4D activations (dropout) draw their random numbers in memory order, so in training the masks differ from the
contiguous model's (same distribution, different elements); everything deterministic is equal.

Card: tip T24 ``channels-last``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

Example::

    model = to_channels_last(model)
    x = batch_to_channels_last(x)
    y = model(x)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import torch
from torch import nn

from lightning_speedups.errors import SettingTypeError

__all__ = [
    "DEFAULT_EXCLUDE_KEYS",
    "batch_to_channels_last",
    "channels_last_candidates",
    "to_channels_last",
    "to_channels_last_undoable",
]

#: Batch entries whose key (dict key, dataclass field or namedtuple field) contains one of these
#: words (case-insensitive) are never converted: labels, targets and masks keep their layout.
DEFAULT_EXCLUDE_KEYS: tuple[str, ...] = ("label", "target", "mask")


def _format_for(t: torch.Tensor) -> torch.memory_format | None:
    if not t.is_floating_point():
        return None
    if t.dim() == 4:
        return torch.channels_last
    if t.dim() == 5:
        return torch.channels_last_3d
    return None


def channels_last_candidates(model: nn.Module) -> list[str]:
    """The qualified names of the modules that own a 4D or 5D floating-point parameter.

    These are the convolutions (2D, 3D, transposed) and anything else with image-shaped weights;
    an empty list means :func:`to_channels_last` has nothing to convert.

    Example::

        >>> channels_last_candidates(nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()))
        ['0']
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}.")
    names = []
    for name, module in model.named_modules():
        if any(_format_for(p) is not None for p in module.parameters(recurse=False)):
            names.append(name)
    return names


def to_channels_last(model: nn.Module, *, warn: bool = True) -> nn.Module:
    """Convert the model's 4D parameters / buffers to ``channels_last`` and 5D ones to ``channels_last_3d``.

    In place (like ``model.to``); returns the model. Idempotent. Gradients that already exist are
    converted too. When the model has no 4D / 5D parameter (no convolution), nothing changes and,
    with ``warn=True``, a ``UserWarning`` says so; :func:`channels_last_candidates` tells beforehand.

    Args:
        model: any ``nn.Module``.
        warn: warn when there is nothing to convert.

    Returns:
        The same ``model``.

    Example::

        model = to_channels_last(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)))
        assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}.")
    if not channels_last_candidates(model):
        if warn:
            warnings.warn(
                f"to_channels_last: {type(model).__name__} has no 4D/5D convolution weights; nothing was converted.",
                UserWarning,
                stacklevel=2,
            )
        return model

    def convert(t: torch.Tensor) -> torch.Tensor:
        fmt = _format_for(t)
        if fmt is None or t.is_contiguous(memory_format=fmt):
            return t
        return t.contiguous(memory_format=fmt)

    # ``_apply`` is what ``model.to(memory_format=...)`` uses; it also converts ``.grad`` and keeps
    # the Parameter objects (so an optimizer built earlier still holds the right tensors).
    model._apply(convert)
    return model


def to_channels_last_undoable(model: nn.Module) -> Callable[[], None]:
    """Convert like :func:`to_channels_last` and return a function that puts back the layout of every
    tensor it converted (parameters keep their objects; buffers and gradients are converted back too).

    The start-up probe tries channels_last on the user's model this way and undoes it when it is not
    faster.

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        >>> undo = to_channels_last_undoable(net)
        >>> net[0].weight.is_contiguous(memory_format=torch.channels_last), net[0].weight.is_contiguous()
        (True, False)
        >>> undo(); net[0].weight.is_contiguous()
        True
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}.")
    params = [
        p for p in model.parameters() if (fmt := _format_for(p)) is not None and not p.is_contiguous(memory_format=fmt)
    ]
    formats = {id(p): _layout(p) for p in params}
    buffers: list[tuple[nn.Module, str]] = []
    buffer_formats: dict[tuple[int, str], torch.memory_format] = {}
    for m in model.modules():
        for name, b in m._buffers.items():
            if b is not None and (fmt := _format_for(b)) is not None and not b.is_contiguous(memory_format=fmt):
                buffers.append((m, name))
                buffer_formats[(id(m), name)] = _layout(b)
    to_channels_last(model, warn=False)

    def undo() -> None:
        with torch.no_grad():
            for p in params:
                p.data = p.data.contiguous(memory_format=formats[id(p)])
                if p.grad is not None:
                    p.grad = p.grad.contiguous(memory_format=formats[id(p)])
            for m, name in buffers:
                b = m._buffers[name]
                if b is not None:
                    m._buffers[name] = b.contiguous(memory_format=buffer_formats[(id(m), name)])

    return undo


def _layout(t: torch.Tensor) -> torch.memory_format:
    """The layout a tensor that is not channels-last is in: contiguous when it is, else kept as it is."""
    return torch.contiguous_format if t.is_contiguous() else torch.preserve_format


def _excluded(key: Any, exclude_keys: tuple[str, ...]) -> bool:
    if not isinstance(key, str):
        return False
    low = key.lower()
    return any(word in low for word in exclude_keys)


def batch_to_channels_last(batch: Any, *, exclude_keys: Iterable[str] = DEFAULT_EXCLUDE_KEYS) -> Any:
    """Return ``batch`` with its floating-point 4D / 5D tensors in channels-last layout.

    Walks nested dicts (any ``Mapping``), lists, tuples, namedtuples and dataclass instances and
    rebuilds them with the converted tensors (the input is not modified). Integer and bool tensors
    (labels, masks), tensors of other ranks, and entries whose key / field name contains one of
    ``exclude_keys`` (by default ``"label"``, ``"target"``, ``"mask"``, case-insensitive) are left
    as they are. Values never change, only strides.

    Args:
        batch: a tensor or a nested structure holding tensors.
        exclude_keys: substrings of keys / field names whose values are left alone.

    Example::

        batch = {"image": torch.rand(8, 3, 32, 32), "mask": torch.rand(8, 1, 32, 32), "label": y}
        out = batch_to_channels_last(batch)   # only out["image"] changes layout
    """
    if isinstance(exclude_keys, str):
        raise SettingTypeError(
            "`exclude_keys` must be an iterable of strings, not a single string; wrap it in a tuple."
        )
    words = tuple(str(w).lower() for w in exclude_keys)
    return _convert(batch, words)


def _convert(obj: Any, words: tuple[str, ...]) -> Any:
    if isinstance(obj, torch.Tensor):
        return _convert_inner(obj, words)
    try:
        return _convert_inner(obj, words)
    except (TypeError, ValueError, AttributeError, KeyError, AssertionError):
        # a container whose class will not be rebuilt (its own constructor, validators) is left as the loader gave
        # it; its tensors keep their layout, which only costs speed (anything else: the part steps aside)
        return obj


def _convert_inner(obj: Any, words: tuple[str, ...]) -> Any:
    if isinstance(obj, torch.Tensor):
        fmt = _format_for(obj)
        if fmt is None or obj.is_contiguous(memory_format=fmt):
            return obj
        return obj.contiguous(memory_format=fmt)
    if isinstance(obj, Mapping):
        items = {k: (v if _excluded(k, words) else _convert(v, words)) for k, v in obj.items()}
        try:
            return cast("Callable[[Any], Any]", type(obj))(items)
        except (TypeError, ValueError):  # mappings whose constructor takes something else (e.g. defaultdict)
            out = obj.copy() if hasattr(obj, "copy") else dict(obj)
            out.update(items)
            return out
    if isinstance(obj, tuple) and hasattr(obj, "_fields") and hasattr(obj, "_make"):  # namedtuple
        return obj._make(v if _excluded(f, words) else _convert(v, words) for f, v in zip(obj._fields, obj))
    if isinstance(obj, (list, tuple)):
        converted = [_convert(v, words) for v in obj]
        try:
            return type(obj)(converted)
        except (TypeError, ValueError):  # a sequence class whose constructor takes something else
            return converted if isinstance(obj, list) else tuple(converted)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if not f.init or _excluded(f.name, words):
                continue
            value = getattr(obj, f.name)
            new = _convert(value, words)
            if new is not value:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj
