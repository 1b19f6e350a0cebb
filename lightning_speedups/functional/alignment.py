"""T23 ``multiple-of-8``: find sizes that keep tensor cores from running at full speed, pad them.

Card
----
* **What it does.** :func:`find_misaligned` lists the dimensions that become GEMM sizes on the GPU
  (``Linear`` in/out features, per-group ``Conv`` channels, ``Embedding`` sizes, attention head sizes,
  the batch size and the input's sequence / spatial sizes) that are not multiples of ``multiple``, each
  with the next multiple as a suggestion. :func:`pad_embedding` and :func:`pad_linear_out` pad a
  vocabulary / output-class dimension with the outputs for the real classes unchanged.
* **Caveats.** Padding adds compute for the padded rows (tiny) and changes parameter shapes, so
  checkpoints of the unpadded layer are padded on load (the padded modules do it themselves).
* **Card.** Tip T23 ``multiple-of-8``: its seeds, expected gain and when it hurts are stated once, in the
  tip's record (``python -m lightning_speedups tips``).

Padded logits (design choice): :func:`pad_linear_out` defaults to ``logits="slice"``: the matmul runs
with the aligned size and the extra columns are sliced away, so the module's output has exactly the
real number of classes and every loss, metric and ``argmax`` downstream is untouched. ``logits="mask"``
keeps the aligned width and adds ``-inf`` to the padded logits through a non-persistent *buffer*
(never a parameter: weight decay or AdamW would turn a ``-inf`` parameter into NaN); softmax, argmax and
cross-entropy over the real classes are unchanged, but label smoothing (which gives mass to every
column) and code that reads the class count from ``logits.shape[-1]`` are not: use ``"slice"`` there.

Examples:
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Embedding(50257, 768), nn.Linear(768, 50257))
    >>> [str(f) for f in find_misaligned(model, batch_size=12)]  # doctest: +NORMALIZE_WHITESPACE
    ['0.num_embeddings = 50257 -> 50264', '1.out_features = 50257 -> 50264', 'batch_size = 12 -> 16']
    >>> head = pad_linear_out(model[1])
    >>> head.weight.shape[0], head(torch.zeros(1, 768)).shape[-1]
    (50264, 50257)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.nn.modules.conv import _ConvNd  # private: no public base of all convolutions

from lightning_speedups.errors import SettingError, SettingTypeError

__all__ = [
    "Misalignment",
    "PaddedEmbedding",
    "PaddedLinear",
    "find_misaligned",
    "pad_embedding",
    "pad_linear_out",
    "round_up",
]


def round_up(value: int, multiple: int = 8) -> int:
    """Smallest multiple of ``multiple`` that is ``>= value``.

    Examples:
        >>> round_up(50257, 64)
        50304
    """
    return int(math.ceil(value / multiple) * multiple)


@dataclass(frozen=True)
class Misalignment:
    """One size that is not a multiple of the alignment.

    Attributes:
        where: qualified module name, or ``"batch"`` / ``"input"``.
        what: the attribute (``"out_features"``, ``"in_channels/groups"``, ``"batch_size"``, ``"dim 2"``).
        value: the size now.
        suggested: the next multiple.
        note: why it may not matter, when that is known (e.g. the 3 colour channels of a first conv).
    """

    where: str
    what: str
    value: int
    suggested: int
    note: str = ""

    def __str__(self) -> str:
        name = self.what if self.where == "batch" else f"{self.where}.{self.what}"
        text = f"{name} = {self.value} -> {self.suggested}"
        return f"{text} ({self.note})" if self.note else text


def _check_multiple(multiple: Any) -> int:
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise SettingError(f"`multiple` must be a positive int (8 for fp16/bf16, 16 for int8), got {multiple!r}.")
    return multiple


def find_misaligned(
    model: nn.Module,
    batch_size: Optional[int] = None,
    input_shape: Optional[Sequence[int]] = None,
    multiple: int = 8,
) -> list[Misalignment]:
    """List the sizes that tensor cores would use and that are not multiples of ``multiple``.

    Checked: ``Linear`` ``in_features``/``out_features``; ``Conv``/``ConvTranspose`` input and output
    channels per group (depthwise convs are skipped: they never use tensor cores); ``Embedding``
    ``num_embeddings`` (matters where an output layer mirrors the vocabulary) and ``embedding_dim``;
    ``MultiheadAttention`` ``embed_dim`` and head size; the batch size (the GEMM ``M`` of every layer);
    and, from ``input_shape`` (one batch, batch dimension first), the sequence length of a model without
    convolutions or the spatial sizes of a model with them.

    Args:
        model: any ``nn.Module``.
        batch_size: the training batch size (defaults to ``input_shape[0]`` when that is given).
        input_shape: shape of one input batch, e.g. ``(32, 3, 224, 224)`` or ``(8, 512)``.
        multiple: the alignment, 8 for fp16/bf16 tensor cores.

    Returns:
        One :class:`Misalignment` per size, in module order, then batch and input sizes.

    Examples:
        >>> find_misaligned(nn.Linear(64, 10))[0].suggested
        16
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}.")
    multiple = _check_multiple(multiple)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise SettingError(f"`batch_size` must be a positive int or None, got {batch_size!r}.")
    if input_shape is not None:
        if isinstance(input_shape, Tensor):
            input_shape = tuple(input_shape.shape)
        if not isinstance(input_shape, Sequence) or not all(isinstance(d, int) and d > 0 for d in input_shape):
            raise SettingError(
                f"`input_shape` must be a sequence of positive ints (one batch, batch first), got {input_shape!r}."
            )
        if batch_size is None and len(input_shape) > 0:
            batch_size = input_shape[0]

    found: list[Misalignment] = []

    def add(where: str, what: str, value: int, note: str = "") -> None:
        if value % multiple:
            found.append(Misalignment(where, what, value, round_up(value, multiple), note))

    has_conv = has_gemm = False
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            has_gemm = True
            add(name, "in_features", m.in_features)
            add(name, "out_features", m.out_features)
        elif isinstance(m, _ConvNd):
            has_conv = has_gemm = True
            if m.groups > 1 and m.groups == m.in_channels:
                continue  # depthwise: no tensor cores anyway
            cin, cout = m.in_channels // m.groups, m.out_channels // m.groups
            per = "/groups" if m.groups > 1 else ""
            note = "input channels of an image: cuDNN handles 3, pad to 4 or 8 with channels_last" if cin <= 4 else ""
            add(name, f"in_channels{per}", cin, note)
            add(name, f"out_channels{per}", cout)
        elif isinstance(m, nn.Embedding):
            has_gemm = True
            add(name, "num_embeddings", m.num_embeddings)
            add(name, "embedding_dim", m.embedding_dim)
        elif isinstance(m, nn.MultiheadAttention):
            has_gemm = True
            add(name, "embed_dim", m.embed_dim)
            add(name, "head_dim", m.head_dim)
    if has_gemm and batch_size is not None:
        add("batch", "batch_size", batch_size)
    if input_shape is not None and has_gemm and len(input_shape) > 1:
        dims = range(2, len(input_shape)) if has_conv else range(1, len(input_shape))
        for d in dims:
            note = "spatial size" if has_conv else "sequence length (or feature size)"
            add("input", f"dim {d}", input_shape[d], note)
    return found


# ------------------------------------------------------------------------------------------ padding


def _pad_rows_on_load(module: nn.Module, state_dict: dict, prefix: str, names: Sequence[str]) -> None:
    """Pad smaller (unpadded) tensors of a checkpoint with zero rows to this module's padded size."""
    for name in names:
        key = prefix + name
        own = getattr(module, name, None)
        value = state_dict.get(key)
        if (
            isinstance(own, Tensor)
            and isinstance(value, Tensor)
            and value.dim() == own.dim()
            and value.shape[0] < own.shape[0]
        ):
            if value.shape[1:] == own.shape[1:]:
                pad = value.new_zeros((own.shape[0] - value.shape[0], *value.shape[1:]))
                state_dict[key] = torch.cat([value, pad])


class PaddedLinear(nn.Linear):
    """A ``Linear`` whose output size is padded to an aligned size; see :func:`pad_linear_out`.

    Attributes:
        real_out_features: the number of real outputs (classes).
        logits: ``"slice"`` (output has ``real_out_features`` columns) or ``"mask"`` (aligned width, the
            padded columns are ``-inf``).
    """

    logit_mask: Tensor  # a buffer, registered in __init__

    def __init__(
        self,
        in_features: int,
        real_out_features: int,
        multiple: int = 8,
        bias: bool = True,
        logits: str = "slice",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(in_features, round_up(real_out_features, multiple), bias=bias, device=device, dtype=dtype)
        if logits not in ("slice", "mask"):
            raise SettingError(f"`logits` must be 'slice' or 'mask', got {logits!r}.")
        self.real_out_features = real_out_features
        self.logits = logits
        mask = torch.zeros(self.out_features, device=device, dtype=dtype)
        mask[real_out_features:] = float("-inf")
        self.register_buffer("logit_mask", mask, persistent=False)

    def forward(self, input: Tensor) -> Tensor:
        out = F.linear(input, self.weight, self.bias)
        if self.logits == "slice":
            return out[..., : self.real_out_features]
        return out + self.logit_mask.to(out.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, real_out_features={self.real_out_features}, logits={self.logits!r}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        _pad_rows_on_load(self, state_dict, prefix, ("weight", "bias"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class PaddedEmbedding(nn.Embedding):
    """An ``Embedding`` with a padded number of rows; see :func:`pad_embedding`.

    Attributes:
        real_num_embeddings: the real vocabulary size; ids at or above it are never looked up.
    """

    def __init__(self, real_num_embeddings: int, embedding_dim: int, multiple: int = 8, **kwargs: Any) -> None:
        super().__init__(round_up(real_num_embeddings, multiple), embedding_dim, **kwargs)
        self.real_num_embeddings = real_num_embeddings

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, real_num_embeddings={self.real_num_embeddings}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        _pad_rows_on_load(self, state_dict, prefix, ("weight",))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def pad_embedding(embedding: nn.Embedding, multiple: int = 8) -> nn.Embedding:
    """Pad an embedding's vocabulary (``num_embeddings``) to a multiple of ``multiple``.

    The real rows are copied, the padded rows are zero; lookups of real ids return the same vectors
    and get the same gradients. An already aligned embedding is returned unchanged. A state dict of the
    unpadded embedding loads into the padded one (zero rows are appended on load). Tied weights: pad
    the embedding, then tie the output layer to the new ``weight``.

    Args:
        embedding: the ``nn.Embedding`` to pad.
        multiple: the alignment.

    Returns:
        A :class:`PaddedEmbedding` (or ``embedding`` itself when already aligned).

    Examples:
        >>> emb = pad_embedding(nn.Embedding(10, 4))
        >>> emb.num_embeddings, emb.real_num_embeddings
        (16, 10)
    """
    if not isinstance(embedding, nn.Embedding):
        raise SettingTypeError(f"`embedding` must be an nn.Embedding, got {type(embedding).__name__}.")
    multiple = _check_multiple(multiple)
    if embedding.num_embeddings % multiple == 0:
        return embedding
    w = embedding.weight
    new = PaddedEmbedding(
        embedding.num_embeddings,
        embedding.embedding_dim,
        multiple,
        padding_idx=embedding.padding_idx,
        max_norm=embedding.max_norm,
        norm_type=embedding.norm_type,
        scale_grad_by_freq=embedding.scale_grad_by_freq,
        sparse=embedding.sparse,
        device=w.device,
        dtype=w.dtype,
    )
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: embedding.num_embeddings].copy_(w)
    new.weight.requires_grad_(w.requires_grad)
    new.train(embedding.training)
    return new


def pad_linear_out(linear: nn.Linear, multiple: int = 8, *, logits: str = "slice") -> nn.Linear:
    """Pad a linear layer's ``out_features`` (vocabulary, classes) to a multiple of ``multiple``.

    The real rows are copied, the padded rows (weight and bias) are zero. With ``logits="slice"`` (the
    default) the output keeps exactly the real number of columns: outputs and gradients are those of the
    original layer. With ``logits="mask"`` the output has the aligned width and the padded logits are
    ``-inf`` (softmax, argmax and cross-entropy of the real classes unchanged; see the module doc for
    when not to use it). An already aligned layer is returned unchanged.

    Args:
        linear: the ``nn.Linear`` to pad.
        multiple: the alignment.
        logits: ``"slice"`` or ``"mask"``.

    Returns:
        A :class:`PaddedLinear` (or ``linear`` itself when already aligned).

    Examples:
        >>> head = pad_linear_out(nn.Linear(16, 10), logits="mask")
        >>> head(torch.zeros(2, 16)).shape
        torch.Size([2, 16])
    """
    if not isinstance(linear, nn.Linear):
        raise SettingTypeError(f"`linear` must be an nn.Linear, got {type(linear).__name__}.")
    multiple = _check_multiple(multiple)
    if logits not in ("slice", "mask"):
        raise SettingError(
            f"`logits` must be 'slice' (output sliced to the real classes) or 'mask' (-inf padded logits), got {logits!r}."
        )
    if linear.out_features % multiple == 0:
        return linear
    w = linear.weight
    new = PaddedLinear(
        linear.in_features,
        linear.out_features,
        multiple,
        bias=linear.bias is not None,
        logits=logits,
        device=w.device,
        dtype=w.dtype,
    )
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: linear.out_features].copy_(w)
        if linear.bias is not None:
            new.bias.zero_()
            new.bias[: linear.out_features].copy_(linear.bias)
    new.train(linear.training)
    return new
