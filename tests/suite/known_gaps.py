"""Known gaps: where a part crashes or misbehaves on a model kind today (issue 12).

One table. Each entry is expected to fail (``xfail(strict=True)``): when a fix lands the test passes,
the strict xfail fails, and the entry must be removed here. Keys:

- ``(case id, kind, check)`` with ``check`` one of ``"acted"``, ``"maths"``, ``"flags"``
  (after a fit), ``"flags_raised"`` (after a fit that raised), ``"resume"``;
- ``(case id, case id, kind)`` in :data:`PAIR_GAPS` for the pairwise composition runs.
"""

from __future__ import annotations

from typing import Any

import pytest

CHECKS = ("acted", "maths", "flags", "flags_raised", "resume")

_ALL = ("cnn", "transformer", "manual", "configure_model", "scheduler")


GAPS: dict[tuple[str, str, str], str] = {
    # T11: exact resume fails with Lightning's own DDPStrategy too (not the preset's settings)
    ("T11-one_process", "cnn", "resume"): (
        "a resumed 1-process DDP run differs from the uninterrupted one by ~1e-2; plain Lightning"
        " DDPStrategy() (no pack settings) differs the same, so the cause is Lightning/torch DDP resume"
    ),
    # T11: exact in-process resume with a one-process FSDP strategy (the 2-process run in tests/distributed
    # resumes bit-identically from its sharded checkpoint)
    **{
        ("T11-fsdp_one_process", kind, "resume"): (
            "a resumed 1-process FSDP run differs from the uninterrupted one by ~1e-2, like the 1-process DDP"
            " case above; across 2 gloo processes (tests/distributed) the resume is exact"
        )
        for kind in ("cnn", "transformer")
    },
}

PAIR_GAPS: dict[tuple[str, str, str], str] = {}


def gap(case_id: str, kind: str, check: str) -> str | None:
    assert check in CHECKS, check
    return GAPS.get((case_id, kind, check))


def pair_gap(a: str, b: str, kind: str) -> str | None:
    return PAIR_GAPS.get((a, b, kind)) or PAIR_GAPS.get((b, a, kind))


def param(value: Any, case_id: str, kind: str, check: str) -> Any:
    """``pytest.param`` for one (case, kind), marked xfail(strict) where the table lists a gap."""
    reason = gap(case_id, kind, check)
    marks = [pytest.mark.xfail(strict=True, reason=f"issue 12: {reason}")] if reason else []
    return pytest.param(value, kind, id=f"{case_id}-{kind}", marks=marks)
