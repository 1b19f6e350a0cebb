"""Property 2: a part that claims unchanged maths leaves outputs and gradients as they were, in eval and
train mode (``"unchanged"``: float32 tolerance; ``"dtype"``: bf16 tolerance).

Parts built from settings or callbacks are applied by a real fit that stops before the first step
(``max_steps=0``): every part's ``setup``, the model's ``configure_model`` and ``configure_optimizers``
have run when :class:`~suite.harness.ProbeAtFitStart` probes it in ``on_fit_start``, through the
model's batch-transfer hooks (which channels-last wraps) and the precision plugin's context.
"""

from __future__ import annotations

import copy

import pytest

from suite.cases import ENTRIES
from suite.harness import Entry, ProbeAtFitStart, apply_functions, build_parts, compare, fit, probe
from suite.kinds import make, materialize
from suite.known_gaps import param

CASES = [
    param(entry, entry.id, kind, "maths")
    for entry in ENTRIES
    if entry.case.maths != "changed"
    for kind in entry.case.kinds
]


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_outputs_and_gradients_unchanged(entry: Entry, kind: str, tmp_path) -> None:
    case = entry.case
    model = make(kind)
    batch = model.example_batch()
    expected = probe(materialize(copy.deepcopy(model)), batch)
    parts = build_parts(case)
    if case.function is not None:
        apply_functions(model, parts)
        got = probe(materialize(model), batch)
    else:
        probe_cb = ProbeAtFitStart(batch)
        fit(model, parts, steps=0, root=str(tmp_path), extra_callbacks=[probe_cb])
        assert probe_cb.result is not None, "the fit never reached on_fit_start"
        got = probe_cb.result
    problems = compare(expected, got, case.maths)
    assert not problems, f"{entry.id} on {kind} ({case.maths!r} maths):\n  " + "\n  ".join(problems)
