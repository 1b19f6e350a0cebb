"""The variants ``bench`` runs, which tips apply to a setup, and the combination search.

A *variant* is the user's own setup (model, data, trainer from their config) with the ``speedups:``
section replaced: ``baseline`` (every speed-up off), one tip on top of the baseline, a packaged
preset, a combination of tips, the static all-on combination, or the pack's parts with nothing to
do (their overhead). Which tips apply is decided from the built model and the device
(:func:`lightning_speedups.inspection.inspect_setup`, the model inspection the doctor shares, then
:func:`plan_tips`); the combination search (:func:`greedy_search`) is a
pure function of measured speed-ups, so it is tested with injected figures.

Example::

    info = SetupInfo(device="cpu", conv_modules=3, conv_bias_pairs=3, repeated_blocks=0, compile_targets=2)
    tips, skipped = plan_tips(info)          # ["T02", "T05", "T06", "T16", "T22", "T24"], {"T07": "...", ...}
    result = greedy_search({"T24": 1.2, "T22": 1.4}, measure=lambda combo: 1.6, min_gain=0.02)
    result.best                              # ("T22", "T24")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.inspection import NEED_PARTS, SetupInfo
from lightning_speedups.tips import BY_ID, TIPS, BenchVariant, get_tip

#: How bench turns one tip on: the record's :class:`~lightning_speedups.tips.record.BenchVariant`.
TipVariant = BenchVariant

#: tip id -> how bench turns it on (timed by samples/s), from the tip records. Every tip is either
#: here or in NOT_TIMED.
TIP_VARIANTS: dict[str, TipVariant] = {
    tip.id: v for tip in TIPS for v in [tip.bench_variant("throughput")] if v is not None
}

#: tip id -> why bench never times it by samples/s, from the tip records.
NOT_TIMED: dict[str, str] = {tip.id: tip.not_timed for tip in TIPS if tip.bench_variant("throughput") is None}

#: tip id -> its time-to-target variants (``bench --target``), from the tip records.
TARGET_VARIANTS: dict[str, tuple[TipVariant, ...]] = {
    tip.id: tuple(v for v in tip.bench_variants if v.mode == "target")
    for tip in TIPS
    if any(v.mode == "target" for v in tip.bench_variants)
}

#: packaged presets bench never runs, and why.
PRESETS_NOT_TIMED: dict[str, str] = {
    "ddp": "needs several devices; bench times one device",
    "debug": "deliberately slow (anomaly detection, sync warnings): for finding bugs, not for speed",
    "converge": "changes the optimisation (a range-tested one-cycle schedule), not the step time: judge it with --target",
}

_NEED_REASONS = {
    "cuda": "needs a CUDA device (this bench runs on {device})",
    "convs": "the model has no 4D/5D convolutions",
    "conv_bias": "no biased convolution feeds a BatchNorm",
    "blocks": "the model has no repeated blocks to checkpoint",
    "compile": "the model has no sub-module with parameters to compile",
}


def resolve_tips(keys: Optional[Iterable[str]]) -> Optional[list[str]]:
    """Turn ``--tips`` values (ids or slugs, comma-separated allowed) into tip ids.

    Raises:
        KeyError: an unknown tip, with the list of valid ids.
    """
    if keys is None:
        return None
    out: list[str] = []
    for key in keys:
        for part in str(key).split(","):
            part = part.strip()
            if part and part.lower() != "none":
                tip = get_tip(part)
                if tip.id not in out:
                    out.append(tip.id)
    return out


def plan_tips(info: SetupInfo, selected: Optional[Sequence[str]] = None) -> tuple[list[str], dict[str, str]]:
    """Which tips to time on this setup, and why each other one is not timed.

    Args:
        info: the inspected setup.
        selected: tip ids to consider (``None``: all).

    Returns:
        ``(tip ids to time, {tip id: reason it is skipped})``.
    """
    timed: list[str] = []
    skipped: dict[str, str] = {}
    for tip_id in BY_ID:
        if selected is not None and tip_id not in selected:
            continue
        if tip_id in NOT_TIMED:
            skipped[tip_id] = NOT_TIMED[tip_id]
            continue
        spec = TIP_VARIANTS[tip_id]
        reason = None
        for need in spec.needs:
            has = info.has(need)
            if has is None:
                part = NEED_PARTS[need]
                reason = f"the {part} part could not inspect the model ({info.errors.get(part, 'unknown error')})"
                break
            if not has:
                reason = _NEED_REASONS[need].format(device=info.device)
                break
        if reason is None:
            timed.append(tip_id)
        else:
            skipped[tip_id] = reason
    return timed, skipped


@dataclass(frozen=True)
class Variant:
    """One setup to time.

    Attributes:
        name: shown in the report (``"baseline"``, ``"T24 channels-last"``, ``"preset:fast"``,
            ``"T22+T24"``, ``"all-on"``, ``"idle-parts"``, ``"yours"``).
        kind: ``"baseline"``, ``"tip"``, ``"preset"``, ``"combo"``, ``"all-on"``, ``"idle"`` or ``"yours"``.
        tips: the tips it turns on.
        presets: packaged preset names (or paths) composed on top of the reset section.
        overrides: dotted ``speedups`` keys set last.
        description: one line for the report.
        plan_fraction: time-to-target mode, a variant with a learning-rate schedule: its span
            (``lr_schedule.plan``) is this share of the optimizer steps the baseline took to the target,
            set once the baseline's first run has measured them.
    """

    name: str
    kind: str
    tips: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    overrides: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    plan_fraction: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["overrides"] = dict(self.overrides)
        d["tips"] = list(self.tips)
        d["presets"] = list(self.presets)
        return d


def tip_overrides(tips: Iterable[str]) -> dict[str, Any]:
    """The merged ``speedups`` overrides of several tips."""
    out: dict[str, Any] = {}
    for tip_id in tips:
        out.update(TIP_VARIANTS[tip_id].overrides)
    return out


def tip_variant(tip_id: str) -> Variant:
    tip = BY_ID[tip_id]
    return Variant(f"{tip_id} {tip.slug}", "tip", (tip_id,), overrides=tip_overrides([tip_id]), description=tip.title)


def combo_variant(tips: Sequence[str], kind: str = "combo", name: Optional[str] = None) -> Variant:
    ordered = tuple(sorted(tips))
    return Variant(
        name or "+".join(ordered),
        kind,
        ordered,
        overrides=tip_overrides(ordered),
        description=" + ".join(BY_ID[t].slug for t in ordered),
    )


BASELINE = Variant("baseline", "baseline", description="every speed-up off: plain Lightning")
#: the baseline once more, interleaved like any variant: how far apart two identical setups land (the noise floor)
NOISE_PAIR = Variant("baseline (A/A)", "aa", description="the baseline again: this run's noise floor")


def preset_variant(name: str) -> Variant:
    """A packaged preset, or several composed with ``+`` (``"fast+converge"``: ``--config fast --config converge``)."""
    parts = tuple(p.strip() for p in name.split("+") if p.strip())
    return Variant(
        f"preset:{'+'.join(parts)}",
        "preset",
        presets=parts,
        description="the packaged " + " + ".join(parts) + " preset" + ("s" if len(parts) > 1 else ""),
    )


def target_tip_variants(
    selected: Optional[Sequence[str]], batch_size: Optional[int], info: Optional[SetupInfo] = None
) -> tuple[list[Variant], dict[str, str]]:
    """Time-to-target mode: a variant for each target-mode variant of the (selected) tips, and the
    speed tips named in ``selected`` (their samples/s gain shortens the time too).

    ``batch_scale`` variants need the configured batch size (``None``: skipped with the reason)."""
    out: list[Variant] = []
    skipped: dict[str, str] = {}
    for tip_id, variants in TARGET_VARIANTS.items():
        if selected is not None and tip_id not in selected:
            continue
        tip = BY_ID[tip_id]
        for v in variants:
            overrides = dict(v.overrides)
            name = f"{tip_id} {tip.slug}" + (f" {v.name}" if v.name else "")
            if v.batch_scale is not None:
                if not batch_size:
                    skipped[name] = "the batch size could not be read (no batch_size on the datamodule or model)"
                    continue
                overrides["largest_batch.batch_size"] = int(batch_size * v.batch_scale)
            out.append(Variant(name, "tip", (tip_id,), overrides=overrides, description=tip.title))
    for tip_id in selected or ():
        if tip_id in TIP_VARIANTS and tip_id not in TARGET_VARIANTS:
            if info is not None:
                timed, why = plan_tips(info, [tip_id])
                if not timed:
                    skipped[tip_id] = why.get(tip_id, "does not apply")
                    continue
            out.append(tip_variant(tip_id))
    return out, skipped


def idle_overrides(info: SetupInfo, skipped: Mapping[str, str]) -> dict[str, Any]:
    """Overrides that turn on the parts that have nothing to do on this setup (their pure overhead).

    These are the tips skipped because the setup lacks what they need (not the ones bench never
    times), plus ``tf32: auto`` where no GPU has TF32.
    """
    out: dict[str, Any] = {}
    for tip_id in skipped:
        spec = TIP_VARIANTS.get(tip_id)
        if spec is None or any(info.has(n) is None for n in spec.needs):
            continue
        out.update(spec.overrides)
    if info.device != "cuda":
        out["tf32"] = "auto"
    return out


def build_variants(
    info: SetupInfo,
    timed_tips: Sequence[str],
    skipped: Mapping[str, str],
    presets: Sequence[str],
    extras: bool = True,
    yours: bool = False,
) -> list[Variant]:
    """The variants of the first phase: baseline, each tip alone, the presets, all-on and idle-parts."""
    variants = [BASELINE]
    if yours:
        variants.append(Variant("yours", "yours", description="your config's own speedups section"))
    variants += [tip_variant(t) for t in timed_tips]
    variants += [
        Variant(f"preset:{p}", "preset", presets=(p,), description=f"the packaged {p} preset") for p in presets
    ]
    if extras:
        speed = [t for t in timed_tips if TIP_VARIANTS[t].goal == "speed"]
        if len(speed) >= 2:
            variants.append(combo_variant(speed, kind="all-on", name="all-on"))
        idle = idle_overrides(info, skipped)
        if idle:
            variants.append(
                Variant(
                    "idle-parts",
                    "idle",
                    overrides=idle,
                    description="parts with nothing to do here: " + ", ".join(sorted(idle)),
                )
            )
    return variants


# ------------------------------------------------------------------------------------ the search


@dataclass
class SearchStep:
    """One candidate of the combination search: its tips, measured speed-up (``None``: failed, not
    sane, or not measured) and whether it was kept."""

    tips: tuple[str, ...]
    speedup: Optional[float]
    accepted: bool
    note: str = ""


@dataclass
class SearchResult:
    """The best combination found (``()``: nothing beat the baseline), its speed-up, and the steps."""

    best: tuple[str, ...]
    speedup: float
    steps: list[SearchStep] = field(default_factory=list)
    helpful: list[str] = field(default_factory=list)


class BudgetExhausted(Exception):
    """Raised by a ``measure`` callable when the time budget does not allow another measurement."""


def helpful_tips(singles: Mapping[str, Optional[float]], min_gain: float) -> list[str]:
    """Tips whose speed-up alone is at least ``1 + min_gain``, best first."""
    good = {t: r for t, r in singles.items() if r is not None and r >= 1.0 + min_gain}
    return sorted(good, key=lambda t: (-float(good[t]), t))


def greedy_search(
    singles: Mapping[str, Optional[float]],
    measure: Callable[[tuple[str, ...]], Optional[float]],
    min_gain: float = 0.02,
) -> SearchResult:
    """Greedy forward selection over the tips that helped alone.

    Start from the best single tip; try adding each other helpful tip in order of its own speed-up;
    keep an addition only when the measured combination beats the current best by at least
    ``min_gain`` (relative). ``measure(tips)`` returns the speed-up over baseline of the combination
    (``None`` when it failed or failed the sanity check) and may raise :class:`BudgetExhausted`.

    Args:
        singles: tip id -> speed-up over baseline when on alone (``None``: failed or not sane).
        measure: times a combination (called with sorted tip ids).
        min_gain: relative gain a tip or an addition must bring to count.

    Examples:
        >>> r = greedy_search({"A": 1.3, "B": 1.2, "C": 0.9}, lambda c: {("A", "B"): 1.5}[c])
        >>> r.best, r.speedup
        (('A', 'B'), 1.5)
    """
    helpful = helpful_tips(singles, min_gain)
    if not helpful:
        return SearchResult((), 1.0, [], helpful)
    best: tuple[str, ...] = (helpful[0],)
    first = singles[helpful[0]]
    assert first is not None  # helpful_tips keeps only tips with a speed-up
    best_speedup = float(first)
    steps: list[SearchStep] = []
    for tip in helpful[1:]:
        candidate = tuple(sorted(best + (tip,)))
        try:
            speedup = measure(candidate)
        except BudgetExhausted:
            steps.append(SearchStep(candidate, None, False, "not measured: the --budget ran out"))
            break
        accepted = speedup is not None and speedup >= best_speedup * (1.0 + min_gain)
        note = (
            "failed or not sane"
            if speedup is None
            else f"{'kept' if accepted else 'dropped'}: {speedup:.3f}x vs {best_speedup:.3f}x without {tip}"
        )
        steps.append(SearchStep(candidate, speedup, accepted, note))
        if accepted and speedup is not None:  # accepted only with a speed-up
            best, best_speedup = candidate, float(speedup)
    return SearchResult(best, best_speedup, steps, helpful)
