"""T23 multiple-of-8: Sizes that are multiples of 8 for tensor cores.

Card:
    Seeds: B#9, B#10 (claim: -).
    What it does: find_misaligned lists the batch, channel, hidden and vocabulary sizes not
    divisible by 8; pad_embedding and pad_linear_out pad a vocabulary or an output layer (extra
    logits masked).
    Expected gain: tensor cores used fully on GPUs with fp16/bf16.
    When it hurts: padding adds parameters; nothing to gain on CPUs.
"""

from __future__ import annotations

from lightning_speedups.functional import find_misaligned, pad_embedding, pad_linear_out
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason, plural
from lightning_speedups.tips.record import Tip


def check(facts: Facts) -> Finding:
    """T23 multiple-of-8: layer, batch and input sizes that tensor cores cannot use fully."""
    tip = "T23"
    if why := missing_reason(facts, "alignment"):
        return Finding.not_checked(tip, why)
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    found = facts.misaligned
    listed = "; ".join(str(m) for m in found[:6]) + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
    if not facts.on_cuda:
        text = f"sizes only matter for tensor cores (CUDA with 16-bit precision; this run: {facts.device_type})"
        if found:
            text += f"; {plural(len(found), 'size')} not a multiple of 8: {listed}"
        return Finding.not_checked(tip, text, "run the doctor on the GPU machine with speedups.precision: auto")
    if not found:
        return Finding.ok(
            tip, "every Linear / Conv / Embedding size, the batch size and the input sizes are multiples of 8"
        )
    return Finding.from_items(
        tip,
        [
            Item(
                "medium" if facts.half_precision else "low",
                f"{plural(len(found), 'size')} not a multiple of 8: {listed}",
                "round them up (the suggested value after each ->); for a vocabulary or class count use"
                " lightning_speedups.functional.alignment.pad_embedding / pad_linear_out (outputs unchanged)",
            )
        ],
    )


TIP = Tip(
    id="T23",
    slug="multiple-of-8",
    title="Sizes that are multiples of 8 for tensor cores",
    seeds=("B#9", "B#10"),
    claim="-",
    does="find_misaligned lists the batch, channel, hidden and vocabulary sizes not divisible by 8; pad_embedding and pad_linear_out pad a vocabulary or an output layer (extra logits masked).",
    gain="tensor cores used fully on GPUs with fp16/bf16",
    hurts="padding adds parameters; nothing to gain on CPUs",
    check=check,
    parts=(
        find_misaligned,
        pad_embedding,
        pad_linear_out,
    ),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
)
