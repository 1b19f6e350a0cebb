"""T20 on-device: Create tensors directly on the device.

Card:
    Seeds: B#4 (claim: -).
    What it does: lint finds tensors built on the CPU and then moved (torch.zeros(...).cuda(),
    .to(device) of a fresh tensor) in the step.
    Expected gain: one allocation instead of two and no host-to-device copy per call.
    When it hurts: moving a random constructor to the device changes the random stream.
"""

from __future__ import annotations

from lightning_speedups.inspection import Facts, Finding
from lightning_speedups.tips.common import lint_only
from lightning_speedups.tips.record import Tip


def check(facts: Facts) -> Finding:
    """T20 on-device: tensors created on the CPU and then moved (lint of the model's and data's source)."""
    return lint_only("T20", facts, "tensor created on the CPU and then moved with .cuda()/.to(device)")


TIP = Tip(
    id="T20",
    slug="on-device",
    title="Create tensors directly on the device",
    seeds=("B#4",),
    claim="-",
    does="lint finds tensors built on the CPU and then moved (torch.zeros(...).cuda(), .to(device) of a fresh tensor) in the step.",
    gain="one allocation instead of two and no host-to-device copy per call",
    hurts="moving a random constructor to the device changes the random stream",
    check=check,
    lint_rules=("LS203",),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
)
