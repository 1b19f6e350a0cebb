"""T09 activation-checkpointing: Activation (gradient) checkpointing of chosen blocks.

Card:
    Seeds: A#8 (claim: trade compute for memory).
    What it does: ActivationCheckpointing wraps the chosen sub-modules (class names, name patterns,
    or auto: the repeated blocks) in non-reentrant torch.utils.checkpoint; state-dict keys are
    unchanged and BatchNorm statistics are not updated twice.
    Expected gain: peak training memory 0.23x (transformer) / 0.60x (CNN) measured.
    When it hurts: recomputes activations in backward: 1.3x-1.5x more compute per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightning_speedups.callbacks import ActivationCheckpointing
from lightning_speedups.functional import checkpoint_modules
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import fmt_bytes, missing_reason, names_text, plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at


@dataclass
class CheckpointingSettings:
    """T09: activation checkpointing of the sub-modules named by ``targets`` (class names, qualified-name
    patterns, or ``"auto"`` for the repeated blocks); empty means off."""

    targets: list[str] = field(default_factory=list)


def check(facts: Facts) -> Finding:
    """T09 activation-checkpointing: memory pressure and the repeated blocks that could be checkpointed."""
    tip = "T09"
    if (why := missing_reason(facts, "checkpointing")) and not facts.checkpointed:
        return Finding.not_checked(tip, why)
    if facts.checkpointed:
        return Finding.ok(
            tip, f"{plural(len(facts.checkpointed), 'module')} checkpointed ({names_text(facts.checkpointed)})"
        )
    cands = facts.checkpoint_candidates
    cand = (
        f"{plural(len(cands), 'repeated block')} could be checkpointed ({names_text(cands)})"
        if cands
        else "no repeated blocks to checkpoint automatically"
    )
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"memory pressure is measured on a CUDA device (this run: {facts.device_type}); {cand}",
            "run the doctor on the GPU machine; speedups.checkpointing.targets: [auto] when memory runs short",
        )
    if facts.peak_memory is None or not facts.total_memory:
        return Finding.not_checked(tip, facts.run_note() or "peak memory was not measured")
    share = facts.peak_memory / facts.total_memory
    ev = f"peak memory {fmt_bytes(facts.peak_memory)} of {fmt_bytes(facts.total_memory)} ({share:.0%})"
    if share > 0.85:
        fix = (
            "speedups.checkpointing.targets: [auto] (ActivationCheckpointing callback)"
            if cands
            else "speedups.checkpointing.targets: [<block class name>] for the largest blocks (ActivationCheckpointing)"
        )
        return Finding.from_items(tip, [Item("medium", f"{ev}: memory is the limit; {cand}", fix, "runtime")])
    return Finding.ok(tip, f"{ev}: memory is not the limit, checkpointing would only add compute")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T09 adds, each at its place in the callback list."""
    if not s.checkpointing.targets:
        return []
    return [(at("checkpointing"), ActivationCheckpointing(targets=list(s.checkpointing.targets)))]


TIP = Tip(
    id="T09",
    slug="activation-checkpointing",
    title="Activation (gradient) checkpointing of chosen blocks",
    seeds=("A#8",),
    claim="trade compute for memory",
    does="ActivationCheckpointing wraps the chosen sub-modules (class names, name patterns, or auto: the repeated blocks) in non-reentrant torch.utils.checkpoint; state-dict keys are unchanged and BatchNorm statistics are not updated twice.",
    gain="peak training memory 0.23x (transformer) / 0.60x (CNN) measured",
    hurts="recomputes activations in backward: 1.3x-1.5x more compute per step",
    check=check,
    settings=(
        Setting(
            "checkpointing",
            CheckpointingSettings,
            factory=CheckpointingSettings,
            doc="T09. Activation checkpointing targets.",
            on=lambda v: bool(v.targets),
        ),
    ),
    callbacks=callbacks,
    parts=(
        ActivationCheckpointing,
        checkpoint_modules,
    ),
    bench=BenchVariant({"checkpointing.targets": ["auto"]}, goal="memory", needs=("blocks",)),
    suite=(SuiteCase("auto", settings={"checkpointing.targets": ["auto"]}, maths="unchanged", kinds=("transformer",)),),
)
