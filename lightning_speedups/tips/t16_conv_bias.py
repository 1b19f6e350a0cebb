"""T16 conv-bias: No bias in a convolution right before BatchNorm.

Card:
    Seeds: A#15, B#17 (claim: fewer parameters, less memory).
    What it does: ConvBiasRemoval removes the bias of every convolution whose output feeds only a
    BatchNorm (found by fx data flow, per sub-module where the whole model does not trace), folding
    it into the running mean: outputs unchanged; checkpoints of the unchanged model still load.
    Expected gain: fewer parameters and one add less per conv; a few percent of a CNN's step.
    When it hurts: never changes the maths; nothing to gain on models without conv -> BatchNorm
    pairs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lightning_speedups.callbacks import ConvBiasRemoval
from lightning_speedups.functional import fold_conv_bias_state_dict, remove_conv_bias
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason, names_text, plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T16 conv-bias: convolutions that feed only a BatchNorm and keep a bias."""
    tip = "T16"
    if why := missing_reason(facts, "conv_bias"):
        return Finding.not_checked(tip, why)
    model = facts.model
    plan = facts.conv_bias_plan
    if model is None or plan is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    removal = facts.callback_of("ConvBiasRemoval")
    removed = list(getattr(removal, "removed", []) or []) if removal is not None else []
    if plan.pairs:
        convs = [model.get_submodule(c) for c in plan.pairs]
        biases = [getattr(c, "bias", None) for c in convs]
        n_params = sum(b.numel() for b in biases if b is not None)
        kinds = Counter(type(c).__name__ for c in convs)
        kind = " / ".join(kinds)
        pairs = [f"{c} -> {b}" for c, b in plan.pairs.items()]
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"{len(convs)} {kind} layer{'s' if len(convs) != 1 else ''} feed a BatchNorm and keep a bias:"
                    f" {n_params:,} parameters ({names_text(pairs, 3)})",
                    "speedups.conv_bias: true (ConvBiasRemoval callback, outputs unchanged), or bias=False in those convolutions",
                )
            ],
            [f"{len(plan.skipped)} other biased convolution(s) keep their bias"] if plan.skipped else [],
        )
    if removed:
        return Finding.ok(
            tip,
            f"ConvBiasRemoval removed {plural(len(removed), 'conv bias', 'conv biases')} ({names_text(removed, 3)})",
        )
    n_convs = sum(n for t, n in facts.module_counts.items() if t.startswith("Conv"))
    if not n_convs:
        return Finding.ok(tip, "the model has no convolution")
    if plan.skipped:
        first, why = next(iter(plan.skipped.items()))
        return Finding.ok(
            tip,
            f"no convolution feeds only a BatchNorm with a bias; {len(plan.skipped)} biased one(s) must keep it (e.g. {first}: {why})",
        )
    return Finding.ok(tip, f"none of the {plural(n_convs, 'convolution')} keeps a bias in front of a BatchNorm")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T16 adds, each at its place in the callback list."""
    return [(at("conv_bias"), ConvBiasRemoval())] if s.conv_bias else []


TIP = Tip(
    id="T16",
    slug="conv-bias",
    title="No bias in a convolution right before BatchNorm",
    seeds=("A#15", "B#17"),
    claim="fewer parameters, less memory",
    does="ConvBiasRemoval removes the bias of every convolution whose output feeds only a BatchNorm (found by fx data flow, per sub-module where the whole model does not trace), folding it into the running mean: outputs unchanged; checkpoints of the unchanged model still load.",
    gain="fewer parameters and one add less per conv; a few percent of a CNN's step",
    hurts="never changes the maths; nothing to gain on models without conv -> BatchNorm pairs",
    check=check,
    settings=(
        Setting(
            "conv_bias", bool, False, doc="T16. Remove conv biases that feed only a BatchNorm (outputs unchanged)."
        ),
    ),
    callbacks=callbacks,
    parts=(
        ConvBiasRemoval,
        remove_conv_bias,
        fold_conv_bias_state_dict,
    ),
    bench=BenchVariant({"conv_bias": True}, needs=("conv_bias",)),
    suite=(
        SuiteCase("callback", settings={"conv_bias": True}, maths="unchanged", kinds=("cnn",)),
        SuiteCase("function", function=remove_conv_bias, maths="unchanged", kinds=("cnn",)),
    ),
)
