"""The doctor's result type: one :class:`Finding` per tip, with the evidence items behind it.

A check builds its finding from the tip id alone (``Finding.ok("T16", ...)``); the tip's slug and
title, and the dotted name of the check, are filled in by whoever runs the checks
(:func:`lightning_speedups.advisor.run_checks`, above the tip registry), so this module needs no
registry and the tip records can build findings without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "MEASURED_VERDICTS",
    "PRINCIPLES",
    "PRINCIPLE_OF",
    "SEVERITIES",
    "STATUSES",
    "Finding",
    "Item",
    "Measured",
    "severity_rank",
    "worst",
]

#: Severities, highest first (the same words as the runtime guards use).
SEVERITIES = ("high", "medium", "low")
#: ``finding``: the tip applies and something should change; ``ok``: checked and fine;
#: ``not-checked``: the check cannot run here, with the reason.
STATUSES = ("finding", "ok", "not-checked")

Status = Literal["finding", "ok", "not-checked"]

#: The three principles of the second seed document (and the rest: compute), each with its tips.
PRINCIPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "io": ("Time on I/O: keep the device fed", ("T02", "T13", "T18", "T19")),
    "overlap": ("Overlap transfers, loading and compute", ("T03", "T08", "T20", "T21")),
    "memory": ("Use memory well: memory saved buys a larger batch", ("T04", "T05", "T09", "T10", "T12", "T16", "T17")),
    "compute": (
        "Compute: faster kernels for the same maths",
        ("T01", "T06", "T07", "T11", "T14", "T15", "T22", "T23", "T24"),
    ),
}
PRINCIPLE_OF: dict[str, str] = {tip: key for key, (_, tips) in PRINCIPLES.items() for tip in tips}


def severity_rank(severity: str | None) -> int:
    """3 for high, 2 for medium, 1 for low, 0 for none."""
    return {"high": 3, "medium": 2, "low": 1}.get(severity or "", 0)


def worst(severities: list[str | None]) -> str | None:
    """The highest of ``severities`` (``None`` when empty)."""
    best = max(severities, key=severity_rank, default=None)
    return best if severity_rank(best) else None


@dataclass
class Item:
    """One piece of evidence with its fix.

    Attributes:
        severity: ``"high"``, ``"medium"`` or ``"low"``.
        evidence: what was observed, in numbers.
        fix: the exact preset key, callback, or code change.
        source: ``"static"`` (model / trainer / loaders), ``"runtime"`` (the training steps) or
            ``"lint"`` (the user's source files).
    """

    severity: str
    evidence: str
    fix: str
    source: str = "static"

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "evidence": self.evidence, "fix": self.fix, "source": self.source}


#: What ``doctor --verify`` measured for a finding: ``pays`` (a gain clear of the noise), ``no-gain``
#: (within the noise or below ``--min-gain``), ``slower`` (the interval lies below 1.0), ``failed`` (the
#: fix did not run here), ``not-timed`` (bench cannot time this tip on this setup, with the reason).
MEASURED_VERDICTS = ("pays", "no-gain", "slower", "failed", "not-timed")
#: the verdicts that demote a finding: measured here, it does not pay
DEMOTING = ("no-gain", "slower", "failed")


@dataclass
class Measured:
    """The measured gain of one finding's fix on the user's own setup (``doctor --verify``).

    Attributes:
        verdict: one of :data:`MEASURED_VERDICTS`.
        figure: the measurement in words, e.g. ``"1.18x samples/s (95% CI 1.10-1.25, 3 paired repeats)"``;
            for ``not-timed`` the reason.
        ratio: the gain (> 1 is better: samples/s for a speed tip, memory saved for a memory tip).
        ci: its 95% interval from the paired repeats.
        goal: ``"speed"`` or ``"memory"``: what the ratio measures.
        severity_before: the finding's severity before a demotion.
    """

    verdict: str
    figure: str
    ratio: float | None = None
    ci: tuple[float | None, float | None] = (None, None)
    goal: str = "speed"
    severity_before: str | None = None

    @property
    def demotes(self) -> bool:
        return self.verdict in DEMOTING

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "figure": self.figure,
            "ratio": self.ratio,
            "ci95": list(self.ci),
            "goal": self.goal,
            "severity_before": self.severity_before,
        }


@dataclass
class Finding:
    """What the doctor says about one tip.

    Attributes:
        tip: registry id (``"T16"``).
        slug: registry slug (``"conv-bias"``; filled in by :func:`~lightning_speedups.advisor.run_checks`).
        status: ``"finding"``, ``"ok"`` or ``"not-checked"``.
        severity: the highest item severity for a finding, ``None`` otherwise.
        evidence: the evidence in numbers (for ``ok``: what was checked; for ``not-checked``: why not).
        fix: the exact change for a finding; for ``not-checked`` how to get it checked; ``None`` for ``ok``.
        title: the tip's title (filled in with the slug).
        check: dotted name of the check that produced it (``lightning_speedups.tips.t16_conv_bias:check``,
            filled in with the slug).
        items: the individual pieces of evidence of a finding.
        notes: extra context (what was fine, what could not be checked).
        measured: what ``doctor --verify`` measured for the fix on this setup (``None``: not verified).
    """

    tip: str
    status: Status
    severity: str | None
    evidence: str
    fix: str | None
    slug: str = ""
    title: str = ""
    check: str = ""
    items: list[Item] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    measured: Measured | None = None

    @property
    def demoted(self) -> bool:
        """Measured on this setup (``doctor --verify``), the fix does not pay: it no longer counts for ``--fail-on``."""
        return self.measured is not None and self.measured.demotes

    @property
    def principle(self) -> str:
        return PRINCIPLE_OF.get(self.tip, "compute")

    def at_least(self, severity: str) -> bool:
        """Whether this is a finding of ``severity`` or higher (a demoted one never is)."""
        return self.status == "finding" and not self.demoted and severity_rank(self.severity) >= severity_rank(severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tip": self.tip,
            "slug": self.slug,
            "title": self.title,
            "status": self.status,
            "severity": self.severity,
            "evidence": self.evidence,
            "fix": self.fix,
            "principle": self.principle,
            "check": self.check,
            "items": [i.to_dict() for i in self.items],
            "notes": list(self.notes),
            "measured": self.measured.to_dict() if self.measured is not None else None,
        }

    # -- constructors -------------------------------------------------------------------------------
    @classmethod
    def from_items(cls, tip: str, items: list[Item], notes: list[str] | None = None) -> Finding:
        """A finding made of ``items`` (evidence and fixes joined, the highest severity)."""
        if not items:
            raise ValueError("a finding needs at least one item")
        fixes: list[str] = []
        for i in items:
            if i.fix and i.fix not in fixes:
                fixes.append(i.fix)
        return cls(
            tip=tip,
            status="finding",
            severity=worst([i.severity for i in items]),
            evidence="; ".join(i.evidence for i in items),
            fix="; ".join(fixes),
            items=list(items),
            notes=list(notes or []),
        )

    @classmethod
    def ok(cls, tip: str, evidence: str, notes: list[str] | None = None) -> Finding:
        """The tip was checked and nothing needs to change."""
        return cls(tip=tip, status="ok", severity=None, evidence=evidence, fix=None, notes=list(notes or []))

    @classmethod
    def not_checked(cls, tip: str, reason: str, how: str | None = None, notes: list[str] | None = None) -> Finding:
        """The check cannot run here: ``reason``; ``how`` says where or how it can."""
        return cls(tip=tip, status="not-checked", severity=None, evidence=reason, fix=how, notes=list(notes or []))

    def with_items(self, extra: list[Item], note: str | None = None) -> Finding:
        """This result with more evidence items (lint findings, say): becomes a finding."""
        if not extra:
            return self
        items = (list(self.items) if self.status == "finding" else []) + list(extra)
        notes = list(self.notes)
        if self.status != "finding":
            notes.insert(0, f"{'checked' if self.status == 'ok' else 'not checked here'}: {self.evidence}")
        if note:
            notes.append(note)
        merged = Finding.from_items(self.tip, items, notes)
        return merged.described(self.slug, self.title, self.check)

    def described(self, slug: str, title: str, check: str = "") -> Finding:
        """This result with the tip's registry slug and title and the check's dotted name (in place)."""
        self.slug, self.title, self.check = slug, title, check or self.check
        return self
