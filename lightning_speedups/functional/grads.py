"""T12 ``grads-to-none``: find gradients that were zeroed instead of set to ``None``.

Card
----
* **What it does.** :func:`find_zeroed_grads` looks at a model's (or a parameter list's) gradients at a
  moment where they should all be ``None`` (right after ``zero_grad``, before ``backward``) and reports
  every gradient that is a tensor instead, with how many are all zeros and how many bytes they hold.
  The :class:`~lightning_speedups.callbacks.grads.GradsToNoneCheck` callback calls it at that moment
  of a real training run.
* **Caveats.** Code that reads ``p.grad`` before ``backward`` and expects a tensor (e.g.
  ``p.grad.add_(...)``) needs a ``None`` check; a few optimizers treat a ``None`` gradient as "skip this
  parameter" (which is what you want for frozen parts).
* **Card.** Tip T12 ``grads-to-none``: its seeds, expected gain and when it hurts are stated once, in the
  tip's record (``python -m lightning_speedups tips``).

Examples:
    >>> import torch
    >>> model = torch.nn.Linear(4, 2)
    >>> model(torch.randn(3, 4)).sum().backward()
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> opt.zero_grad(set_to_none=False)
    >>> find_zeroed_grads(model).summary()
    '2 parameter gradient(s) are zero tensors instead of None (2 all zero, 40 B)'
    >>> opt.zero_grad()
    >>> find_zeroed_grads(model).found
    False
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Union

import torch
from torch import Tensor, nn

from lightning_speedups.errors import SettingTypeError
from lightning_speedups.functional.memory import format_bytes

__all__ = ["ZeroedGrads", "find_zeroed_grads"]

FIX = (
    "call `optimizer.zero_grad(set_to_none=True)` (the default since torch 2.0): in a LightningModule, "
    "remove the `optimizer_zero_grad` override or make it call `optimizer.zero_grad(set_to_none=True)`; "
    "for a custom optimizer, do not override `zero_grad` with a version that fills gradients with zeros"
)


@dataclass
class ZeroedGrads:
    """Gradients found as tensors where ``None`` was expected.

    Attributes:
        names: names of the parameters whose ``.grad`` is a tensor.
        all_zero: how many of them are all zeros (the signature of ``zero_grad(set_to_none=False)``).
        nbytes: bytes held by those gradients.
        total: parameters that require gradients.
    """

    names: list[str] = field(default_factory=list)
    all_zero: int = 0
    nbytes: int = 0
    total: int = 0

    @property
    def found(self) -> bool:
        """``True`` when at least one gradient is a tensor."""
        return bool(self.names)

    def summary(self) -> str:
        """One line of evidence."""
        if not self.found:
            return f"all {self.total} gradients are None"
        return (
            f"{len(self.names)} parameter gradient(s) are zero tensors instead of None "
            f"({self.all_zero} all zero, {format_bytes(self.nbytes)})"
        )


def find_zeroed_grads(params: Union[nn.Module, Iterable[Tensor]], *, check_values: bool = True) -> ZeroedGrads:
    """Report parameters whose ``.grad`` is a tensor at a moment where it should be ``None``.

    Call it right after ``optimizer.zero_grad()`` (or at the start of a step, before ``backward``).

    Args:
        params: a module (its named parameters are used) or an iterable of parameters.
        check_values: also count how many of the gradients are all zeros (one device reduction for all
            of them; set ``False`` to avoid any synchronisation).

    Returns:
        A :class:`ZeroedGrads`.
    """
    named: list[tuple[str, Tensor]]
    if isinstance(params, nn.Module):
        named = list(params.named_parameters())
    elif isinstance(params, Tensor):
        raise SettingTypeError(
            "`params` must be a module or an iterable of parameters, got a single Tensor; wrap it in a list."
        )
    else:
        try:
            named = [(f"param{i}", p) for i, p in enumerate(params)]
        except TypeError:
            raise SettingTypeError(
                f"`params` must be a module or an iterable of parameters, got {type(params).__name__}."
            ) from None
    report = ZeroedGrads()
    grads = []
    for name, p in named:
        if not isinstance(p, Tensor):
            raise SettingTypeError(f"`params` must hold tensors, got {type(p).__name__} for {name!r}.")
        if not p.requires_grad:
            continue
        report.total += 1
        if p.grad is not None:
            report.names.append(name)
            report.nbytes += p.grad.numel() * p.grad.element_size()
            grads.append(p.grad)
    if grads and check_values:
        with torch.no_grad():
            # private: a sparse grad's stored values without coalescing it (public values() needs coalesce)
            flags = [
                (g._values() if g.is_sparse else g).abs().amax() == 0 if g.numel() else torch.tensor(True)
                for g in grads
            ]
            report.all_zero = int(torch.stack([f.to(flags[0].device) for f in flags]).sum().item())
    return report
