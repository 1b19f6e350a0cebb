"""T09 activation checkpointing: recompute chosen sub-modules' activations in the backward pass.

What it does: the chosen sub-modules run under non-reentrant :func:`torch.utils.checkpoint.checkpoint`
(``use_reentrant=False``): their inner activations are freed after the forward pass and recomputed during the
backward pass, so only each block's inputs stay in memory. Outputs and gradients are unchanged (the RNG state
is replayed, so dropout draws the same mask; BatchNorm running statistics are updated once, not again during
the recomputation). Spend the memory on a larger batch or model.

Card: tip T09 ``activation-checkpointing``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

How the wrapping works: the module object stays where it is, with its class and its parameter
names; only its ``forward`` is replaced by an instance attribute that calls the original under
checkpointing (when gradients are enabled). Consequently ``state_dict`` keys do not change: a
checkpoint of the plain model loads into the wrapped one and vice versa, optimizers and DDP see the
same parameters, and ``torch.compile`` traces through it (Dynamo turns the call into its checkpoint
higher-order op).

Example::

    names = checkpoint_modules(model, "auto")                 # the repeated blocks
    names = checkpoint_modules(model, [TransformerEncoderLayer])
    names = checkpoint_modules(model, "encoder.layers.*")     # glob on qualified names
    names = checkpoint_modules(model, "re:blocks\\.[0-5]")    # regex on qualified names
"""

from __future__ import annotations

import contextlib
import fnmatch
import inspect
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Union

import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.checkpoint import checkpoint

from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.tree import tensors_in

__all__ = ["Target", "auto_checkpoint_targets", "checkpoint_modules", "is_checkpointed", "match_modules"]

Target = Union[str, type]
_MARK = "_lightning_speedups_checkpointed"


# --------------------------------------------------------------------------------------------------
# target matching (shared with functional.compile)
# --------------------------------------------------------------------------------------------------


def normalize_targets(targets: Any, argument: str = "targets") -> list[Target]:
    """Validate ``targets`` (a class, a string, or a list of them) and return them as a list.

    Raises:
        TypeError: a target that is neither a class nor a string (the message names ``argument``).
        ValueError: an empty list (the message names ``argument``).
    """
    if isinstance(targets, (str, type)):
        targets = [targets]
    try:
        items = list(targets)
    except TypeError:
        raise SettingTypeError(
            f"`{argument}` must be a class name, an nn.Module subclass, a qualified-name pattern or a list of them;"
            f" got {type(targets).__name__}."
        ) from None
    if not items:
        raise SettingError(f"`{argument}` is empty; give at least one class, class name or name pattern (or 'auto').")
    for t in items:
        if isinstance(t, type):
            if not issubclass(t, nn.Module):
                raise SettingTypeError(
                    f"`{argument}` holds the class {t.__name__}, which is not an nn.Module subclass."
                )
        elif isinstance(t, str):
            if not t:
                raise SettingError(f"`{argument}` holds an empty string; give a class name or a name pattern.")
            if t.startswith("re:"):
                try:
                    re.compile(t[3:])
                except re.error as err:
                    raise SettingError(f"`{argument}` holds the invalid regular expression {t!r}: {err}.") from None
        else:
            raise SettingTypeError(
                f"`{argument}` items must be strings or nn.Module subclasses; got {t!r} ({type(t).__name__})."
            )
    return items


def _matches(target: Target, name: str, module: nn.Module) -> bool:
    if isinstance(target, type):
        return isinstance(module, target)
    if target.startswith("re:"):
        return re.fullmatch(target[3:], name) is not None
    cls = type(module)
    if target in (cls.__name__, f"{cls.__module__}.{cls.__qualname__}"):
        return True
    return name == target or fnmatch.fnmatchcase(name, target)


def match_modules(
    model: nn.Module, targets: Sequence[Target], *, outermost: bool = True, argument: str = "targets"
) -> tuple[list[tuple[str, nn.Module]], list[Target]]:
    """Find the sub-modules (never the root) that match any of ``targets``.

    A string matches a module whose class name (``"Block"``) or full class path
    (``"mypkg.model.Block"``) is that string, or whose qualified name matches it as a glob
    (``"encoder.layers.*"``) or, with the prefix ``"re:"``, as a full regular expression. A class
    matches its instances (subclasses included).

    Args:
        model: the model to search.
        targets: normalized targets (see :func:`normalize_targets`).
        outermost: when a module and one of its ancestors both match, keep only the ancestor.

    Returns:
        ``(matches, unmatched)``: the ``(qualified name, module)`` pairs in registration order, and
        the targets that matched nothing.
    """
    hits: list[tuple[str, nn.Module]] = []
    used: set[int] = set()
    for name, module in model.named_modules():
        if name == "":
            continue
        for i, target in enumerate(targets):
            if _matches(target, name, module):
                used.add(i)
                hits.append((name, module))
                break
    if outermost:
        kept: list[tuple[str, nn.Module]] = []
        for name, module in hits:
            if not any(name.startswith(k + ".") for k, _ in kept):
                kept.append((name, module))
        hits = kept
    unmatched = [t for i, t in enumerate(targets) if i not in used]
    return hits, unmatched


def module_class_names(model: nn.Module, limit: int = 12) -> list[str]:
    """The most common class names among the model's sub-modules (for error messages)."""
    counts = Counter(type(m).__name__ for n, m in model.named_modules() if n)
    return [name for name, _ in counts.most_common(limit)]


def describe_unmatched(model: nn.Module, unmatched: Sequence[Target], argument: str) -> str:
    shown = ", ".join(t.__name__ if isinstance(t, type) else repr(t) for t in unmatched)
    names = ", ".join(module_class_names(model)) or "(none: the model has no sub-modules)"
    examples = ", ".join(repr(n) for n, _ in list(model.named_children())[:5])
    return (
        f"`{argument}` entry {shown} matches no sub-module of {type(model).__name__}. Class names present: {names}."
        f" Top-level names: {examples or '(none)'} (patterns match qualified names, e.g. 'layers.*',"
        " or use 're:<regex>')."
    )


# --------------------------------------------------------------------------------------------------
# "auto": the repeated blocks
# --------------------------------------------------------------------------------------------------


def auto_checkpoint_targets(model: nn.Module, trainable_only: bool = True) -> list[tuple[str, nn.Module]]:
    """The blocks that ``targets="auto"`` checkpoints.

    Rule: look at the children of every ``nn.ModuleList`` / ``nn.Sequential`` in the model. A
    *block* is such a child that has sub-modules of its own and trainable parameters (so a single
    ``Linear`` or ``Conv2d`` is never a block, nor a block of a frozen backbone). Among the block classes that occur at least twice
    as siblings in one container, pick the class with the most instances overall (ties: the most
    parameters), and return all its instances found in those containers, outermost only.
    Transformers get their layers (``encoder.layers.0``, ...), ResNets all their residual blocks
    (across ``layer1`` ... ``layer4``). An empty list means nothing repeats. ``trainable_only=False`` counts frozen
    blocks too (to say why a frozen backbone gets none).
    """
    per_class: dict[type, list[tuple[str, nn.Module]]] = {}
    for cname, container in model.named_modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(container.named_children())
        counts = Counter(type(c) for _, c in children)
        for child_name, child in children:
            cls = type(child)
            if counts[cls] < 2 or not any(True for _ in child.children()):
                continue
            if not any(p.requires_grad or not trainable_only for p in child.parameters()):
                continue  # frozen (or no parameters): recomputing it saves no memory a trained block would
            qual = f"{cname}.{child_name}" if cname else child_name
            per_class.setdefault(cls, []).append((qual, child))
    if not per_class:
        return []

    def score(item: tuple[type, list[tuple[str, nn.Module]]]) -> tuple[int, int]:
        _, blocks = item
        return len(blocks), sum(p.numel() for _, b in blocks for p in b.parameters())

    _, blocks = max(per_class.items(), key=score)
    kept: list[tuple[str, nn.Module]] = []
    for name, module in sorted(blocks, key=lambda b: b[0].count(".")):
        if not any(name.startswith(k + ".") for k, _ in kept):
            kept.append((name, module))
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    return sorted(kept, key=lambda b: order[b[0]])


# --------------------------------------------------------------------------------------------------
# the wrapping
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _recompute_context(module: nn.Module) -> Iterator[None]:
    """During the recomputation, BatchNorm running statistics are not updated a second time.

    The running buffers are swapped for throw-away copies while the block is recomputed (the
    recomputed values are identical: in training mode BatchNorm normalises with the batch
    statistics), then the originals are put back, so each step updates them exactly once, as
    without checkpointing.
    """
    swapped = []
    for m in module.modules():
        # private: _NormBase is the only common base of the norms with running stats; the buffers are swapped
        # as objects in _buffers because setattr would copy into the registered buffer
        if isinstance(m, nn.modules.batchnorm._NormBase) and m.training and m.track_running_stats:
            originals = {}
            for key in ("running_mean", "running_var", "num_batches_tracked"):
                buf = m._buffers.get(key)
                if buf is not None:
                    originals[key] = buf
                    m._buffers[key] = buf.clone()
            swapped.append((m, originals))
    try:
        yield
    finally:
        for m, originals in swapped:
            m._buffers.update(originals)


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    return bool(torch._dynamo.is_compiling())  # private: torch < 2.3 has no torch.compiler.is_compiling


def _has_batchnorm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._NormBase) for m in module.modules())


class CheckpointWatch:
    """What a trial step saw of the checkpointed modules (:func:`watch_checkpointed`): which change their inputs in
    place (the recomputation in backward would see other inputs than the forward did), whose recomputed output
    differs from the first, and whose output takes no gradient (recomputing it saves nothing).

    Attributes:
        problems: per module, why checkpointing it is not safe or does not pay.
        seen: the modules that ran under checkpointing in the trial.
    """

    def __init__(self) -> None:
        self.problems: dict[nn.Module, str] = {}
        self.seen: list[nn.Module] = []
        self._first: dict[int, list[torch.Tensor]] = {}
        self._calls: dict[int, int] = {}

    def flag(self, module: nn.Module, why: str) -> None:
        self.problems.setdefault(module, why)

    def forward_ran(self, module: nn.Module, outputs: list[torch.Tensor]) -> None:
        """``_forward`` of ``module`` returned ``outputs``: the first call is the forward, the second the
        recomputation in backward, compared with the first."""
        calls = self._calls.get(id(module), 0) + 1
        self._calls[id(module)] = calls
        if calls == 1:
            self._first[id(module)] = [t.detach().clone() for t in outputs]
            return
        first = self._first.get(id(module), [])
        same = len(first) == len(outputs) and all(
            a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b.detach(), *_tolerance(a.dtype))
            for a, b in zip(first, outputs)
        )
        if not same:
            self.flag(module, "its recomputed output differs from its first (the forward depends on state it changes)")


def _tolerance(dtype: torch.dtype) -> tuple[float, float, bool]:
    """``(rtol, atol, equal_nan)`` for comparing a recomputed output with the first, in ``dtype``."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2, 1e-3, True
    return 1e-5, 1e-6, True


_WATCH: list[CheckpointWatch] = []


@contextlib.contextmanager
def watch_checkpointed() -> Iterator[CheckpointWatch]:
    """Inside, every checkpointed module's call is checked (:class:`CheckpointWatch`), and recomputation runs whole
    (no early stop) so that its output can be compared with the first.

    Examples:
        >>> class Mutating(nn.Module):  # updates the dict it is given
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.lin = nn.Linear(4, 4)
        ...     def forward(self, data):
        ...         data["h"] = data["h"] + self.lin(data["h"])
        ...         return data
        >>> model = nn.Sequential(Mutating(), Mutating())
        >>> _ = checkpoint_modules(model, "auto")
        >>> with watch_checkpointed() as watch:
        ...     _ = model({"h": torch.randn(2, 4, requires_grad=True)})
        >>> sorted(set(watch.problems.values()))
        ["changes its inputs in place (data['h'] replaced): recomputing it in backward would see other inputs"]
    """
    watch = CheckpointWatch()
    _WATCH.append(watch)
    try:
        with torch.utils.checkpoint.set_checkpoint_early_stop(False):
            yield watch
    finally:
        _WATCH.remove(watch)


def _argument_names(module: nn.Module, inner: Any) -> list[str]:
    try:
        params = inspect.signature(inner if inner is not None else type(module).forward).parameters
    except (TypeError, ValueError):  # a builtin or an odd callable: positions are named by number
        return []
    return [name for name in params if name != "self"]


def _inputs_signature(names: list[str], args: Any, kwargs: Any) -> dict[str, tuple[int, int]]:
    """``{path: (id, version)}`` of what a call was given: the objects in its containers and the tensors' version
    counters (an in-place op bumps them), read without rebuilding anything."""
    out: dict[str, tuple[int, int]] = {}
    stack: list[tuple[str, Any, int]] = [
        (names[i] if i < len(names) else f"args[{i}]", value, 0) for i, value in enumerate(args)
    ]
    stack += [(key, value, 0) for key, value in kwargs.items()]
    while stack and len(out) < 10_000:
        path, item, depth = stack.pop()
        if isinstance(item, torch.Tensor):
            out[path] = (id(item), item._version)
            continue
        if depth > 6:
            continue
        if isinstance(item, dict):
            for key, value in list(item.items()):
                out[f"{path}[{key!r}]"] = (id(value), -1)
                stack.append((f"{path}[{key!r}]", value, depth + 1))
        elif isinstance(item, (list, tuple)):
            for i, value in enumerate(list(item)):
                out[f"{path}[{i}]"] = (id(value), -1)
                stack.append((f"{path}[{i}]", value, depth + 1))
    return out


def _changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    paths = sorted(set(before) | set(after))
    return [p for p in paths if before.get(p) != after.get(p)]


class _CheckpointedForward:
    """The replacement ``forward``: the original forward under non-reentrant checkpointing.

    A small picklable object (not a closure), so a wrapped model still deep-copies and pickles.
    """

    def __init__(self, module: nn.Module, inner: Callable[..., Any] | None) -> None:
        self.module = module
        self.inner = inner  # an instance-level forward that was there before (else the class's)
        self.batchnorm = _has_batchnorm(module)
        setattr(self, _MARK, True)

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.inner is not None:
            out = self.inner(*args, **kwargs)
        else:
            out = type(self.module).forward(self.module, *args, **kwargs)
        if _WATCH:
            _WATCH[-1].forward_ran(self.module, tensors_in(out))
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self._forward(*args, **kwargs)
        extra: dict[str, Any] = {}
        if self.batchnorm and not _is_compiling():
            # Dynamo supports only the default context_fn; under compile the functional graph
            # applies the running-statistics update once anyway.
            module = self.module
            extra["context_fn"] = lambda: (contextlib.nullcontext(), _recompute_context(module))
        if not _WATCH:
            return checkpoint(self._forward, *args, use_reentrant=False, **extra, **kwargs)
        watch = _WATCH[-1]
        watch.seen.append(self.module)
        names = _argument_names(self.module, self.inner)
        before = _inputs_signature(names, args, kwargs)
        out = checkpoint(self._forward, *args, use_reentrant=False, **extra, **kwargs)
        changed = _changed(before, _inputs_signature(names, args, kwargs))
        if changed:
            shown = ", ".join(changed[:3]) + (", ..." if len(changed) > 3 else "")
            watch.flag(
                self.module,
                f"changes its inputs in place ({shown} replaced): recomputing it in backward would see other inputs",
            )
        elif not any(t.requires_grad for t in tensors_in(out)):
            watch.flag(self.module, "its output takes no gradient: recomputing it saves no memory")
        return out


def is_checkpointed(module: nn.Module) -> bool:
    """Whether :func:`checkpoint_modules` has wrapped this module."""
    return getattr(module.__dict__.get("forward"), _MARK, False)


def checkpoint_modules(model: nn.Module, targets: Target | Iterable[Target] = "auto") -> list[str]:
    """Run the chosen sub-modules of ``model`` under non-reentrant activation checkpointing.

    In place and idempotent: a module already wrapped is not wrapped again (a second call returns
    the same names and changes nothing). When a module and one of its descendants both match, only
    the outer one is wrapped. The root module itself is never wrapped. Checkpointing only applies
    when gradients are enabled; under ``torch.no_grad()`` / inference the module runs as usual.

    Args:
        model: any ``nn.Module`` (a LightningModule included).
        targets: ``"auto"`` (see :func:`auto_checkpoint_targets`), or one or a list of: an
            ``nn.Module`` subclass (its instances), a class name (``"TransformerEncoderLayer"``) or
            full class path, a glob on qualified module names (``"encoder.layers.*"``), or
            ``"re:<regex>"`` matched in full against qualified names.

    Returns:
        The qualified names of the checkpointed modules (wrapped now or before).

    Raises:
        ValueError: when an explicit target matches no sub-module (the message lists the class
            names present), or ``targets`` is empty. ``"auto"`` finding nothing returns ``[]``.
        TypeError: for targets of the wrong kind.

    Example::

        >>> model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.GELU()) for _ in range(3)])
        >>> checkpoint_modules(model, "auto")
        ['0', '1', '2']
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module; got {type(model).__name__}.")
    items = normalize_targets(targets)
    found: list[tuple[str, nn.Module]] = []
    explicit = [t for t in items if t != "auto"]
    if "auto" in items:
        found.extend(auto_checkpoint_targets(model))
    if explicit:
        hits, unmatched = match_modules(model, explicit)
        if unmatched:
            raise SettingError(describe_unmatched(model, unmatched, "targets"))
        found.extend(hits)
    # de-duplicate and keep outermost only
    found.sort(key=lambda nm: nm[0].count("."))
    chosen: list[tuple[str, nn.Module]] = []
    for name, module in found:
        if any(name == k or name.startswith(k + ".") for k, _ in chosen):
            continue
        chosen.append((name, module))
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    chosen.sort(key=lambda nm: order[nm[0]])

    names = []
    for name, module in chosen:
        wrap_module(module)
        names.append(name)
    return names


def wrap_module(module: nn.Module) -> None:
    """Run one module under checkpointing (what :func:`checkpoint_modules` does to each module it chose)."""
    if not is_checkpointed(module):
        inner = module.__dict__.get("forward")
        # nn.Module.__setattr__ would not register a plain callable; store it as an instance attribute
        object.__setattr__(module, "forward", _CheckpointedForward(module, inner))


def unwrap_module(module: nn.Module) -> bool:
    """Undo :func:`wrap_module` on one module; ``False`` when it was not checkpointed."""
    fwd = module.__dict__.get("forward")
    if fwd is None or not getattr(fwd, _MARK, False):
        return False
    if fwd.inner is not None:
        object.__setattr__(module, "forward", fwd.inner)
    else:
        del module.__dict__["forward"]
    return True


def uncheckpoint_modules(model: nn.Module) -> list[str]:
    """Undo :func:`checkpoint_modules` on every wrapped sub-module; returns their names."""
    return [name for name, module in model.named_modules() if unwrap_module(module)]


__all__ += [
    "CheckpointWatch",
    "describe_unmatched",
    "module_class_names",
    "normalize_targets",
    "uncheckpoint_modules",
    "unwrap_module",
    "watch_checkpointed",
    "wrap_module",
]
