"""T12 grads-to-none: zero_grad(set_to_none=True).

Card:
    Seeds: A#11, B#12 (claim: no memset, write-only grads).
    What it does: GradsToNoneCheck (monitors.checks) watches the zero-grad step and says when
    gradients are zeroed instead of set to None, and by whom; lint finds
    zero_grad(set_to_none=False).
    Expected gain: no memset per parameter per step, and less memory between steps.
    When it hurts: code that then does p.grad += g needs the zeroed tensor: the lint rule stays
    silent there.
"""

from __future__ import annotations

from typing import Any

from lightning_speedups.callbacks import GradsToNoneCheck
from lightning_speedups.functional.grads import FIX, find_zeroed_grads
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason, names_text, plural
from lightning_speedups.tips.record import BuildContext, Placed, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T12 grads-to-none: gradients zeroed instead of set to None after the zero-grad step."""
    tip = "T12"
    if why := missing_reason(facts, "grads"):
        return Finding.not_checked(tip, why)
    z = facts.zeroed_grads
    if z is not None and z.found:
        examples = names_text(z.names, 3)
        culprit = f"; likely source: {facts.zeroed_culprit}" if facts.zeroed_culprit else ""
        return Finding.from_items(
            tip, [Item("low", f"after the zero-grad step {z.summary()} (e.g. {examples}){culprit}", FIX, "runtime")]
        )
    if facts.grads_checked:
        return Finding.ok(
            tip, f"gradients were None after the zero-grad step in {plural(facts.grads_checked, 'checked step')}"
        )
    return Finding.not_checked(tip, facts.run_note() or "no zero-grad step was watched")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T12 adds, each at its place in the callback list."""
    return [(at("grads_to_none"), GradsToNoneCheck())] if s.monitors.checks else []


TIP = Tip(
    id="T12",
    slug="grads-to-none",
    title="zero_grad(set_to_none=True)",
    seeds=("A#11", "B#12"),
    claim="no memset, write-only grads",
    does="GradsToNoneCheck (monitors.checks) watches the zero-grad step and says when gradients are zeroed instead of set to None, and by whom; lint finds zero_grad(set_to_none=False).",
    gain="no memset per parameter per step, and less memory between steps",
    hurts="code that then does p.grad += g needs the zeroed tensor: the lint rule stays silent there",
    check=check,
    uses=("monitors.checks",),
    callbacks=callbacks,
    parts=(
        GradsToNoneCheck,
        find_zeroed_grads,
    ),
    lint_rules=("LS302", "LS303"),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
    suite=(SuiteCase("check", callback=GradsToNoneCheck),),
)
