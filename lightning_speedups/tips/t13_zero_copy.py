"""T13 zero-copy: torch.as_tensor / from_numpy instead of torch.tensor.

Card:
    Seeds: A#12, B#6 (claim: no copy).
    What it does: zero_copy_collate builds batches from numpy arrays without copying them
    (torch.as_tensor); lint finds torch.tensor(<numpy array>) and torch.tensor([tensors]).
    Expected gain: 1.11x in training measured with the zero-copy collate.
    When it hurts: a shared buffer must not be written to while the batch is in use.
"""

from __future__ import annotations

from lightning_speedups.data import zero_copy_collate
from lightning_speedups.inspection import Facts, Finding
from lightning_speedups.tips.common import lint_only
from lightning_speedups.tips.record import Tip


def check(facts: Facts) -> Finding:
    """T13 zero-copy: ``torch.tensor(<numpy array>)`` copies (lint of the model's and data's source)."""
    return lint_only("T13", facts, "torch.tensor(<numpy array>) or torch.tensor([tensors])")


TIP = Tip(
    id="T13",
    slug="zero-copy",
    title="torch.as_tensor / from_numpy instead of torch.tensor",
    seeds=("A#12", "B#6"),
    claim="no copy",
    does="zero_copy_collate builds batches from numpy arrays without copying them (torch.as_tensor); lint finds torch.tensor(<numpy array>) and torch.tensor([tensors]).",
    gain="1.11x in training measured with the zero-copy collate",
    hurts="a shared buffer must not be written to while the batch is in use",
    check=check,
    parts=(zero_copy_collate,),
    lint_rules=("LS101", "LS105"),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
)
