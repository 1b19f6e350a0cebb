"""T15 adaptive gradient clipping (AGC), unit-wise, as in the NFNet paper (Brock et al., 2021).

For every *unit* ``i`` of a parameter ``W`` with gradient ``G``::

    max_norm_i = clipping * max(||W_i||, eps)
    G_i <- G_i * max_norm_i / ||G_i||      if ||G_i|| > max_norm_i, else G_i unchanged

Units (the convention of the paper's reference code, ``deepmind-research/nfnets``, and of timm's
``adaptive_clip_grad``): a parameter with two or more dimensions is split along dimension 0 (one
unit per output unit: a row of a ``Linear`` weight ``(out, in)``, an output channel of a ``Conv``
weight ``(out, in, *kernel)``, a row of an ``Embedding`` table); the norm of a unit is taken over all
its other dimensions. A 0-D or 1-D parameter (bias, norm gain, scalar gain) is one unit: its whole
vector. ``eps`` keeps zero-initialised parameters (zero-init residual gains, a freshly zeroed layer)
from having their gradients clipped to zero: their units may still move by ``clipping * eps``.

The paper clips every layer except the final classifier; :func:`agc_parameters` selects the
parameters of a module minus name patterns, and the callback
:class:`~lightning_speedups.callbacks.agc.AdaptiveGradientClipping` applies it after unscaling and
before each optimizer step.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Optional, Union

import torch
from torch import Tensor, nn

from lightning_speedups.errors import SettingError

__all__ = ["adaptive_clip_grad_", "agc_parameters", "unitwise_norm", "matches_any"]

_TensorOrTensors = Union[Tensor, Iterable[Tensor]]


def unitwise_norm(x: Tensor) -> Tensor:
    """L2 norm of each unit of ``x``: one value for a 0-D / 1-D tensor, else one per index of dim 0.

    The result is float32 (or float64 for a float64 input) and broadcasts against ``x``
    (``keepdim=True`` for tensors with two or more dimensions).

    Example::

        >>> unitwise_norm(torch.ones(3, 4)).flatten().tolist()
        [2.0, 2.0, 2.0]
    """
    x = x.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    if x.ndim <= 1:
        return torch.linalg.vector_norm(x)
    return torch.linalg.vector_norm(x, dim=tuple(range(1, x.ndim)), keepdim=True)


@torch.no_grad()
def adaptive_clip_grad_(
    parameters: _TensorOrTensors,
    clipping: float = 0.01,
    eps: float = 1e-3,
    *,
    grad_eps: float = 1e-6,
) -> None:
    """Clip the gradients of ``parameters`` in place, unit-wise, relative to the parameters' norms.

    What it does: adaptive gradient clipping (AGC) of Brock et al., 2021 ("High-Performance Large-Scale Image
    Recognition Without Normalization"): each unit's gradient norm is capped at ``clipping`` times that unit's
    weight norm (at least ``eps``). No host-device synchronisation: the decision is a ``torch.where`` on the
    device.

    Card: tip T15 ``grad-clipping``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        parameters: a tensor or an iterable of tensors whose ``.grad`` is clipped; tensors without a
            gradient are skipped.
        clipping: the clipping factor ``lambda`` (> 0), the largest allowed ratio of a unit's gradient
            norm to its weight norm.
        eps: the smallest weight norm used for a unit (>= 0), so that zero-initialised units can still
            receive a gradient of norm ``clipping * eps``.
        grad_eps: floor of the gradient norm in the division (numerical safety only; a unit whose
            gradient norm is below its ``max_norm`` is never scaled).

    Example::

        >>> model = nn.Linear(4, 2)
        >>> model(torch.randn(8, 4)).pow(2).sum().backward()
        >>> adaptive_clip_grad_(model.parameters(), clipping=0.01)
        >>> bool((unitwise_norm(model.weight.grad) <= 0.01 * unitwise_norm(model.weight) * (1 + 1e-5)).all())
        True
    """
    if isinstance(clipping, bool) or not isinstance(clipping, (int, float)) or not clipping > 0:
        raise SettingError(f"`clipping` must be a positive number (the paper uses 0.01 to 0.16); got {clipping!r}.")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise SettingError(f"`eps` must be a number >= 0 (default 1e-3); got {eps!r}.")
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    for p in parameters:
        g = p.grad
        if g is None:
            continue
        if g.is_sparse:
            raise RuntimeError(
                "adaptive_clip_grad_ does not support sparse gradients; exclude this parameter "
                "(e.g. an nn.Embedding with sparse=True) from clipping."
            )
        max_norm = unitwise_norm(p).clamp_(min=eps).mul_(clipping)
        grad_norm = unitwise_norm(g)
        scale = torch.where(grad_norm > max_norm, max_norm / grad_norm.clamp(min=grad_eps), 1.0)
        g.detach().mul_(scale.to(g.dtype))


def matches_any(names: Sequence[str], patterns: Iterable[str]) -> bool:
    """Whether any of ``names`` matches any glob ``pattern`` (``fnmatch``, case-sensitive)."""
    return any(fnmatch.fnmatchcase(name, pat) for name in names for pat in patterns)


def _name_variants(param_name: str) -> list[str]:
    """The names a pattern may match for a parameter ``a.b.fc.weight``.

    The full parameter name, its module path (``a.b.fc``), and every module name on that path
    (``a``, ``b``, ``fc``) and every dotted suffix of it (``b.fc``, ``fc``).
    """
    parts = param_name.split(".")
    module_parts = parts[:-1]
    variants = [param_name]
    if module_parts:
        variants.append(".".join(module_parts))
        variants.extend(".".join(module_parts[i:]) for i in range(1, len(module_parts)))
        variants.extend(module_parts)
    return variants


def agc_parameters(module: nn.Module, exclude: Optional[Iterable[str]] = None) -> tuple[list[Tensor], list[str]]:
    """Split the trainable parameters of ``module`` into those to clip and the names excluded.

    A pattern (a glob, e.g. ``"fc"``, ``"head*"``, ``"classifier.*"``) excludes a parameter when it
    matches the parameter's full name (``"backbone.fc.weight"``), its module path
    (``"backbone.fc"``), a dotted suffix of that path (``"fc"``) or any single module name on it. So
    ``"fc"`` excludes ``fc.weight`` and ``head.fc.bias`` but not ``fc1.weight``.

    Returns:
        ``(parameters to clip, names of the excluded parameters)``.

    Example::

        >>> net = nn.Sequential()
        >>> net.add_module("body", nn.Linear(4, 4)); net.add_module("fc", nn.Linear(4, 2))
        >>> params, excluded = agc_parameters(net, exclude=["fc"])
        >>> len(params), excluded
        (2, ['fc.weight', 'fc.bias'])
    """
    patterns = tuple(exclude or ())
    keep: list[Tensor] = []
    excluded: list[str] = []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if patterns and matches_any(_name_variants(name), patterns):
            excluded.append(name)
        else:
            keep.append(p)
    return keep, excluded
