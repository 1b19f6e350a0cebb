"""T22 fusion: ``torch.compile`` the model's inner modules, with a fallback to eager.

What it does: compiles chosen sub-modules in place with :func:`torch.compile` (through ``nn.Module.compile``,
so parameter names and ``state_dict`` keys do not change: no ``_orig_mod.`` prefix reaches a checkpoint).
Inductor fuses chains of element-wise ops (activation, bias, residual add, normalisation epilogues) into
single kernels. The first steps pay the compile time (tens of seconds per module), and each new input shape
may recompile.

Card: tip T22 ``fusion``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

Why inner modules and not the LightningModule: compiling the whole LightningModule also traces
``training_step`` with ``self.log`` and the trainer's machinery, which breaks or graph-breaks; the
modules that hold the parameters are where the maths is.

Failures: ``torch.compile`` is lazy, so a compiler error only shows at the first call (or at a
recompilation). Each compiled module is guarded: if its compiled call raises and the same call
succeeds in eager mode, the module switches to eager for good and a single
:class:`CompileFallbackWarning` carries the first line of the compiler's reason. Out-of-memory
errors (also wrapped in a compiler error) are raised as they are, never a reason to fall back. If eager raises
too, the error is the user's and eager's exception is raised. With ``strict=True`` the compiler's
exception is raised instead. (A failure while compiling the *backward* graph surfaces in
``loss.backward()``, outside the module call, and is not caught.)

Example::

    names = compile_modules(model)                                  # top-level children with parameters
    names = compile_modules(model, modules=["encoder"], mode="max-autotune", dynamic=False)
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.checkpointing import (
    Target,
    describe_unmatched,
    match_modules,
    normalize_targets,
)

__all__ = [
    "COMPILE_MODES",
    "CompileFallbackWarning",
    "compile_modules",
    "compile_status",
    "default_compile_targets",
    "eager_while",
    "find_out_of_memory",
    "uncompile_modules",
    "validate_compile_options",
]

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the module attribute that keeps why its compiled call failed (it then stays eager); a str, which
#: nn.Module's typed __setattr__ (Tensor or Module) does not admit, so it is set and read by name
_FALLBACK = "_lightning_speedups_compile_fallback"


class CompileFallbackWarning(UserWarning):
    """A compiled module failed to compile and now runs in eager mode."""


def _list_backends() -> list[str]:
    lister = getattr(getattr(torch, "compiler", None), "list_backends", None)
    if lister is None:  # pragma: no cover - torch < 2.2
        lister = torch._dynamo.list_backends  # private: the only lister before torch.compiler's
    return list(lister(exclude_tags=()))


def validate_compile_options(
    mode: str | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    backend: str | Callable[..., Any] = "inductor",
    strict: bool = False,
) -> None:
    """Raise ``ValueError`` / ``TypeError`` naming the bad argument."""
    if mode is not None and mode not in COMPILE_MODES:
        raise SettingError(f"`mode` must be None or one of {COMPILE_MODES}; got {mode!r}.")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise SettingTypeError(f"`dynamic` must be None, True or False; got {dynamic!r}.")
    if not isinstance(fullgraph, bool):
        raise SettingTypeError(f"`fullgraph` must be True or False; got {fullgraph!r}.")
    if not isinstance(strict, bool):
        raise SettingTypeError(f"`strict` must be True or False; got {strict!r}.")
    if isinstance(backend, str):
        known = _list_backends()
        if backend not in known:
            raise SettingError(f"`backend` {backend!r} is not a registered torch.compile backend; use one of {known}.")
    elif not callable(backend):
        raise SettingTypeError(f"`backend` must be a backend name (e.g. 'inductor') or a callable; got {backend!r}.")


def compiler_reason(err: BaseException) -> str:
    """``"<ExceptionType>: <first line>"`` of the innermost compiler error behind ``err``."""
    seen: set[int] = set()
    chain = [err]
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        nxt = getattr(cur, "inner_exception", None) or cur.__cause__
        if nxt is not None:
            chain.append(nxt)
        cur = nxt
    for exc in reversed(chain):
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        if lines:
            line = lines[0]
            return f"{type(exc).__name__}: {line[:300]}"
    return type(err).__name__


def find_out_of_memory(err: BaseException) -> BaseException | None:
    """The out-of-memory error that ``err`` is or wraps (Dynamo / Inductor wrap the backend's), else ``None``.

    An error of torch's out-of-memory type in the chain wins; else one whose message says so.
    """
    oom_types = tuple(
        t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
    )
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and all(cur is not seen for seen in chain):
        chain.append(cur)
        cur = getattr(cur, "inner_exception", None) or cur.__cause__
    for exc in chain:
        if isinstance(exc, (MemoryError, *oom_types)):
            return exc
    for exc in chain:
        msg = str(exc.args[0]) if exc.args else ""
        if "out of memory" in msg and ("CUDA" in msg or "HIP" in msg):
            return exc
    return None


class _GuardedCompiled:
    """Stored as the module's ``_compiled_call_impl``: the compiled call, with a fallback to eager."""

    def __init__(self, module: nn.Module, name: str, compiled: Callable[..., Any], strict: bool) -> None:
        self.module = module
        self.name = name
        self.compiled = compiled
        self.strict = strict
        self.fallback_reason: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.compiled(self.module, *args, **kwargs)
        except Exception as compile_err:
            # out of memory is the batch's, not the compiler's: a retry in eager would only hide it (and
            # leave the module eager for good); the largest-batch search needs to see it, unwrapped
            oom = find_out_of_memory(compile_err)
            if oom is not None and oom is not compile_err:
                raise oom from compile_err
            if self.strict or oom is not None:
                raise
            try:
                out = self.module._call_impl(*args, **kwargs)
            except Exception as eager_err:
                # eager fails as well: the error is in the model, not in the compiler
                eager_err.__suppress_context__ = True
                raise eager_err
            self.fallback_reason = compiler_reason(compile_err)
            self.module._compiled_call_impl = None  # private: where nn.Module.compile keeps it; None = eager
            setattr(self.module, _FALLBACK, self.fallback_reason)
            warnings.warn(
                f"torch.compile of module {self.name!r} ({type(self.module).__name__}) failed; it now runs in eager"
                f" mode. Reason: {self.fallback_reason}. Pass `strict=True` to raise instead.",
                CompileFallbackWarning,
                stacklevel=2,
            )
            return out


def _call_module(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # private: the module call with its hooks but without the compiled entry (see _entry_for)
    return module._call_impl(*args, **kwargs)


def _entry_for(name: str) -> Callable[..., Any]:
    """A fresh function (its own code object) that calls ``module._call_impl``.

    Why not ``nn.Module.compile()`` (``torch.compile(module._call_impl)``): Dynamo skips frames
    whose code lives in ``torch.nn``, so for built-in containers (an ``nn.Sequential`` of built-in
    layers) nothing gets compiled, silently. A frame from this package is traced, and Dynamo
    inlines ``_call_impl`` (hooks included) from there. Dynamo keeps its compiled-code cache and
    its recompilation limit per code object, so each module gets its own code object: modules do
    not use up each other's cache (train / eval / no-grad variants of one module are a few entries).
    """
    ident = "".join(ch if ch.isalnum() else "_" for ch in name) or "root"
    code = _call_module.__code__.replace(co_name=f"compiled_{ident}")
    return types.FunctionType(code, _call_module.__globals__, code.co_name)


def default_compile_targets(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The top-level children of ``model`` that hold parameters (losses and metrics without
    parameters are left eager; parameters registered directly on the root stay eager too)."""
    return [(n, m) for n, m in model.named_children() if any(True for _ in m.parameters())]


def compile_modules(
    model: nn.Module,
    modules: None | Target | Iterable[Target] = None,
    *,
    mode: str | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    backend: str | Callable[..., Any] = "inductor",
    strict: bool = False,
) -> list[str]:
    """Compile sub-modules of ``model`` in place with ``torch.compile``, guarded by an eager fallback.

    Idempotent: modules this function compiled before are skipped (their names are still
    returned); modules the user compiled with ``module.compile()`` are left as they are.
    ``state_dict`` keys do not change. A deep copy or pickle of the model is eager.

    Args:
        model: any ``nn.Module`` (typically a LightningModule; the root is never compiled).
        modules: which sub-modules: ``None`` (default) for the top-level children that hold
            parameters, else class(es), class names, or qualified-name globs / ``"re:<regex>"``
            as in :func:`~lightning_speedups.functional.checkpointing.checkpoint_modules`.
        mode: ``torch.compile`` mode (``None``, ``"default"``, ``"reduce-overhead"``,
            ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``).
        dynamic: ``torch.compile``'s ``dynamic`` (``None`` lets it decide after a shape change).
        fullgraph: make graph breaks errors.
        backend: compiler backend name or callable.
        strict: raise the compiler's error instead of falling back to eager.

    Returns:
        The qualified names of the compiled modules.

    Raises:
        ValueError: a ``modules`` entry matches nothing (the message lists the class names present),
            or a bad option.

    Example::

        names = compile_modules(lightning_module, mode="max-autotune")
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}.")
    validate_compile_options(mode, dynamic, fullgraph, backend, strict)
    if modules is None:
        chosen = default_compile_targets(model)
    else:
        targets = normalize_targets(modules, argument="modules")
        chosen, unmatched = match_modules(model, targets, argument="modules")
        if unmatched:
            raise SettingError(describe_unmatched(model, unmatched, "modules"))
    kwargs: dict[str, Any] = {"fullgraph": fullgraph, "dynamic": dynamic, "backend": backend}
    if mode is not None:
        kwargs["mode"] = mode
    names = []
    for name, module in chosen:
        current = getattr(module, "_compiled_call_impl", None)
        if isinstance(current, _GuardedCompiled):
            names.append(name)
            continue
        if current is not None:  # compiled by the user: leave it
            continue
        if getattr(module, _FALLBACK, None):
            continue  # failed before: stays eager
        compiled = torch.compile(_entry_for(name), **kwargs)
        module._compiled_call_impl = _GuardedCompiled(module, name, compiled, strict)
        names.append(name)
    return names


def compile_status(model: nn.Module) -> dict[str, str]:
    """``{qualified name: "compiled" | "eager: <reason>"}`` for the modules :func:`compile_modules` touched."""
    status = {}
    for name, module in model.named_modules():
        impl = getattr(module, "_compiled_call_impl", None)
        reason = getattr(module, _FALLBACK, None)
        if isinstance(impl, _GuardedCompiled):
            status[name] = "compiled"
        elif reason:
            status[name] = f"eager: {reason}"
    return status


def uncompile_modules(model: nn.Module) -> list[str]:
    """Put the modules compiled by :func:`compile_modules` back into eager mode; returns their names."""
    names = []
    for name, module in model.named_modules():
        if isinstance(getattr(module, "_compiled_call_impl", None), _GuardedCompiled):
            module._compiled_call_impl = None
            names.append(name)
    return names


@contextmanager
def eager_while(model: nn.Module) -> Iterator[list[str]]:
    """Run every compiled sub-module of ``model`` eagerly inside the block, compiled again after it.

    For trial runs at changing shapes (the largest-batch search): compiled, each trial size would
    recompile (tens of seconds each), use up Dynamo's recompilation limit and leave the batch
    dimension marked dynamic for the real run. Eager trials measure a peak at or above the compiled
    one (fusion frees intermediates), so a size that fits eagerly fits compiled. Covers the modules
    :func:`compile_modules` compiled and those compiled by ``module.compile()``. Yields their names.
    """
    saved = [
        (name, module, module._compiled_call_impl)  # private: where nn.Module.compile keeps the compiled call
        for name, module in model.named_modules()
        if getattr(module, "_compiled_call_impl", None) is not None
    ]
    for _, module, _ in saved:
        module._compiled_call_impl = None
    try:
        yield [name for name, _, _ in saved]
    finally:
        for _, module, impl in saved:
            if getattr(module, "_compiled_call_impl", None) is None and not getattr(module, _FALLBACK, None):
                module._compiled_call_impl = impl
