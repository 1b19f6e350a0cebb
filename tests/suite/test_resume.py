"""Property 4: a fit with a part survives save and resume, and continues exactly where it stopped.

The 2-step fit (shared with test_acted) saves a checkpoint; a fresh model with freshly built parts
resumes from it to 4 batches. Its parameters must equal those of an uninterrupted 4-batch run with the
same parts (every batch of the kinds' loaders is the same, so a resume that restarts the epoch's
loader sees what the uninterrupted run sees).
"""

from __future__ import annotations

import pytest

from suite.cases import ENTRIES
from suite.harness import Entry, apply_functions, build_parts, close_params, fit, params_finite, params_of
from suite.kinds import make
from suite.known_gaps import param
from suite.runs import STEPS, Runs

CASES = [param(entry, entry.id, kind, "resume") for entry in ENTRIES for kind in entry.case.kinds]
TOTAL = 2 * STEPS


def _fresh_fit(entry: Entry, kind: str, root: str, ckpt_path: str | None = None):
    model = make(kind)
    parts = build_parts(entry.case)
    apply_functions(model, parts)
    trainer = fit(model, parts, TOTAL, root=root, ckpt_path=ckpt_path)
    return trainer, model


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_save_and_resume_continues_exactly(entry: Entry, kind: str, runs: Runs, tmp_path) -> None:
    run = runs.two_steps(entry, kind)
    run.raise_error()
    assert run.checkpoint is not None
    trainer, resumed = _fresh_fit(entry, kind, str(tmp_path / "resumed"), ckpt_path=run.checkpoint)
    straight_trainer, straight = _fresh_fit(entry, kind, str(tmp_path / "straight"))
    problems = []
    if trainer.global_step != TOTAL * resumed.steps_per_batch:
        problems.append(
            f"global_step {trainer.global_step} after resuming to max_steps={TOTAL * resumed.steps_per_batch}"
            f" ({TOTAL} steps of {resumed.steps_per_batch} optimizer step(s) per batch)"
        )
    if straight_trainer.global_step != trainer.global_step:
        problems.append(f"global_step {trainer.global_step} resumed, {straight_trainer.global_step} uninterrupted")
    if resumed.batches_seen != straight.batches_seen:
        problems.append(
            f"{resumed.batches_seen} training batches resumed (2 + the rest), {straight.batches_seen} uninterrupted"
        )
    bad = params_finite(resumed)
    if bad:
        problems.append(f"non-finite parameters after the resume: {bad[:4]}")
    problems += [
        f"resumed != uninterrupted: {p}"
        for p in close_params(params_of(resumed), params_of(straight), atol=1e-6, rtol=1e-5)
    ]
    assert not problems, f"{entry.id} on {kind}:\n  " + "\n  ".join(problems)
