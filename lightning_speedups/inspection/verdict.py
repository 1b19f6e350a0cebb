"""The doctor's one primary verdict: where the watched steps' time goes, with its numbers, and the one change that
addresses it in the form a script user sets it.

From the measured shares of the step (waiting for data, forward, backward, optimizer) and the findings the checks
made from them: debugging tools left on, an input-bound loader, host reads that stall the device, a step whose ops'
fixed cost (Python, dispatcher, kernel launches, whatever each op computes) takes a large share of it, full precision
where this hardware has a faster one (only where the precision check found one: never on hardware without it).
"Balanced" when no cause dominates; never a verdict without its numbers.

The op-overhead verdict comes before precision: a step that is mostly fixed cost per op gains little from faster
arithmetic (bf16 adds casts, more ops), and a larger batch or fused ops are what pay there.

Examples:
    >>> facts = Facts(data_wait_fraction=0.6, phase_seconds={"forward": 0.02, "backward": 0.03, "optimizer": 0.01})
    >>> primary_verdict([], facts).name
    'input-bound'
    >>> primary_verdict([], Facts(data_wait_fraction=0.05, phase_seconds={"forward": 0.02, "backward": 0.03})).name
    'balanced'
    >>> tiny = Facts(phase_seconds={"forward": 0.3e-3, "backward": 0.3e-3}, ops_per_step=120, op_cost_seconds=2.8e-6,
    ...              step_seconds=0.7e-3, batch_size=8)
    >>> primary_verdict([], tiny).headline.split(" (")[0]
    '~120 ops a step at ~2.8 µs fixed cost each: ~48% of the 0.70 ms step'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.functional.precision import resolve_precision
from lightning_speedups.inspection.facts import Facts
from lightning_speedups.inspection.findings import Finding

__all__ = ["INPUT_BOUND", "OP_OVERHEAD", "Verdict", "primary_verdict", "step_shares"]

#: the share of the step waiting for data from which the run is input-bound (the DataWaitMonitor's threshold)
INPUT_BOUND = 0.3
#: the share of the step in forward and backward from which a faster precision is the change that pays most
COMPUTE_BOUND = 0.5
#: the share of the step its ops' fixed cost takes (``Facts.op_overhead_fraction``) from which a larger batch or fused
#: ops is the change that pays most. At 20% a doubled batch alone takes a sample's time down 1.11x (2 / (2 - 0.2)),
#: above the few percent two runs of the same command differ by. Measured (benchmarks/RESULTS.md, a 2-core Xeon): the
#: planted tiny model (width 8, batch 8) reads 40-47%, the wide ones 3% (balanced.py) and 0.2% (fp32_compute.py).
OP_OVERHEAD = 0.2


@dataclass
class Verdict:
    """One primary cause, its numbers, and the change that addresses it."""

    name: str  # debug-tools, input-bound, host-reads, op-overhead, precision, balanced, not-measured
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


def _overhead_verdict(facts: Facts, share: float, numbers: str, shares: dict[str, float]) -> Verdict:
    """The op-overhead verdict: its numbers, and the two changes a script user makes (a larger batch in the loader;
    ops fused by ``torch.compile`` through ``LIGHTNING_SPEEDUPS``, with CUDA graphs on a GPU)."""
    ops, cost, step = facts.ops_per_step or 0, facts.op_cost_seconds or 0.0, facts.step_seconds or 0.0
    headline = (
        f"~{ops:,} ops a step at ~{cost * 1e6:.1f} µs fixed cost each: ~{share:.0%} of the {step * 1e3:.2f} ms step"
        f" ({numbers or 'shares not timed'})"
    )
    size = facts.batch_size
    larger = f"batch_size={size} -> {size * 4} or more" if size else "its batch_size"
    batch = f"a larger batch in the DataLoader ({larger}; scale the learning rate with it)"
    if facts.on_cuda:
        fix = (
            f"{batch}, or ops fused by torch.compile and launched as CUDA graphs: a YAML with"
            " `speedups: {compile: {enabled: true, mode: reduce-overhead}}` as LIGHTNING_SPEEDUPS=that.yaml"
            " (T22; compiling takes the first steps)"
        )
    else:  # fused ops halve a tiny MLP's op count on a CPU, but its compiled step measured 1.36x slower here
        fix = (
            f"{batch}; ops fused by torch.compile (a YAML with `speedups: {{compile: {{enabled: true}}}}` as"
            " LIGHTNING_SPEEDUPS=that.yaml, T22) can be slower on a CPU: bench it"
        )
    return Verdict("op-overhead", headline, fix, "T04", shares)  # the batch first; T22 where fusing pays


def _finding(findings: Sequence[Finding], tip: str) -> Optional[Finding]:
    return next((f for f in findings if f.tip == tip and f.status == "finding"), None)


def _precision_fix(facts: Facts, finding: Finding) -> str:
    """The precision verdict's fix as a script user sets it: the faster precision itself (the one T05's finding
    names, a Trainer argument), and the preset that tries it. ``fast`` keeps it only where its start-up probe times
    it faster, and the probe runs only on a run long enough to repay its trial (a 60-step script stays in fp32 under
    ``fast``: ``benchmarks/RESULTS.md``)."""
    named = re.search(r"trainer\.precision: ([\w-]+)", finding.fix or "")
    best = named.group(1) if named else resolve_precision("auto", "cuda" if facts.on_cuda else facts.device_type)[0]
    return (
        f'Trainer(precision="{best}"), or a YAML with `speedups: {{precision: {best}}}` as LIGHTNING_SPEEDUPS=that.yaml;'
        " LIGHTNING_SPEEDUPS=fast tries it at the first batch and keeps it where it times faster, on runs long enough"
        " to repay the trial"
    )


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
    overhead = facts.op_overhead_fraction
    if overhead is not None and overhead >= OP_OVERHEAD:
        return _overhead_verdict(facts, overhead, numbers, shares)
    precision = _finding(findings, "T05")
    compute = shares.get("forward", 0.0) + shares.get("backward", 0.0)
    if precision is not None and compute >= COMPUTE_BOUND:
        return Verdict(
            "precision",
            f"{compute:.0%} of the step computes in {facts.precision}, and this hardware has a faster precision"
            f" ({precision.evidence})",
            _precision_fix(facts, precision),
            "T05",
            shares,
        )
    if not shares:
        return Verdict("not-measured", "no training step was timed: the checks below are static")
    return Verdict("balanced", f"no single cause dominates the step ({numbers})", None, None, shares)
