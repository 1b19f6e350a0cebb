"""T14 debug-off: Debugging tools off when not debugging.

Card:
    Seeds: A#13 (claim: debuggers slow training).
    What it does: DebugToolsCheck (monitors.checks) lists the debugging switches left on (anomaly
    detection, profilers, NVTX, deterministic algorithms, sync-debug mode, CUDA_LAUNCH_BLOCKING, a
    tracer) with what each costs; DebugMode (debug: true) turns them on deliberately and restores
    them after the fit.
    Expected gain: anomaly detection alone often makes backward several times slower.
    When it hurts: never by itself; the tools are right while debugging.
"""

from __future__ import annotations

from typing import Any

from lightning_speedups.callbacks import DebugMode, DebugToolsCheck
from lightning_speedups.functional import find_debug_tools
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason
from lightning_speedups.tips.record import BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T14 debug-off: anomaly detection, profilers, NVTX, deterministic mode and friends left on."""
    tip = "T14"
    if why := missing_reason(facts, "debug_tools"):
        return Finding.not_checked(tip, why)
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    items = [Item(t.severity, f"{t.name}: {t.evidence}; cost: {t.cost}", t.fix) for t in facts.debug_tools]
    deliberate = [t.name for t in facts.deliberate_tools]
    notes = [f"turned on deliberately (debug preset): {', '.join(deliberate)}"] if deliberate else []
    if items:
        return Finding.from_items(tip, items, notes)
    text = "no debugging tool left on (anomaly detection, profilers, NVTX, deterministic mode, CUDA_LAUNCH_BLOCKING, tracers)"
    if deliberate:
        text += f"; on deliberately through the debug preset: {', '.join(deliberate)}"
    return Finding.ok(tip, text)


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T14 adds, each at its place in the callback list."""
    out: list[Placed] = []
    if s.debug:
        out.append((at("debug_mode"), DebugMode()))
    if s.monitors.checks:
        out.append((at("debug_tools"), DebugToolsCheck()))
    return out


TIP = Tip(
    id="T14",
    slug="debug-off",
    title="Debugging tools off when not debugging",
    seeds=("A#13",),
    claim="debuggers slow training",
    does="DebugToolsCheck (monitors.checks) lists the debugging switches left on (anomaly detection, profilers, NVTX, deterministic algorithms, sync-debug mode, CUDA_LAUNCH_BLOCKING, a tracer) with what each costs; DebugMode (debug: true) turns them on deliberately and restores them after the fit.",
    gain="anomaly detection alone often makes backward several times slower",
    hurts="never by itself; the tools are right while debugging",
    check=check,
    settings=(
        Setting(
            "debug",
            bool,
            False,
            doc="T14. Turn the debugging tools on deliberately (anomaly detection, sync warnings).",
        ),
        Setting(
            "monitors.checks",
            bool,
            False,
            doc="T12 / T14 / T17. Watch for debug tools left on, gradients under evaluation and zeroed gradients.",
        ),
    ),
    callbacks=callbacks,
    parts=(
        DebugToolsCheck,
        DebugMode,
        find_debug_tools,
    ),
    lint_rules=("LS305", "LS306"),
    not_timed="the baseline already runs with the debugging tools off (doctor checks for them)",
    suite=(
        SuiteCase("debug_mode", settings={"debug": True}, compose=False),
        SuiteCase(
            "checks", settings={"monitors.checks": True}, trainer={"limit_val_batches": 1, "val_check_interval": 1}
        ),
    ),
)
