"""Property 1: a part acts on the kinds it applies to (a part that skipped does not pass), and on the
other kinds it never crashes and says what it did."""

from __future__ import annotations

import pytest

from lightning_speedups.tips.record import KINDS
from suite.cases import ENTRIES
from suite.harness import Entry, status_problems
from suite.known_gaps import param
from suite.runs import Runs

CASES = [param(entry, entry.id, kind, "acted") for entry in ENTRIES for kind in KINDS]


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_part_acts_where_it_applies(entry: Entry, kind: str, runs: Runs) -> None:
    run = runs.two_steps(entry, kind)
    run.raise_error()
    case = entry.case
    applies = kind in case.kinds
    problems = status_problems(run.parts, must_be_active=applies)
    if applies:
        if case.function is not None:
            if not all(run.function_results):
                problems.append(f"the function returned a falsy result {run.function_results!r}: it did nothing")
            if run.before == run.after:
                problems.append("the function returned but the model is unchanged (modules, parameters, buffers)")
        elif not (run.parts.pack_callbacks or run.parts.notes or case.acted is not None):
            problems.append(
                "the case builds no pack callback, no note and has no `acted` check: nothing shows it acted"
            )
        if case.acted is not None and not problems:
            try:
                case.acted(run.trainer, run.model, run.parts.callbacks)
            except AssertionError as err:
                problems.append(f"acted() failed: {err}")
    assert not problems, (
        f"{entry.id} on {kind}" + ("" if applies else " (not one of its kinds)") + ":\n  " + "\n  ".join(problems)
    )
