"""T06 optimizer: Fused / foreach optimizer implementations.

Card:
    Seeds: A#5 (claim: -).
    What it does: FusedOptimizer switches the user's optimizers to their fused (or foreach)
    implementation where the device and the optimizer support it; under fp16 with clipping it keeps
    foreach, where fused cannot be clipped.
    Expected gain: one kernel for all parameters instead of one per parameter: a few percent of a
    small model's step.
    When it hurts: fused kernels exist only for some optimizers and devices; with a GradScaler and
    clipping fused breaks in Lightning.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_speedups.callbacks import FusedOptimizer, fused_devices, implementation_of, optimizer_accepts
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import has_callback, plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T06 optimizer: fused / foreach implementations of the built-in optimizers."""
    tip = "T06"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    if not facts.optimizers:
        return Finding.ok(tip, "the model has no optimizer")
    items: list[Item] = []
    oks: list[str] = []
    for opt in facts.optimizers:
        verdict = _optimizer_verdict(opt, facts)
        if isinstance(verdict, Item):
            items.append(verdict)
        else:
            oks.append(verdict)
    if items:
        return Finding.from_items(tip, items, oks)
    return Finding.ok(tip, "; ".join(oks))


def _optimizer_verdict(opt: Any, facts: Facts) -> Item | str:
    """One optimizer's finding, or the line that says it is fine."""
    name = type(opt).__name__
    params = [p for g in opt.param_groups for p in g["params"]]
    if type(opt).__module__.split(".")[0] != "torch" or not params:
        return f"{name} is not a torch built-in: nothing to switch"
    if any(g.get("fused") for g in opt.param_groups):
        return _fused_verdict(name, facts)
    return _unfused_verdict(opt, name, params, facts)


def _fused_verdict(name: str, facts: Facts) -> Item | str:
    """A fused optimizer: fine, unless Lightning cannot clip it under this precision."""
    scaler = facts.precision in ("16-mixed", "16")  # only fp16 mixed precision runs a GradScaler
    if scaler and (facts.gradient_clip_val or has_callback(facts, "AdaptiveGradientClipping")):
        return Item(
            "high",
            f"{name}(fused=True) under {facts.precision} with gradient clipping: a fused optimizer unscales"
            " inside its step, so Lightning cannot clip (it raises, or AGC sees scaled gradients)",
            "speedups.optimizer: auto (picks foreach here), or foreach=True instead of fused=True",
        )
    if "bf16-mixed" in facts.precision and facts.gradient_clip_val and not has_callback(facts, "FusedOptimizer"):
        # Lightning issue 21435: its bf16-mixed plugin refuses to clip any optimizer that says it
        # unscales internally, although bf16 needs no unscaling
        return Item(
            "high",
            f"{name}(fused=True) under bf16-mixed with gradient clipping: Lightning refuses to clip it"
            " ('does not allow for gradient clipping because it performs unscaling', Lightning issue 21435)",
            "speedups.optimizer: auto (FusedOptimizer keeps fused and clears the flag under bf16-mixed),"
            " or foreach=True instead of fused=True",
        )
    return f"{name} is fused"


def _unfused_verdict(opt: Any, name: str, params: list[Any], facts: Facts) -> Item | str:
    """An optimizer that is not fused: a fused kernel that exists for its device, or foreach instead of a for-loop."""
    foreach = any(g.get("foreach") for g in opt.param_groups)
    devices = {p.device.type for p in params}
    can_fuse = (
        optimizer_accepts(opt, "fused")
        and len(devices) == 1
        and devices <= set(fused_devices())
        and all(p.is_floating_point() for p in params)
        and not opt.defaults.get("differentiable", False)
    )
    dev = next(iter(devices)) if len(devices) == 1 else "several devices"
    default_foreach = not foreach and implementation_of(opt) == "foreach"  # torch's default on CUDA
    impl = (
        "foreach" if foreach else ("foreach (torch's default on CUDA)" if default_foreach else "per-parameter for-loop")
    )
    n = len(params)
    if can_fuse:
        sev = "low" if (foreach or default_foreach or not facts.on_cuda) else "medium"
        return Item(
            sev,
            f"{name} runs the {impl} implementation over {plural(n, 'parameter tensor')} on {dev};"
            f" a fused kernel exists for {dev}",
            f"speedups.optimizer: auto (FusedOptimizer callback), or {name}(..., fused=True)",
        )
    if not (foreach or default_foreach) and optimizer_accepts(opt, "foreach") and n > 1:
        return Item(
            "low",
            f"{name} runs a per-parameter for-loop over {plural(n, 'parameter tensor')} on {dev}",
            f"speedups.optimizer: auto (FusedOptimizer callback), or {name}(..., foreach=True)",
        )
    return f"{name} uses {impl}"


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T06 adds, each at its place in the callback list."""
    return [(at("optimizer"), FusedOptimizer(s.optimizer))] if s.optimizer != "off" else []


def _fused(trainer: Any, model: Any, callbacks: Any) -> None:
    groups = [g for opt in trainer.optimizers for g in opt.param_groups]
    assert groups and all(g.get("fused") or g.get("foreach") for g in groups), "no fused / foreach group"


TIP = Tip(
    id="T06",
    slug="optimizer",
    title="Fused / foreach optimizer implementations",
    seeds=("A#5",),
    claim="-",
    does="FusedOptimizer switches the user's optimizers to their fused (or foreach) implementation where the device and the optimizer support it; under fp16 with clipping it keeps foreach, where fused cannot be clipped.",
    gain="one kernel for all parameters instead of one per parameter: a few percent of a small model's step",
    hurts="fused kernels exist only for some optimizers and devices; with a GradScaler and clipping fused breaks in Lightning",
    check=check,
    settings=(
        Setting(
            "optimizer",
            Literal["off", "auto", "fused", "foreach"],
            "off",
            doc="T06. ``auto`` picks fused / foreach implementations.",
        ),
    ),
    callbacks=callbacks,
    parts=(FusedOptimizer,),
    bench=BenchVariant({"optimizer": "auto"}),
    suite=(
        # `auto` keeps the implementation the start-up probe measures fastest (tests/test_auto_probe.py), which
        # may be the one the optimizer has: the suite checks the switch itself with an explicit choice
        SuiteCase(
            "fused",
            settings={"optimizer": "fused"},
            maths="unchanged",
            kinds=("cnn", "transformer", "configure_model", "scheduler"),
            acted=_fused,
        ),
    ),
)
