"""T17: catch autograd graphs built during evaluation (forward hooks and step outputs)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lightning_speedups.errors import SettingTypeError
from lightning_speedups.functional.tree import walk_tensors

__all__ = ["EvalGradEvent", "EvalGradWatch", "tensors_requiring_grad"]


def tensors_requiring_grad(obj: Any, prefix: str = "outputs") -> list[tuple[str, torch.Tensor]]:
    """The tensors inside ``obj`` that carry an autograd graph (``requires_grad``).

    Examples:
        >>> w = torch.ones(2, requires_grad=True)
        >>> [p for p, _ in tensors_requiring_grad({"loss": (w * 2).sum(), "n": torch.ones(1)})]
        ["outputs['loss']"]
    """
    return [(p, t) for p, t in walk_tensors(obj, prefix) if t.requires_grad]


@dataclass(frozen=True)
class EvalGradEvent:
    """A forward of a sub-module that built an autograd graph during evaluation."""

    module_name: str
    module_type: str
    grad_fn: str

    def describe(self) -> str:
        return f"{self.module_type} '{self.module_name or '<root>'}' built an autograd graph (grad_fn={self.grad_fn})"


class EvalGradWatch:
    """Forward hooks that catch sub-modules building an autograd graph (tip T17).

    A forward counts when grad mode is on *and* an output requires grad: only then does autograd
    keep activations alive and record a graph. Grad mode on with nothing requiring grad (a frozen
    model) costs nothing and is not reported.

    Args:
        module: the model to watch; hooks go on every sub-module that owns parameters.

    Examples:
        >>> model = torch.nn.Linear(2, 2)
        >>> with EvalGradWatch(model) as watch, torch.no_grad():
        ...     _ = model(torch.ones(1, 2))
        >>> watch.events
        []
    """

    def __init__(self, module: nn.Module) -> None:
        if not isinstance(module, nn.Module):
            raise SettingTypeError(f"`module` must be a torch.nn.Module, got {type(module).__name__}.")
        self.module = module
        self.events: list[EvalGradEvent] = []
        self._seen: set[str] = set()
        self._handles: list[Any] = []

    def attach(self) -> EvalGradWatch:
        if self._handles:
            return self
        for name, sub in self.module.named_modules():
            if any(True for _ in sub.parameters(recurse=False)):
                self._handles.append(sub.register_forward_hook(functools.partial(self._hook, name)))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def _hook(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        if name in self._seen or not torch.is_grad_enabled():
            return
        found = tensors_requiring_grad(output)
        if found:
            self._seen.add(name)
            grad_fn = type(found[0][1].grad_fn).__name__ if found[0][1].grad_fn is not None else "leaf"
            self.events.append(EvalGradEvent(name, type(module).__name__, grad_fn))

    def __enter__(self) -> EvalGradWatch:
        return self.attach()

    def __exit__(self, *exc: Any) -> None:
        self.detach()
