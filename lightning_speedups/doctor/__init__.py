"""``doctor``: which of the tips T01-T24 apply to a training setup, each with evidence and the exact fix.

- ``python -m lightning_speedups doctor [--config CONFIG ...] [--steps 5] [--json] [--fail-on high]``
  builds the config's model, data and Trainer as ``fit`` would, runs a few training steps with the
  pack's monitors attached, and reports one result per tip (:mod:`lightning_speedups.doctor.runner`).
- :class:`~lightning_speedups.advisor.SpeedAdvisor` runs the same checks inside a user's own ``fit``
  and prints the report at the end (``speedups.monitors.advisor: true`` in a preset).
- ``doctor --verify`` (:func:`~lightning_speedups.doctor.verify.verify_findings`) then times each
  finding's fix with bench on this setup, shows the measured gain and demotes what does not pay.
- :func:`~lightning_speedups.advisor.run_checks` turns collected
  :class:`~lightning_speedups.inspection.Facts` into one :class:`Finding` per tip; each tip's
  record (``lightning_speedups/tips/tNN_*.py``) holds its check.

This package holds only the command; the names below are re-exported for Python users.

Example::

    from lightning_speedups.doctor import diagnose
    result = diagnose(["--config", "fast.yaml"], steps=5)
    for f in result.findings:
        if f.status == "finding":
            print(f.tip, f.severity, f.evidence, "->", f.fix)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DoctorResult",
    "Finding",
    "Item",
    "Measured",
    "SpeedAdvisor",
    "VerifyOptions",
    "VerifyReport",
    "diagnose",
    "main",
    "run_checks",
    "verify_findings",
]


def __getattr__(name: str) -> Any:  # lazy: `import lightning_speedups.doctor` stays cheap
    if name in ("Finding", "Item", "Measured"):
        from lightning_speedups import inspection

        return getattr(inspection, name)
    if name in ("SpeedAdvisor", "run_checks"):
        from lightning_speedups import advisor

        return getattr(advisor, name)
    if name in ("DoctorResult", "diagnose", "main"):
        from lightning_speedups.doctor import runner

        return getattr(runner, name)
    if name in ("VerifyOptions", "VerifyReport", "verify_findings"):
        from lightning_speedups.doctor import verify

        return getattr(verify, name)
    raise AttributeError(f"module 'lightning_speedups.doctor' has no attribute {name!r}")
