"""Property 4: a fit with a part survives save and resume, and continues exactly where it stopped.

A run planned for 4 batches is stopped after 2 (as a preempted job would be) and saves a checkpoint;
a fresh model with freshly built parts resumes from it to 4 batches. Its parameters must equal those
of an uninterrupted 4-batch run with the same parts (every batch of the kinds' loaders is the same, so
a resume that restarts the epoch's loader sees what the uninterrupted run sees). The interrupted run
is planned for the whole length so that parts whose plan depends on it (a one-cycle schedule over
``estimated_stepping_batches``) plan the same schedule in all three runs.
"""

from __future__ import annotations

import pytest

from suite.cases import ENTRIES
from suite.harness import Entry, apply_functions, build_parts, close_params, fit, params_finite, params_of
from suite.kinds import make
from suite.known_gaps import param
from suite.namespace import pl
from suite.runs import STEPS, Runs

CASES = [param(entry, entry.id, kind, "resume") for entry in ENTRIES for kind in entry.case.kinds]
TOTAL = 2 * STEPS


class _StopAfter(pl.Callback):
    """Stops the fit after ``batches`` training batches (a preempted job)."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.seen = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        self.seen += 1
        if self.seen >= self.batches:
            trainer.should_stop = True


def _fresh_fit(entry: Entry, kind: str, root: str, ckpt_path: str | None = None, stop_after: int | None = None):
    model = make(kind)
    parts = build_parts(entry.case)
    apply_functions(model, parts)
    extra = [_StopAfter(stop_after)] if stop_after is not None else []
    trainer = fit(model, parts, TOTAL, root=root, ckpt_path=ckpt_path, extra_callbacks=extra)
    return trainer, model


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_save_and_resume_continues_exactly(entry: Entry, kind: str, runs: Runs, tmp_path) -> None:
    runs.two_steps(entry, kind).raise_error()  # the part fits at all (reported once by test_acted)
    first, _ = _fresh_fit(entry, kind, str(tmp_path / "first"), stop_after=STEPS)
    checkpoint = str(tmp_path / "interrupted.ckpt")
    first.save_checkpoint(checkpoint)
    trainer, resumed = _fresh_fit(entry, kind, str(tmp_path / "resumed"), ckpt_path=checkpoint)
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
