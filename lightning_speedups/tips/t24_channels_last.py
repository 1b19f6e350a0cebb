"""T24 channels-last: channels_last memory format for 4D/5D tensors.

Card:
    Seeds: B#16 (claim: 8% to 35% with AMP).
    What it does: ChannelsLast puts the model's 4D/5D weights and the batches in channels_last
    (NHWC) memory format: outputs unchanged; with auto, only where the start-up probe (AutoProbe)
    times it faster on the model.
    Expected gain: 1.2x measured on a small CNN on CPU; 8%-35% with AMP on tensor cores.
    When it hurts: models with few convolutions gain nothing and pay layout conversions.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from lightning_speedups.callbacks import ChannelsLast
from lightning_speedups.functional import batch_to_channels_last, to_channels_last
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import counted, missing_reason, names_text, plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T24 channels-last: 4D/5D convolution weights and input batches in NCHW layout."""
    tip = "T24"
    if why := missing_reason(facts, "channels_last"):
        return Finding.not_checked(tip, why)
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    mods = facts.channels_last_modules
    if not mods:
        return Finding.ok(tip, "the model has no 4D/5D convolution weights: nothing to convert")
    nchw = [(n, t) for n, t, layout in mods if layout == "nchw"]
    cl = [(n, t) for n, t, layout in mods if layout == "channels_last"]
    inputs = [t for t in facts.batch if t.nchw]
    input_text = f"; inputs {names_text([f'{t.name} {t.shape}' for t in inputs], 2)} arrive NCHW" if inputs else ""
    where = (
        "the gain is largest on tensor-core GPUs with AMP (on CPU measure it with bench)"
        if not (facts.on_cuda and facts.half_precision)
        else f"on {facts.device_name} with {facts.precision} the NHWC kernels skip layout transposes"
    )
    sev = "medium" if facts.on_cuda and facts.half_precision else "low"
    fix = "speedups.channels_last: true (ChannelsLast callback: model and 4D/5D batches in NHWC, outputs unchanged)"
    if nchw:
        if not cl:
            kind = counted([t for _, t, _ in mods])
            text = f"{kind} layer{'s' if len(mods) != 1 else ''} hold 4D/5D weights in NCHW (contiguous) layout, none in channels_last"
        else:
            text = f"{counted([t for _, t in nchw])} of {len(mods)} layers with 4D/5D weights still hold NCHW weights"
        return Finding.from_items(tip, [Item(sev, f"{text}{input_text}; {where}", fix)])
    if inputs and cl:
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"the model's {len(cl)} layers with 4D/5D weights are channels_last but {input_text[2:]}: the first"
                    " convolution converts them every step",
                    fix,
                    "runtime",
                )
            ],
        )
    if not cl:
        return Finding.ok(
            tip,
            f"the {plural(len(mods), 'layer')} with 4D/5D weights are the same in both layouts (one input channel, 1x1 kernels)",
        )
    return Finding.ok(tip, f"{plural(len(cl), 'layer')} with 4D/5D weights in channels_last")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T24 adds, each at its place in the callback list."""
    if not s.channels_last:
        return []
    return [(at("channels_last"), ChannelsLast(auto=s.channels_last == "auto"))]


def _nhwc(model: Any) -> bool:
    """Convert the model; truthy when a 4D weight is now channels_last."""
    import torch

    to_channels_last(model)
    return any(
        p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
        for p in model.parameters()
    )


TIP = Tip(
    id="T24",
    slug="channels-last",
    title="channels_last memory format for 4D/5D tensors",
    seeds=("B#16",),
    claim="8% to 35% with AMP",
    does="ChannelsLast puts the model's 4D/5D weights and the batches in channels_last (NHWC) memory format: outputs unchanged; with auto, only where the start-up probe (AutoProbe) times it faster on the model.",
    gain="1.2x measured on a small CNN on CPU; 8%-35% with AMP on tensor cores",
    hurts="models with few convolutions gain nothing and pay layout conversions",
    check=check,
    settings=(
        Setting(
            "channels_last",
            Union[bool, Literal["auto"]],
            False,
            doc="T24. Model and 4D/5D batches in channels_last memory format; ``auto``: only where the start-up"
            " probe measures it faster on the model.",
        ),
    ),
    callbacks=callbacks,
    parts=(
        ChannelsLast,
        to_channels_last,
        batch_to_channels_last,
    ),
    bench=BenchVariant({"channels_last": True}, needs=("convs",)),
    suite=(
        SuiteCase("callback", settings={"channels_last": True}, maths="unchanged", kinds=("cnn",)),
        SuiteCase("function", function=_nhwc, maths="unchanged", kinds=("cnn",)),
    ),
)
