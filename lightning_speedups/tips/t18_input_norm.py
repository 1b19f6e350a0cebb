"""T18 input-norm: Normalised inputs, normalisation on the device.

Card:
    Seeds: A#17 (claim: -).
    What it does: InputStatsCheck (monitors.input_stats) measures the inputs' mean and spread and
    says when they are not normalised; DeviceNormalize takes uint8 images from the loader and
    converts and normalises them on the device after the transfer.
    Expected gain: uint8 over the bus is 4x fewer bytes than float32 (0.98x on CPU, where there is
    no bus to save).
    When it hurts: the dataset must hand over uint8 images; on CPU there is nothing to gain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from lightning_speedups.callbacks import DeviceNormalize, InputStatsCheck
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import fmt_bytes, missing_reason, plural
from lightning_speedups.tips.record import (
    FROM_PART,
    BuildContext,
    Placed,
    Setting,
    SuiteCase,
    Tip,
    at,
    bounded,
    settings_of,
)


@dataclass
@settings_of(DeviceNormalize)
class DeviceNormalizeSettings:
    """T18: the dataset hands over uint8 images; they are converted and normalised on the device after
    the transfer (4x fewer bytes than float32). ``mean`` / ``std`` per channel in 0..1; empty means off.
    ``keys`` names the batch entries to convert (dict keys or positions); default: every uint8 image."""

    mean: list[float] = field(default_factory=list)
    std: list[float] = bounded(factory=list, gt=0)
    keys: Optional[list[Union[str, int]]] = FROM_PART


def _normalize_problem(s: DeviceNormalizeSettings) -> Optional[str]:
    """mean and std: one number per channel each, both or neither."""
    if len(s.mean) != len(s.std):
        return (
            f"mean has {len(s.mean)} value(s) and std {len(s.std)}; fix: give one mean and one std per channel"
            " (e.g. mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]), or neither to turn it off"
        )
    return None


def check(facts: Facts) -> Finding:
    """T18 input-norm: statistics of the floating-point inputs of the first batches."""
    tip = "T18"
    if why := missing_reason(facts, "input_stats"):
        return Finding.not_checked(tip, why)
    if not facts.input_batches:
        return Finding.not_checked(tip, facts.run_note() or "no training batch was seen")
    batches = plural(facts.input_batches, "batch", "batches")
    items: list[Item] = []
    for name, problems in facts.input_problems.items():
        s = facts.input_stats.get(name)
        stats = f"mean {s.mean:.1f} and std {s.std:.1f} (min {s.min:.4g}, max {s.max:.4g})" if s is not None else ""
        raw = any("0..255" in p for p in problems)
        items.append(
            Item(
                "medium",
                f"inputs of {name} have {stats} over {batches}: " + "; ".join(problems),
                (
                    "hand uint8 images to the loader and add the DeviceNormalize(mean=..., std=...) callback (normalised on"
                    " the device, 4x fewer bytes over the bus), or normalise in the dataset: (x / 255 - mean) / std"
                    if raw
                    else "normalise in the dataset or the DataModule ((x - mean) / std per channel), or with the"
                    " DeviceNormalize callback"
                ),
                "runtime",
            )
        )
    if facts.on_cuda and not items:
        for t in facts.batch:
            if t.floating and len(t.shape) == 4 and t.shape[1] in (1, 3, 4) and t.dtype == "float32":
                items.append(
                    Item(
                        "low",
                        f"{t.name} crosses the bus as float32 images ({fmt_bytes(t.nbytes)} per batch): uint8 is 4x fewer bytes",
                        "return uint8 images from the dataset and add DeviceNormalize(mean=..., std=...) (normalised on the device)",
                        "runtime",
                    )
                )
                break
    if items:
        return Finding.from_items(tip, items)
    if not facts.input_stats:
        kinds = ", ".join(f"{t.name} {t.dtype}" for t in facts.batch[:3]) or "none"
        return Finding.ok(tip, f"no floating-point inputs to normalise ({kinds})")
    desc = "; ".join(f"{n}: mean {s.mean:.2f}, std {s.std:.2f}" for n, s in list(facts.input_stats.items())[:3])
    return Finding.ok(tip, f"inputs look normalised over {batches} ({desc})")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T18 adds, each at its place in the callback list."""
    out: list[Placed] = []
    dn = s.device_normalize
    if dn.mean:
        # before ChannelsLast (order 60): both wrap on_after_batch_transfer, and the images must be float first
        out.append((at("device_normalize"), DeviceNormalize(mean=list(dn.mean), std=list(dn.std), keys=dn.keys)))
    if s.monitors.input_stats:
        out.append((at("input_stats"), InputStatsCheck()))
    return out


TIP = Tip(
    id="T18",
    slug="input-norm",
    title="Normalised inputs, normalisation on the device",
    seeds=("A#17",),
    claim="-",
    does="InputStatsCheck (monitors.input_stats) measures the inputs' mean and spread and says when they are not normalised; DeviceNormalize takes uint8 images from the loader and converts and normalises them on the device after the transfer.",
    gain="uint8 over the bus is 4x fewer bytes than float32 (0.98x on CPU, where there is no bus to save)",
    hurts="the dataset must hand over uint8 images; on CPU there is nothing to gain",
    check=check,
    settings=(
        Setting(
            "device_normalize",
            DeviceNormalizeSettings,
            factory=DeviceNormalizeSettings,
            doc="T18. uint8 images normalised on the device after the transfer.",
            on=lambda v: bool(v.mean),
            validate=_normalize_problem,
        ),
        Setting("monitors.input_stats", bool, False, doc="T18. Check that the inputs are normalised."),
    ),
    callbacks=callbacks,
    parts=(
        InputStatsCheck,
        DeviceNormalize,
    ),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
    suite=(
        SuiteCase(
            "device_normalize", settings={"device_normalize.mean": [0.5], "device_normalize.std": [0.25]}, kinds=()
        ),
        SuiteCase(
            "input_stats",
            settings={"monitors.input_stats": True},
            kinds=("cnn", "manual", "configure_model", "scheduler"),
        ),
    ),
)
