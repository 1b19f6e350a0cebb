"""T15 grad-clipping: Gradient clipping: norm, value, adaptive (AGC).

Card:
    Seeds: A#14 (claim: faster convergence, avoids explosions).
    What it does: grad_clip norm / value sets the Trainer's gradient_clip_val and algorithm; agc
    adds AdaptiveGradientClipping (unit-wise, Brock et al. 2021), which skips the heads.
    Expected gain: stable training at higher learning rates.
    When it hurts: it changes the optimisation; clipping by norm costs a reduction over all
    gradients per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from lightning_speedups.callbacks import AdaptiveGradientClipping
from lightning_speedups.functional import adaptive_clip_grad_
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at, bounded


@dataclass
class ClipSettings:
    """T15: gradient clipping by norm, by value, or adaptive (AGC, unit-wise, Brock et al. 2021).

    ``value`` is the clip value for ``norm`` / ``value`` (default 1.0) and the clipping factor for
    ``agc`` (default 0.01)."""

    algorithm: Literal["off", "norm", "value", "agc"] = "off"
    value: Optional[float] = bounded(None, gt=0)
    agc_eps: float = bounded(1e-3, gt=0)
    agc_exclude: Optional[list[str]] = field(default_factory=lambda: ["fc", "classifier", "head"])


def check(facts: Facts) -> Finding:
    """T15 grad-clipping: gradient norms of the first steps when nothing clips them."""
    tip = "T15"
    if facts.gradient_clip_val:
        return Finding.ok(
            tip, f"gradients clipped by {facts.gradient_clip_algorithm or 'norm'} at {facts.gradient_clip_val}"
        )
    agc = facts.callback_of("AdaptiveGradientClipping")
    if agc is not None:
        return Finding.ok(tip, "adaptive gradient clipping (AGC) is on")
    norms = facts.grad_norms
    if not norms:
        return Finding.not_checked(tip, facts.run_note() or "no optimizer step was watched")
    finite = [x for x in norms if math.isfinite(x)]
    bad = len(norms) - len(finite)
    scaler = "16-mixed" in facts.precision
    if bad and not scaler:
        first = next(i for i, x in enumerate(norms) if not math.isfinite(x))
        return Finding.from_items(
            tip,
            [
                Item(
                    "high",
                    f"the gradient norm was not finite in {bad} of {len(norms)} steps (first at step {first}) and nothing clips it",
                    "speedups.grad_clip.algorithm: norm (value 1.0), or agc; and look for the cause (learning rate, inputs: T18)",
                    "runtime",
                )
            ],
        )
    if not finite:
        return Finding.ok(
            tip, f"the fp16 grad scaler skipped all {len(norms)} watched steps (overflow while it calibrates)"
        )
    lo, hi = min(finite), max(finite)
    med = sorted(finite)[len(finite) // 2]
    rng = f"gradient norms {lo:.3g} to {hi:.3g} over {plural(len(finite), 'step')}"
    if hi > 1e3 or (med > 0 and hi > 50 * med):
        return Finding.from_items(
            tip,
            [
                Item(
                    "medium",
                    f"{rng} with no clipping: a jump to {hi:.3g} (median {med:.3g})",
                    "speedups.grad_clip.algorithm: norm (value 1.0), or agc (AdaptiveGradientClipping, no threshold to tune)",
                    "runtime",
                )
            ],
        )
    return Finding.ok(tip, f"no clipping; {rng}: no explosion seen")


def trainer_kwargs(s: Any, ctx: BuildContext) -> None:
    """The Trainer arguments T15 sets before the Trainer exists."""
    clip = s.grad_clip
    if clip.algorithm not in ("norm", "value"):
        return
    value = clip.value if clip.value is not None else 1.0
    # Lightning refuses Trainer(gradient_clip_val) under manual optimization: skipped there, with the call to make
    ctx.automatic_only(
        "grad_clip (T15)",
        "T15",
        {"gradient_clip_val": value, "gradient_clip_algorithm": clip.algorithm},
        # the flags named as K=V: the summary merges a user's own value for them into this one line
        f"clip gradients by {clip.algorithm} at {value} (gradient_clip_val={value!r},"
        f" gradient_clip_algorithm={clip.algorithm!r})",
        f"clip in training_step: self.clip_gradients(opt, gradient_clip_val={value}, gradient_clip_algorithm={clip.algorithm!r})"
        " between self.manual_backward(loss) and opt.step(), or use speedups.grad_clip.algorithm: agc",
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T15 adds, each at its place in the callback list."""
    clip = s.grad_clip
    if clip.algorithm != "agc":
        return []
    factor = clip.value if clip.value is not None else 0.01
    return [(at("agc"), AdaptiveGradientClipping(clipping=factor, eps=clip.agc_eps, exclude=clip.agc_exclude))]


def _clipped(trainer: Any, model: Any, callbacks: Any) -> None:
    assert trainer.gradient_clip_val == 1.0 and trainer.gradient_clip_algorithm == "norm"


TIP = Tip(
    id="T15",
    slug="grad-clipping",
    title="Gradient clipping: norm, value, adaptive (AGC)",
    seeds=("A#14",),
    claim="faster convergence, avoids explosions",
    does="grad_clip norm / value sets the Trainer's gradient_clip_val and algorithm; agc adds AdaptiveGradientClipping (unit-wise, Brock et al. 2021), which skips the heads.",
    gain="stable training at higher learning rates",
    hurts="it changes the optimisation; clipping by norm costs a reduction over all gradients per step",
    check=check,
    settings=(
        Setting(
            "grad_clip",
            ClipSettings,
            factory=ClipSettings,
            doc="T15. Norm, value or adaptive gradient clipping.",
            on=lambda v: v.algorithm != "off",
        ),
    ),
    trainer_kwargs=trainer_kwargs,
    callbacks=callbacks,
    parts=(
        ClipSettings,
        AdaptiveGradientClipping,
        adaptive_clip_grad_,
    ),
    bench=(BenchVariant({"grad_clip.algorithm": "norm"}, mode="target", name="norm"),),
    not_timed="gradient clipping changes the optimisation, not the step time: judged by time to a target (bench --target), not samples/s",
    suite=(
        SuiteCase(
            "norm",
            settings={"grad_clip.algorithm": "norm"},
            kinds=("cnn", "transformer", "configure_model", "scheduler"),
            acted=_clipped,
        ),
        SuiteCase("agc", settings={"grad_clip.algorithm": "agc", "grad_clip.agc_exclude": []}),
    ),
)
