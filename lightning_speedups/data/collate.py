"""Zero-copy collate: numpy samples become one batch tensor with exactly one copy.

Card: tip T13 ``zero-copy``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

* **What it does.** :func:`zero_copy_collate` is a drop-in ``collate_fn``. For numpy samples it
  allocates the batch tensor once (in shared memory inside a worker, so the batch reaches the main
  process without another copy) and writes the samples straight into it with ``np.stack(...,
  out=...)``: one copy, no per-sample ``torch.tensor`` copies. Tensors are stacked the same way;
  everything else (numbers, strings, dicts, tuples, dataclass-free structures) is handled as
  :func:`torch.utils.data.default_collate` does. :func:`zero_copy_convert` is the ``collate_fn``
  for ``batch_size=None`` loaders (the dataset returns whole batches): it wraps numpy arrays
  with ``torch.from_numpy`` and copies nothing. :func:`as_tensor_no_copy` is the single-array form.
* **Caveats.** Never slower than ``default_collate``; a tensor made by ``from_numpy`` shares
  memory with the array, so writing to one changes the other (the batch tensor is a fresh copy).

Examples:
    >>> import numpy as np
    >>> batch = zero_copy_collate([(np.ones((2, 2), np.float32), 1), (np.zeros((2, 2), np.float32), 0)])
    >>> batch[0].shape, batch[1].tolist()
    (torch.Size([2, 2, 2]), [1, 0])
"""

from __future__ import annotations

import collections.abc
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import default_collate, get_worker_info

from lightning_speedups.errors import BadInput, SettingTypeError

__all__ = [
    "CollateTypeError",
    "as_tensor_no_copy",
    "zero_copy_collate",
    "zero_copy_convert",
]


class CollateTypeError(BadInput, TypeError):
    """A sample holds something that cannot become a tensor batch (the user's data: bad input)."""


def as_tensor_no_copy(array: np.ndarray) -> torch.Tensor:
    """A tensor that shares memory with ``array`` (no copy), when numpy allows it.

    Arrays with negative strides (``arr[::-1]``), non-native byte order or object dtype cannot be
    shared; they are copied once, with ``np.ascontiguousarray``. A read-only array is shared too
    (PyTorch warns that writing to the tensor would be undefined; the warning is silenced here
    because the loader never writes).

    Examples:
        >>> import numpy as np
        >>> a = np.arange(4.0)
        >>> t = as_tensor_no_copy(a)
        >>> t.data_ptr() == a.ctypes.data
        True
    """
    if not isinstance(array, np.ndarray):
        raise SettingTypeError(f"`array` must be a numpy array, got {type(array).__name__}.")
    if array.dtype == object or array.dtype.kind in "USV":
        raise CollateTypeError(
            f"numpy array of dtype {array.dtype} cannot become a tensor; convert it in the dataset first."
        )
    if any(s < 0 for s in array.strides) or not array.dtype.isnative:
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
    if not array.flags.writeable:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(array)
    return torch.from_numpy(array)


def _empty_batch(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The batch tensor, in shared memory when built inside a worker process."""
    if get_worker_info() is not None:
        numel = 1
        for s in shape:
            numel *= s
        # private: the shared-memory allocation torch's default_collate makes in workers; no public API
        storage = torch.UntypedStorage._new_shared(numel * torch.empty((), dtype=dtype).element_size())
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape)  # type: ignore[call-overload]  # stubs lack set_(storage, offset, size) (stride defaults)
    return torch.empty(shape, dtype=dtype)


def _stack_numpy(arrays: list[np.ndarray]) -> torch.Tensor:
    first = arrays[0]
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.shape != first.shape or a.dtype != first.dtype:
            raise CollateTypeError(
                "zero_copy_collate needs numpy samples of one shape and dtype to batch them; got "
                f"{first.shape}/{first.dtype} and "
                f"{getattr(a, 'shape', type(a).__name__)}/{getattr(a, 'dtype', '')}. Resize or pad in the dataset."
            )
    if first.dtype == object or first.dtype.kind in "USV":
        raise CollateTypeError(f"numpy arrays of dtype {first.dtype} cannot become a tensor batch.")
    dtype = torch.from_numpy(np.empty(0, dtype=first.dtype.newbyteorder("="))).dtype
    out = _empty_batch((len(arrays), *first.shape), dtype)
    np.stack(arrays, out=out.numpy())  # the one copy
    return out


def _stack_tensors(tensors: list[torch.Tensor]) -> torch.Tensor:
    first = tensors[0]
    if any(t.shape != first.shape for t in tensors):
        raise CollateTypeError(
            f"zero_copy_collate needs tensors of one shape to batch them; got {tuple(first.shape)} and "
            f"{next(tuple(t.shape) for t in tensors if t.shape != first.shape)}. Resize or pad in the dataset."
        )
    out = _empty_batch((len(tensors), *first.shape), first.dtype)
    torch.stack(tensors, out=out)
    return out


def zero_copy_collate(batch: list[Any]) -> Any:
    """``collate_fn`` that batches numpy samples with one copy (see the module card).

    Args:
        batch: the samples of one batch, as the dataset returned them.

    Returns:
        The same structure as a sample with every leaf batched: numpy arrays and tensors become
        one tensor, numbers a 1-D tensor, strings a list.

    Raises:
        CollateTypeError: for samples that cannot become a tensor batch (ragged shapes, objects),
            naming what was found and the fix.

    Examples:
        >>> import numpy as np
        >>> zero_copy_collate([{"x": np.zeros(3, np.uint8)}] * 2)["x"].dtype
        torch.uint8
    """
    if not isinstance(batch, (list, tuple)) or len(batch) == 0:
        raise CollateTypeError(f"collate_fn expects a non-empty list of samples, got {type(batch).__name__}.")
    elem = batch[0]
    if isinstance(elem, np.ndarray) and elem.dtype != object:
        return _stack_numpy(list(batch))
    if isinstance(elem, torch.Tensor):
        return _stack_tensors(list(batch))
    if isinstance(elem, collections.abc.Mapping):
        try:
            return cast("Callable[[Any], Any]", type(elem))({k: zero_copy_collate([d[k] for d in batch]) for k in elem})
        except TypeError:
            return {k: zero_copy_collate([d[k] for d in batch]) for k in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(zero_copy_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence) and not isinstance(elem, (str, bytes)):
        if any(len(s) != len(elem) for s in batch):
            raise CollateTypeError("each sample in the batch must have the same number of fields.")
        return [zero_copy_collate(list(s)) for s in zip(*batch)]
    try:
        return default_collate(list(batch))
    except TypeError as ex:
        raise CollateTypeError(
            f"zero_copy_collate cannot batch samples of type {type(elem).__module__}.{type(elem).__qualname__}:"
            f" {ex} Convert them to numpy arrays or tensors in the dataset."
        ) from ex


def zero_copy_convert(data: Any) -> Any:
    """``collate_fn`` for ``batch_size=None`` loaders: numpy arrays become tensors without a copy.

    Examples:
        >>> import numpy as np
        >>> a = np.zeros((4, 3), np.float32)
        >>> zero_copy_convert({"x": a})["x"].data_ptr() == a.ctypes.data
        True
    """
    if isinstance(data, np.ndarray) and data.dtype != object and data.dtype.kind not in "USV":
        return as_tensor_no_copy(data)
    if isinstance(data, torch.Tensor):
        return data
    if isinstance(data, collections.abc.Mapping):
        try:
            return cast("Callable[[Any], Any]", type(data))({k: zero_copy_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: zero_copy_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(zero_copy_convert(v) for v in data))
    if isinstance(data, (list, tuple)):
        return [zero_copy_convert(v) for v in data]
    return data
