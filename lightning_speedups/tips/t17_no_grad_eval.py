"""T17 no-grad-eval: No gradients during validation / inference.

Card:
    Seeds: A#16, B#14 (claim: -).
    What it does: NoGradEvalCheck (monitors.checks) watches validation and prediction and says when
    autograd records a graph there (EvalGradWatch), with the module that did it.
    Expected gain: no autograd bookkeeping in evaluation: less time and memory.
    When it hurts: never; a model that needs gradients in evaluation (e.g. input gradients) is told,
    not changed.
"""

from __future__ import annotations

from typing import Any

from lightning_speedups.callbacks import NoGradEvalCheck
from lightning_speedups.functional import EvalGradWatch
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason, plural
from lightning_speedups.tips.record import BuildContext, Placed, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T17 no-grad-eval: validation steps that build autograd graphs."""
    tip = "T17"
    if why := missing_reason(facts, "eval"):
        return Finding.not_checked(tip, why)
    if facts.eval_findings:
        items = [Item(f.get("severity", "medium"), f["evidence"], f["fix"], "runtime") for f in facts.eval_findings]
        return Finding.from_items(tip, items)
    if facts.eval_batches_checked:
        return Finding.ok(
            tip, f"{plural(facts.eval_batches_checked, 'validation batch', 'validation batches')} ran without autograd"
        )
    if facts.has_eval_loop is False:
        return Finding.not_checked(
            tip,
            "the model has no validation loop (no validation_step or no val loader): nothing evaluates during fit",
            "NoGradEvalCheck() on trainer.validate / test / predict",
        )
    return Finding.not_checked(
        tip, facts.run_note() or "no validation batch ran in the watched steps", "trainer.num_sanity_val_steps > 0"
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T17 adds, each at its place in the callback list."""
    return [(at("no_grad_eval"), NoGradEvalCheck())] if s.monitors.checks else []


#: the check watches evaluation: the suite runs one validation batch after every training step
_WITH_VALIDATION = {"limit_val_batches": 1, "val_check_interval": 1}


TIP = Tip(
    id="T17",
    slug="no-grad-eval",
    title="No gradients during validation / inference",
    seeds=("A#16", "B#14"),
    claim="-",
    does="NoGradEvalCheck (monitors.checks) watches validation and prediction and says when autograd records a graph there (EvalGradWatch), with the module that did it.",
    gain="no autograd bookkeeping in evaluation: less time and memory",
    hurts="never; a model that needs gradients in evaluation (e.g. input gradients) is told, not changed",
    check=check,
    uses=("monitors.checks",),
    callbacks=callbacks,
    parts=(
        NoGradEvalCheck,
        EvalGradWatch,
    ),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
    suite=(SuiteCase("check", callback=NoGradEvalCheck, trainer=_WITH_VALIDATION),),
)
