"""One static inspection of a model, shared by ``doctor`` and ``bench``.

:func:`inspect_model` asks each part's own planning function what it would do to the model (which
conv biases fold into a BatchNorm, which modules hold image-shaped weights and in which layout, which
blocks ``checkpointing.targets: [auto]`` wraps, which sub-modules ``compile.enabled`` compiles, which
sizes miss the tensor-core multiple) and changes nothing. The doctor's
:func:`~lightning_speedups.inspection.facts.collect_static` fills its facts from the result; bench
reads the same result through :class:`~lightning_speedups.inspection.setup.SetupInfo`.

A part whose inspection raises on the user's model (an unusual ``forward``, a module that refuses
``named_modules``) leaves its field at ``None`` and the reason in :attr:`ModelFacts.errors`, under
the part's name: ``"modules"``, ``"conv_bias"``, ``"channels_last"``, ``"checkpointing"``,
``"compile"``, ``"alignment"``.

Example::

    facts = inspect_model(model, "cpu")
    facts.conv_bias_plan.pairs        # the (conv, norm) pairs ConvBiasRemoval would fold
    facts.checkpoint_candidates       # ["layers.0", "layers.1", ...]
    facts.errors                      # {} when every part could read the model
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from lightning_speedups.functional import (
    auto_checkpoint_targets,
    channels_last_candidates,
    compile_status,
    default_compile_targets,
    find_misaligned,
    is_checkpointed,
    plan_conv_bias_removal,
)

__all__ = ["PARTS", "ModelFacts", "error_text", "inspect_model"]

#: The parts :func:`inspect_model` runs, in order (the keys of :attr:`ModelFacts.errors`).
PARTS = ("modules", "conv_bias", "channels_last", "checkpointing", "compile", "alignment")

T = TypeVar("T")


def error_text(err: BaseException) -> str:
    """``"TypeName: first line of the message"``."""
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {first}".strip()


@dataclass
class ModelFacts:
    """What the parts' planning functions say about one model (``None``: that part could not tell).

    Attributes:
        model: the model's class name.
        device: ``"cpu"`` or ``"cuda"``: where it will train.
        n_params: number of parameters.
        module_counts: module class name -> how many.
        data_parallel_modules: modules wrapped in ``nn.DataParallel`` (``<root>`` for the model).
        conv_bias_plan: :func:`~lightning_speedups.functional.plan_conv_bias_removal`'s plan.
        channels_last_modules: ``(name, class, layout)`` of each module with 4D/5D weights; layout is
            ``"channels_last"``, ``"nchw"`` or ``"neutral"`` (the same memory in both layouts).
        checkpointed: modules already under activation checkpointing.
        checkpoint_candidates: blocks ``checkpointing.targets: [auto]`` would wrap.
        compile_status: ``{name: "compiled" | "eager: <reason>"}`` of the compiled modules (the
            pack's and those the user compiled with ``module.compile()``).
        compile_targets: sub-modules ``compile.enabled`` would compile.
        misaligned: sizes that miss the tensor-core multiple of 8.
        errors: part -> why its inspection failed (``"TypeName: message"``).
    """

    model: str = ""
    device: str = "cpu"
    n_params: int | None = None
    module_counts: dict[str, int] | None = None
    data_parallel_modules: list[str] | None = None
    conv_bias_plan: Any = None
    channels_last_modules: list[tuple[str, str, str]] | None = None
    checkpointed: list[str] | None = None
    checkpoint_candidates: list[str] | None = None
    compile_status: dict[str, str] | None = None
    compile_targets: list[str] | None = None
    misaligned: list[Any] | None = None
    errors: dict[str, str] = field(default_factory=dict)


def inspect_model(
    model: nn.Module,
    device: str = "cpu",
    *,
    batch_size: int | None = None,
    input_shape: Sequence[int] | None = None,
) -> ModelFacts:
    """Inspect ``model`` with each part's own planning function; nothing is changed.

    Args:
        model: the built model (a LightningModule or any ``nn.Module``).
        device: where it trains (``"cpu"`` / ``"cuda"``), kept for the callers' plans.
        batch_size: the batch size, for the alignment check (``None``: unknown).
        input_shape: one input's shape, for the alignment check (``None``: unknown).

    Returns:
        A :class:`ModelFacts`; a part that raised on the model leaves its fields ``None`` and its
        reason in ``errors``.
    """
    facts = ModelFacts(model=type(model).__name__, device=device)

    def part(name: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception as err:
            facts.errors.setdefault(name, error_text(err))
            return None

    modules = part("modules", lambda: _modules(model))
    if modules is not None:
        facts.n_params, facts.module_counts, facts.data_parallel_modules = modules
    facts.conv_bias_plan = part("conv_bias", lambda: plan_conv_bias_removal(model))
    facts.channels_last_modules = part("channels_last", lambda: _channels_last_modules(model))
    checkpointing = part("checkpointing", lambda: _checkpointing(model))
    if checkpointing is not None:
        facts.checkpointed, facts.checkpoint_candidates = checkpointing
    facts.compile_status = part("compile", lambda: _compile_status(model))
    facts.compile_targets = part("compile", lambda: [n for n, _ in default_compile_targets(model)])
    facts.misaligned = part(
        "alignment", lambda: find_misaligned(model, batch_size=batch_size, input_shape=input_shape, multiple=8)
    )
    return facts


def _modules(model: nn.Module) -> tuple[int, dict[str, int], list[str]]:
    counts: dict[str, int] = {}
    for m in model.modules():
        counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
    n_params = sum(p.numel() for p in model.parameters())
    data_parallel = [n or "<root>" for n, m in model.named_modules() if isinstance(m, nn.DataParallel)]
    return n_params, counts, data_parallel


def _channels_last_modules(model: nn.Module) -> list[tuple[str, str, str]]:
    out = []
    for name in channels_last_candidates(model):
        module = model.get_submodule(name)
        params = [p for p in module.parameters(recurse=False) if p.is_floating_point() and p.dim() in (4, 5)]
        layouts = set()
        for p in params:
            fmt = torch.channels_last if p.dim() == 4 else torch.channels_last_3d
            cl, plain = p.is_contiguous(memory_format=fmt), p.is_contiguous()
            layouts.add("neutral" if cl and plain else "channels_last" if cl else "nchw")
        if "nchw" in layouts:
            layout = "nchw"
        elif "channels_last" in layouts:
            layout = "channels_last"
        else:
            layout = "neutral"
        out.append((name, type(module).__name__, layout))
    return out


def _checkpointing(model: nn.Module) -> tuple[list[str], list[str]]:
    done = [n for n, m in model.named_modules() if is_checkpointed(m)]
    candidates = [n for n, _ in auto_checkpoint_targets(model)]
    return done, candidates


def _compile_status(model: nn.Module) -> dict[str, str]:
    status = compile_status(model)
    for name, m in model.named_modules():  # compiled by the user with module.compile()
        if name not in status and getattr(m, "_compiled_call_impl", None) is not None:
            status[name] = "compiled"
    return status
