"""The machinery of the shared property suite: cases from the registry, parts from a case, tiny fits,
the maths probe and a model fingerprint.

A *case* here is one :class:`~lightning_speedups.tips.record.SuiteCase` of one tip (:class:`Entry`);
its *parts* are what the case builds: Trainer arguments, start-up notes and callbacks from its
``settings`` (exactly as presets build them), or the one callback of ``callback``, or the functional
part of ``function`` applied to the model.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from lightning_speedups.callbacks import SpeedupCallback, SpeedupsSummary
from lightning_speedups.callbacks.safeguard import Safeguard
from lightning_speedups.presets import parse_speedups
from lightning_speedups.tips.record import SuiteCase
from suite.kinds import SuiteModel, seeded
from suite.namespace import NAMESPACE, Callback, pl

ACCELERATOR = "cpu"
#: Trainer arguments of every suite fit: tiny, quiet, nothing written but the checkpoints we ask for
QUIET: dict[str, Any] = dict(
    accelerator=ACCELERATOR,
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
    limit_val_batches=0,
    max_epochs=-1,
)


# ---------------------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Entry:
    """One suite case of one tip."""

    tip_id: str
    case: SuiteCase
    setting_paths: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.tip_id}-{self.case.name}"


def registry_entries() -> list[Entry]:
    """Every suite case of every tip of the registry, in registry order."""
    from lightning_speedups.tips import TIPS

    return [Entry(tip.id, case, tuple(s.path for s in tip.settings)) for tip in TIPS for case in tip.suite]


def nest(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"lr_schedule.name": "onecycle"}`` -> ``{"lr_schedule": {"name": "onecycle"}}``."""
    out: dict[str, Any] = {}
    for dotted, value in settings.items():
        *groups, key = dotted.split(".")
        node = out
        for group in groups:
            node = node.setdefault(group, {})
            if not isinstance(node, dict):
                raise ValueError(f"setting {dotted!r} is inside {group!r}, which another setting sets to a value")
        node[key] = copy.deepcopy(value)
    return out


# ---------------------------------------------------------------------------------------------- parts
@dataclass
class Parts:
    """What one or more cases build for one fit (fresh objects: build again for every Trainer)."""

    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: list[tuple[str, bool, str]] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    functions: list[Callable[[Any], Any]] = field(default_factory=list)

    @property
    def pack_callbacks(self) -> list[SpeedupCallback]:
        """The pack's part callbacks (the start-up summary is not a part: it never reports a status; the Safeguard
        is not a tip's part either: it acts only where a part needs a trial, and tests/test_never_worse.py holds it)."""
        return [
            cb
            for cb in self.callbacks
            if isinstance(cb, SpeedupCallback) and not isinstance(cb, (SpeedupsSummary, Safeguard))
        ]


def build_parts(*cases: SuiteCase) -> Parts:
    """Build the parts of ``cases`` together: their settings merged into one ``speedups:`` section
    (as composed presets are), plus their callbacks and functions."""
    settings: dict[str, Any] = {}
    extra_trainer: dict[str, Any] = {}
    parts = Parts()
    for case in cases:
        if sum(bool(x) for x in (case.settings, case.callback, case.function)) != 1:
            raise AssertionError(f"case {case.name!r}: exactly one of settings, callback, function must be given")
        for key, value in case.settings.items():
            if key in settings and settings[key] != value:
                raise AssertionError(f"cases disagree on {key!r}: {settings[key]!r} vs {value!r}")
            settings[key] = value
        extra_trainer.update(case.trainer)
        if case.callback is not None:
            parts.callbacks.append(case.callback())
        if case.function is not None:
            parts.functions.append(case.function)
    if settings:
        speedups = parse_speedups(nest(settings), source="suite case")
        kwargs, notes = speedups.trainer_kwargs(accelerator=ACCELERATOR, lightning=NAMESPACE)
        parts.trainer_kwargs.update(kwargs)
        parts.notes.extend(notes)
        parts.callbacks = list(speedups.callbacks(notes, accelerator=ACCELERATOR)) + parts.callbacks
    parts.trainer_kwargs.update(extra_trainer)
    return parts


# ---------------------------------------------------------------------------------------------- fits
def make_trainer(
    model: SuiteModel,
    parts: Parts,
    steps: int,
    root: Optional[str] = None,
    extra_callbacks: Sequence[Callback] = (),
    **overrides: Any,
) -> pl.Trainer:
    """A quiet CPU Trainer that runs ``steps`` training *batches* of ``model`` with ``parts``.

    ``max_steps`` counts optimizer steps, so a kind that steps two optimizers per batch gets twice as many.
    """
    kwargs = {**QUIET, "max_steps": steps * model.steps_per_batch, **parts.trainer_kwargs, **overrides}
    if root is not None:
        kwargs["default_root_dir"] = root
    return pl.Trainer(callbacks=[*parts.callbacks, *extra_callbacks], **kwargs)


def fit(
    model: SuiteModel,
    parts: Parts,
    steps: int,
    root: Optional[str] = None,
    ckpt_path: Optional[str] = None,
    extra_callbacks: Sequence[Callback] = (),
    **overrides: Any,
) -> pl.Trainer:
    """Fit ``model`` for ``steps`` batches with ``parts`` and return the Trainer."""
    trainer = make_trainer(model, parts, steps, root, extra_callbacks, **overrides)
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer


def apply_functions(model: SuiteModel, parts: Parts) -> list[Any]:
    """Apply the functional parts to ``model`` in place; their results."""
    return [function(model) for function in parts.functions]


# ---------------------------------------------------------------------------------------------- evidence
def status_problems(parts: Parts, *, must_be_active: bool) -> list[str]:
    """What is wrong with the statuses the pack's callbacks reported (empty: nothing)."""
    problems = []
    for cb in parts.pack_callbacks:
        name = type(cb).__name__
        status = cb.status
        if status is None:
            problems.append(f"{name} reported no status")
            continue
        state, reason = status
        if state not in ("active", "skipped"):
            problems.append(f"{name} reported an unknown state {state!r}")
        elif must_be_active and state != "active":
            problems.append(f"{name} did not act: {state}, {reason!r}")
        elif state == "skipped" and not reason.strip():
            problems.append(f"{name} skipped without a reason")
    if must_be_active:
        problems += [f"note {name!r} is not active: {reason!r}" for name, active, reason in parts.notes if not active]
    return problems


def params_finite(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if not torch.isfinite(p.detach().float()).all()]


# ---------------------------------------------------------------------------------------------- maths
def plain_name(name: str) -> str:
    """A parameter name without the components wrappers add (``_orig_mod``, ``_checkpoint_wrapped_module``)."""
    return ".".join(part for part in name.split(".") if not part.startswith("_"))


@dataclass
class Probe:
    """One forward + backward on a fixed batch, in eval then in train mode."""

    outputs: dict[str, torch.Tensor]
    grads: dict[str, dict[str, torch.Tensor]]


def _clone(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, (list, tuple)):
        return type(batch)(_clone(b) for b in batch)
    return batch


def probe(
    model: SuiteModel,
    batch: Any,
    prepare: Callable[[Any], Any] = lambda b: b,
    context: Callable[[], Any] = contextlib.nullcontext,
) -> Probe:
    """Forward ``batch`` (through ``prepare``, e.g. the model's batch-transfer hooks) and backward a fixed
    random projection of the output, in eval mode first (running statistics untouched), then train mode."""
    was_training = model.training
    outputs: dict[str, torch.Tensor] = {}
    grads: dict[str, dict[str, torch.Tensor]] = {}
    try:
        for mode in ("eval", "train"):
            model.train(mode == "train")
            for p in model.parameters():
                p.grad = None
            with torch.enable_grad(), context():
                out = model.suite_output(prepare(_clone(batch)))
            with seeded(1234):
                weights = torch.randn(out.shape)
            (out.float() * weights).sum().backward()
            outputs[mode] = out.detach().float().contiguous()
            grads[mode] = {
                plain_name(n): p.grad.detach().float().contiguous()
                for n, p in model.named_parameters()
                if p.grad is not None
            }
    finally:
        for p in model.parameters():
            p.grad = None
        model.train(was_training)
    return Probe(outputs, grads)


class ProbeAtFitStart(Callback):
    """Probes the model as the fit has changed it: after every part's ``setup``, ``configure_model`` and
    ``configure_optimizers``, through the model's batch-transfer hooks and the precision's context."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.result: Optional[Probe] = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        plugin = trainer.precision_plugin

        def prepare(batch: Any) -> Any:
            batch = pl_module.on_before_batch_transfer(batch, 0)
            batch = pl_module.on_after_batch_transfer(batch, 0)
            return plugin.convert_input(batch)

        self.result = probe(pl_module, self.batch, prepare, plugin.forward_context)


#: ``"unchanged"``: element-wise float32 tolerance
UNCHANGED = dict(atol=1e-5, rtol=1e-4)
#: ``"dtype"``: error norm of a whole tensor relative to its norm (bf16 keeps 8 bits of mantissa:
#: 2**-8 = 0.4% a rounding, compounded through the forward and the backward pass; measured up to 8%
#: for the first conv's weight gradient of the CNN kind). A wrong sign or scale is far beyond it.
DTYPE_RELATIVE = 0.1


def _close(got: torch.Tensor, want: torch.Tensor, maths: str, scale: float = 0.0) -> str | None:
    """``None`` when close; ``scale`` floors the norm a ``"dtype"`` error is relative to (a gradient
    that is zero in exact arithmetic, e.g. a conv bias before a BatchNorm, has only rounding noise)."""
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    if maths == "dtype":
        err = ((got - want).norm() / max(want.norm().item(), scale, 1e-12)).item()
        return None if err <= DTYPE_RELATIVE else f"relative error {err:.3g} > {DTYPE_RELATIVE}"
    try:
        torch.testing.assert_close(got, want, **UNCHANGED)
    except AssertionError as err:
        return " ".join(line for line in str(err).splitlines()[2:4])
    return None


def compare(original: Probe, changed: Probe, maths: str) -> list[str]:
    """Where ``changed`` differs from ``original`` beyond the tolerance of ``maths``."""
    problems = []
    for mode in ("eval", "train"):
        why = _close(changed.outputs[mode], original.outputs[mode], maths)
        if why:
            problems.append(f"{mode} outputs differ: {why}")
        ours, theirs = changed.grads[mode], original.grads[mode]
        if not ours:
            problems.append(f"{mode}: the changed model has no gradients")
        unknown = sorted(set(ours) - set(theirs))
        if unknown:
            problems.append(f"{mode}: gradients of parameters the original does not have: {unknown[:4]}")
        scale = sum(g.norm().item() for g in theirs.values()) / max(len(theirs), 1)
        for name in sorted(set(ours) & set(theirs)):
            why = _close(ours[name], theirs[name], maths, scale)
            if why:
                problems.append(f"{mode} gradient of {name} differs: {why}")
    return problems


# ---------------------------------------------------------------------------------------------- fingerprint
def fingerprint(model: torch.nn.Module) -> tuple:
    """Everything a functional part may change: module classes, replaced forwards, compiled calls,
    parameter and buffer names, shapes, dtypes, strides (memory format) and trainability."""
    modules = tuple(
        (
            name,
            type(m).__qualname__,
            "forward" in vars(m),
            getattr(m, "_compiled_call_impl", None) is not None,
        )
        for name, m in model.named_modules()
    )
    tensors = tuple(
        (name, tuple(t.shape), t.dtype, t.stride(), t.requires_grad)
        for name, t in [*model.named_parameters(), *model.named_buffers()]
    )
    return modules, tensors


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {plain_name(n): p.detach().float().contiguous().clone() for n, p in model.named_parameters()}


def close_params(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], atol: float, rtol: float) -> list[str]:
    problems = []
    if set(a) != set(b):
        problems.append(f"parameter names differ: {sorted(set(a) ^ set(b))[:4]}")
    for name in sorted(set(a) & set(b)):
        if a[name].shape != b[name].shape:
            problems.append(f"{name}: shape {tuple(a[name].shape)} vs {tuple(b[name].shape)}")
            continue
        diff = (a[name] - b[name]).abs().max().item() if a[name].numel() else 0.0
        if not math.isfinite(diff) or diff > atol + rtol * b[name].abs().max().item():
            problems.append(f"{name}: differs by {diff:.3g}")
    return problems
