"""The doctor's one primary verdict: where the watched steps' time goes, with its numbers, and the one change that
addresses it in the form a script user sets it.

From the measured shares of the step (waiting for data, forward, backward, optimizer) and the findings the checks
made from them: debugging tools left on, an input-bound loader, host reads that stall the device, full precision
where this hardware has a faster one (only where the precision check found one: never on hardware without it).
"Balanced" when no cause dominates; never a verdict without its numbers.

Examples:
    >>> facts = Facts(data_wait_fraction=0.6, phase_seconds={"forward": 0.02, "backward": 0.03, "optimizer": 0.01})
    >>> primary_verdict([], facts).name
    'input-bound'
    >>> primary_verdict([], Facts(data_wait_fraction=0.05, phase_seconds={"forward": 0.02, "backward": 0.03})).name
    'balanced'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.inspection.facts import Facts
from lightning_speedups.inspection.findings import Finding

__all__ = ["INPUT_BOUND", "Verdict", "primary_verdict", "step_shares"]

#: the share of the step waiting for data from which the run is input-bound (the DataWaitMonitor's threshold)
INPUT_BOUND = 0.3
#: the share of the step in forward and backward from which a faster precision is the change that pays most
COMPUTE_BOUND = 0.5


@dataclass
class Verdict:
    """One primary cause, its numbers, and the change that addresses it."""

    name: str  # debug-tools, input-bound, host-reads, precision, balanced, not-measured
    headline: str
    fix: Optional[str] = None
    tip: Optional[str] = None
    shares: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        fix = f" -> {self.fix}" if self.fix else ""
        return f"{self.name.upper()}: {self.headline}{fix}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "headline": self.headline, "fix": self.fix, "tip": self.tip, "shares": self.shares}


def step_shares(facts: Facts) -> dict[str, float]:
    """The step's time split into data wait, forward, backward and optimizer (fractions summing to 1), from the
    measured data-wait share and the phases' median seconds; ``{}`` when nothing was measured."""
    phases = {k: v for k, v in facts.phase_seconds.items() if v > 0}
    wait = facts.data_wait_fraction
    if not phases:
        return {"data": wait} if wait is not None else {}
    busy = sum(phases.values())
    rest = 1.0 - (wait or 0.0)
    out = {"data": wait or 0.0} if wait is not None else {}
    out.update({name: rest * seconds / busy for name, seconds in phases.items()})
    return out


def _shares_text(shares: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares.items())


def _finding(findings: Sequence[Finding], tip: str) -> Optional[Finding]:
    return next((f for f in findings if f.tip == tip and f.status == "finding"), None)


def primary_verdict(findings: Sequence[Finding], facts: Facts) -> Verdict:
    """The one cause that dominates the watched steps (see the module docstring)."""
    shares = step_shares(facts)
    numbers = _shares_text(shares)
    debug = _finding(findings, "T14")
    if debug is not None and debug.severity == "high":
        return Verdict("debug-tools", f"{debug.evidence} (step: {numbers or 'not timed'})", debug.fix, "T14", shares)
    wait = facts.data_wait_fraction
    if wait is not None and wait >= INPUT_BOUND:
        loader = _finding(findings, "T02")  # its fix says what pays on this machine (workers only where CPUs are free)
        fix = (
            loader.fix
            if loader is not None and loader.fix
            else "LIGHTNING_SPEEDUPS=fast (loader workers for this machine)"
        )
        return Verdict("input-bound", f"{wait:.0%} of the step waits for data ({numbers})", fix, "T02", shares)
    syncs = _finding(findings, "T08")
    if syncs is not None and facts.on_cuda and syncs.at_least("medium"):
        return Verdict("host-reads", f"{syncs.evidence} ({numbers or 'step not timed'})", syncs.fix, "T08", shares)
    precision = _finding(findings, "T05")
    compute = shares.get("forward", 0.0) + shares.get("backward", 0.0)
    if precision is not None and compute >= COMPUTE_BOUND:
        return Verdict(
            "precision",
            f"{compute:.0%} of the step computes in {facts.precision}, and this hardware has a faster precision"
            f" ({precision.evidence})",
            "LIGHTNING_SPEEDUPS=fast (the precision it tries on the first batch)",
            "T05",
            shares,
        )
    if not shares:
        return Verdict("not-measured", "no training step was timed: the checks below are static")
    return Verdict("balanced", f"no single cause dominates the step ({numbers})", None, None, shares)
