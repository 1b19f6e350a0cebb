"""Property 5: every pair of composable cases (of different tips) fits together on the CNN and on the
transformer: no crash, a finite loss, the global flags restored.

One test per kind loops over every pair in-process (a test per pair would cost pytest's own overhead
several hundred times) and reports every failing pair in one message. A pair listed in
``known_gaps.PAIR_GAPS`` must still fail; when it passes, the message says to remove it.
"""

from __future__ import annotations

import itertools
import math

import pytest

from suite import flags
from suite.cases import ENTRIES
from suite.harness import apply_functions, build_parts, fit
from suite.kinds import make
from suite.known_gaps import pair_gap

COMPOSABLE = [e for e in ENTRIES if e.case.compose]
PAIRS = [(a, b) for a, b in itertools.combinations(COMPOSABLE, 2) if a.tip_id != b.tip_id]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:240]


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_every_pair_composes(kind: str, tmp_path) -> None:
    assert PAIRS, "no composable pairs"
    failures: list[str] = []
    fixed: list[str] = []
    for a, b in PAIRS:
        saved = flags.snapshot()
        problem = None
        try:
            model = make(kind)
            parts = build_parts(a.case, b.case)
            apply_functions(model, parts)
            fit(model, parts, 2, root=str(tmp_path))
            if model.last_loss is None or not math.isfinite(float(model.last_loss)):
                problem = f"loss {model.last_loss}"
        except Exception as err:
            problem = _first_line(err)
        leaked = flags.changes(saved, flags.snapshot())
        flags.restore(saved)
        if leaked:
            problem = (problem + "; " if problem else "") + "global state not restored: " + "; ".join(leaked)
        gap = pair_gap(a.id, b.id, kind)
        if problem and not gap:
            failures.append(f"{a.id} + {b.id}: {problem}")
        elif gap and not problem:
            fixed.append(f"{a.id} + {b.id} passes now: remove it from known_gaps.PAIR_GAPS ({gap})")
    assert not failures and not fixed, f"{len(failures)} of {len(PAIRS)} pairs fail on {kind}:\n  " + "\n  ".join(
        failures + fixed
    )
