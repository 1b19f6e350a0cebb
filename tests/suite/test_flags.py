"""Property 3: every global flag a part touches is restored after a fit, and after a fit that raised."""

from __future__ import annotations

import pytest

from lightning_speedups.tips.record import KINDS
from suite import flags
from suite.cases import ENTRIES
from suite.harness import Entry, apply_functions, build_parts, fit
from suite.kinds import SuiteBoom, make
from suite.known_gaps import param
from suite.runs import Runs

# the fits of every kind are checked; the fit that raises runs on the kinds where the part acts
# (where it sets its flags), or on the CNN for a case that acts nowhere on CPU
CASES = [param(entry, entry.id, kind, "flags_raised") for entry in ENTRIES for kind in (entry.case.kinds or ("cnn",))]


@pytest.mark.parametrize(("entry", "kind"), [param(e, e.id, k, "flags") for e in ENTRIES for k in KINDS])
def test_flags_restored_after_a_fit(entry: Entry, kind: str, runs: Runs) -> None:
    run = runs.two_steps(entry, kind)
    assert not run.flag_changes, (
        f"{entry.id} on {kind}: global state not restored after a 2-step fit: {run.flag_changes}"
    )


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_flags_restored_after_a_fit_that_raised(entry: Entry, kind: str, runs: Runs, tmp_path) -> None:
    run = runs.two_steps(entry, kind)

    saved = flags.snapshot()
    model = make(kind, raise_at=1)  # the second training batch raises
    parts = build_parts(entry.case)
    # where the part itself crashes on this kind (test_acted reports it), any exception will do
    expected = SuiteBoom if run.error is None else Exception
    try:
        with pytest.raises(expected):
            apply_functions(model, parts)
            fit(model, parts, steps=3, root=str(tmp_path))
        if run.error is None:
            # the batch-size search's trial steps meet the failure first and put the model's counters back
            # (issue 30); the search then steps aside and the real second batch raises it (issue 35): 1 batch
            expected = 1
            assert model.batches_seen == expected, (
                f"the deliberate failure came after {model.batches_seen} batches, not {expected}"
            )
    finally:
        flags.assert_restored(saved, f"after a fit of {entry.id} on {kind} that raised in training_step")
