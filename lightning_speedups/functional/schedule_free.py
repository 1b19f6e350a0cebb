"""T01: a schedule-free twin of a torch optimizer (the ``schedulefree`` package), without Lightning.

Schedule-free optimizers (Defazio et al., "The Road Less Scheduled", 2024) replace a learning-rate schedule
by interpolation and averaging: the weights the gradient is taken at (``y``) differ from the weights to
evaluate (``x``), so the optimizer has a train and an eval mode (``optimizer.train()`` / ``optimizer.eval()``).

- :func:`why_not_schedule_free` says why an optimizer has no faithful twin (``None`` when it has one);
- :func:`schedule_free_twin` builds the twin with the optimizer's own hyper-parameters, group by group;
- :func:`is_schedule_free` tells a schedule-free optimizer (it has the two modes).

Examples:
    >>> import torch
    >>> net = torch.nn.Linear(2, 1)
    >>> twin, notes = schedule_free_twin(torch.optim.AdamW(net.parameters(), lr=3e-4), warmup_steps=10)
    >>> type(twin).__name__, twin.param_groups[0]["lr"], twin.param_groups[0]["warmup_steps"], notes
    ('AdamWScheduleFree', 0.0003, 10, [])
    >>> why_not_schedule_free(torch.optim.RMSprop(net.parameters()))
    'RMSprop has no schedule-free twin (Adam, AdamW and SGD with momentum have one)'
"""

from __future__ import annotations

from typing import Any, Optional

import schedulefree
import torch

from lightning_speedups.errors import SettingError

#: keys of a torch Adam / AdamW / SGD parameter group that the twin takes over or that have no twin; any other
#: key of a group (a name the user gave it) is kept on the twin's group as it is
_TORCH_KEYS = frozenset(
    {
        "params",
        "lr",
        "betas",
        "eps",
        "weight_decay",
        "amsgrad",
        "maximize",
        "foreach",
        "fused",
        "capturable",
        "differentiable",
        "decoupled_weight_decay",
        "momentum",
        "dampening",
        "nesterov",
        "initial_lr",
    }
)


def is_schedule_free(optimizer: Any) -> bool:
    """Whether ``optimizer`` is schedule-free: it has a train and an eval mode (``train()`` / ``eval()`` and a
    ``train_mode`` flag per parameter group), as every optimizer of the ``schedulefree`` package has."""
    groups = list(getattr(optimizer, "param_groups", None) or ())
    return (
        bool(groups)
        and callable(getattr(optimizer, "train", None))
        and callable(getattr(optimizer, "eval", None))
        and all("train_mode" in g for g in groups)
    )


def _kind(optimizer: torch.optim.Optimizer) -> Optional[str]:
    """``"adam"``, ``"adamw"`` or ``"sgd"`` for exactly those torch classes (a subclass may change the step)."""
    return {torch.optim.Adam: "adam", torch.optim.AdamW: "adamw", torch.optim.SGD: "sgd"}.get(type(optimizer))


def why_not_schedule_free(optimizer: torch.optim.Optimizer) -> Optional[str]:
    """Why ``optimizer`` has no faithful schedule-free twin, in a phrase; ``None`` when it has one.

    A twin exists for torch's own ``Adam`` and ``AdamW`` (``AdamWScheduleFree``) and ``SGD`` with a momentum in
    (0, 1) and no dampening (``SGDScheduleFree``); not for ``amsgrad``, ``maximize`` or ``differentiable``
    groups, which the twins do not implement.
    """
    name = type(optimizer).__name__
    if is_schedule_free(optimizer):
        return f"{name} is schedule-free already"
    kind = _kind(optimizer)
    if kind is None:
        return f"{name} has no schedule-free twin (Adam, AdamW and SGD with momentum have one)"
    for group in optimizer.param_groups:
        for flag in ("amsgrad", "maximize", "differentiable"):
            if group.get(flag):
                return f"{name}({flag}=True) has no schedule-free twin"
        if kind == "sgd":
            momentum = group.get("momentum", 0)
            if not 0 < momentum < 1:
                return (
                    f"SGD with momentum={momentum:g}: its schedule-free twin needs a momentum in (0, 1)"
                    " (SGD(..., momentum=0.9))"
                )
            if group.get("dampening", 0):
                return f"SGD with dampening={group['dampening']:g} has no schedule-free twin"
        if kind == "adam" and group.get("decoupled_weight_decay"):
            continue  # torch >= 2.6: Adam(decoupled_weight_decay=True) is AdamW
    return None


def schedule_free_twin(
    optimizer: torch.optim.Optimizer, warmup_steps: int = 0, lr_scale: float = 1.0
) -> tuple[torch.optim.Optimizer, list[str]]:
    """The schedule-free twin of ``optimizer`` over the same parameters, group by group, and what it could not
    carry over exactly (one phrase each).

    Each group keeps its learning rate (times ``lr_scale``: the ``schedulefree`` authors find 1-10x the
    scheduled rate right for AdamW, 10-50x for SGD), ``betas`` / ``momentum``, ``eps`` and ``weight_decay``.
    ``AdamWScheduleFree`` decays the weights decoupled, as ``AdamW`` does; plain ``Adam``'s ``weight_decay`` is
    an L2 term added to the gradient before its normalisation, which no twin has: its value is carried as the
    decoupled decay, and said in the notes. ``SGDScheduleFree`` adds its decay to the gradient as ``SGD`` does.
    ``nesterov`` has no twin of its own: the schedule-free interpolation takes its place (noted). The twin
    starts in train mode, with no state (the optimizer is swapped before its first step).

    Raises:
        SettingError: the optimizer has no twin (:func:`why_not_schedule_free` says why).
    """
    why = why_not_schedule_free(optimizer)
    if why is not None:
        raise SettingError(f"no schedule-free twin: {why}")
    kind = _kind(optimizer)
    notes: list[str] = []
    groups: list[dict[str, Any]] = []
    for group in optimizer.param_groups:
        lr = group["lr"]
        extra = {k: v for k, v in group.items() if k not in _TORCH_KEYS}
        new: dict[str, Any] = {
            **extra,
            "params": group["params"],
            "lr": lr * lr_scale if lr_scale != 1.0 else lr,
            "weight_decay": group.get("weight_decay", 0.0),
            "warmup_steps": warmup_steps,
        }
        if kind == "sgd":
            new["momentum"] = group["momentum"]
            if group.get("nesterov") and "nesterov" not in " ".join(notes):
                notes.append("nesterov has no schedule-free twin: the interpolation of y between z and x replaces it")
        else:
            new["betas"] = tuple(group["betas"])
            new["eps"] = group["eps"]
            if kind == "adam" and new["weight_decay"] and not group.get("decoupled_weight_decay"):
                text = (
                    f"Adam's weight_decay={new['weight_decay']:g} is an L2 term added to the gradient;"
                    " AdamWScheduleFree decays decoupled (as AdamW), with the same value"
                )
                if text not in notes:
                    notes.append(text)
        groups.append(new)
    twin: Any  # the schedulefree package is untyped; its optimizers have train() / eval()
    if kind == "sgd":
        twin = schedulefree.SGDScheduleFree(groups, lr=groups[0]["lr"], momentum=groups[0]["momentum"])
    else:
        twin = schedulefree.AdamWScheduleFree(groups, lr=groups[0]["lr"])
    twin.train()
    return twin, notes
