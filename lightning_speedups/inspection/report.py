"""The report of findings: a rich terminal report and one JSON object.

Printed by ``python -m lightning_speedups doctor`` and by the
:class:`~lightning_speedups.advisor.SpeedAdvisor` at the end of a user's fit. It reads only
findings and facts (each finding carries its tip's slug and title), so it sits in the inspection
layer, below the tip registry.

The terminal report opens with what ran (model, data, device, precision, steps) and the one primary verdict
(:func:`~lightning_speedups.inspection.verdict.primary_verdict`: where the step time goes, its numbers, the
change), then a summary in
the three principles of the second seed document (time on I/O, overlap, memory; the rest is
compute), then the findings grouped by severity (each with its evidence and fix), then the tips
that were checked and found fine, then those not checked here with the reason.

``--json`` prints one object::

    {"tool": "lightning_speedups doctor", "version": 2, "model": ..., "device": ..., "steps": ...,
     "verdict": {"name": "input-bound", "headline": "93% of the step waits for data (data 93%, forward 2%,
                 ...)", "fix": "LIGHTNING_SPEEDUPS=fast ...", "tip": "T02",
                 "shares": {"data": 0.93, "forward": 0.02, "backward": 0.03, "optimizer": 0.02}},
     "op_overhead": {"ops_per_step": 118, "op_cost_seconds": 2.8e-06, "step_seconds": 0.00071, "share": 0.47,
                     "reason": null},
     "exit_code": 0, "fail_on": "high", "counts": {"high": 0, "medium": 1, "low": 3, "ok": 12,
     "not-checked": 8, "demoted": 0}, "principles": {...}, "error": null, "verify": null,
     "findings": [{"tip": "T01", "slug": "lr-schedule", "status": "finding", "severity": "low",
                   "evidence": "...", "fix": "...", "title": ..., "principle": ..., "check": ...,
                   "items": [...], "notes": [...], "measured": null}, ...]}

with exactly one entry per tip T01-T24 in ``findings``. ``verdict.name`` is one of ``debug-tools``,
``input-bound``, ``host-reads``, ``op-overhead``, ``precision``, ``balanced``, ``not-measured`` (version 2 added
``verdict``; the doctor on a command, ``doctor -- python train.py``, adds ``watched``: ``trainer``, ``steps``,
``stopped_early``, ``command``). ``op_overhead`` is the fixed cost per op, from the batches after the watched steps
(no monitor on): ``ops_per_step`` (the top-level operator calls of one training step: forward, backward, optimizer),
``op_cost_seconds`` (this device's fixed cost of one op), ``step_seconds`` (the median step, data wait aside) and
``share`` (``ops_per_step x op_cost_seconds / step_seconds``, at most 1); each ``null`` when not measured, with
``reason``. With ``doctor --verify``, ``verify`` says what
was timed (``timed``, ``repeats``, ``steps``, ``noise_floor``, ``seconds``, ``notes``, ``error``) and
each finding's ``measured`` holds its ``verdict`` (``pays`` / ``no-gain`` / ``slower`` / ``failed`` /
``not-timed``), ``figure``, ``ratio``, ``ci95`` and, when demoted, ``severity_before``. A demoted
finding is listed apart in the terminal report and never counts for ``--fail-on``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from lightning_speedups.inspection.facts import Facts
from lightning_speedups.inspection.findings import PRINCIPLES, SEVERITIES, Finding
from lightning_speedups.inspection.verdict import primary_verdict
from lightning_speedups.inspection.words import device_words

__all__ = ["counts", "op_overhead", "principle_summary", "print_report", "to_dict", "to_json"]

_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "cyan"}


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    """How many findings of each severity, and how many ok / not-checked."""
    out = {s: 0 for s in SEVERITIES}
    out.update({"ok": 0, "not-checked": 0, "demoted": 0})
    for f in findings:
        if f.status == "finding" and f.severity in out:
            out[f.severity] += 1
            out["demoted"] += int(f.demoted)
        elif f.status in out:
            out[f.status] += 1
    return out


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "?"


def principle_summary(findings: Sequence[Finding], facts: Facts) -> dict[str, dict[str, Any]]:
    """Per principle: its title, a headline figure, and the tips that apply."""
    out: dict[str, dict[str, Any]] = {}
    for key, (title, tips) in PRINCIPLES.items():
        found = [f for f in findings if f.tip in tips and f.status == "finding"]
        unchecked = [f.tip for f in findings if f.tip in tips and f.status == "not-checked"]
        if key == "io":
            headline = (
                f"{_pct(facts.data_wait_fraction)} of step time waiting for data"
                if facts.data_wait_fraction is not None
                else "data wait not measured"
            )
        elif key == "overlap":
            if facts.sync_watcher is not None:
                w = facts.sync_watcher
                headline = f"{w.user_syncs} device syncs in your code, {w.total} in all, over {w.windows} steps"
            else:
                headline = (
                    f"batches stay on {facts.device_type}: nothing to overlap"
                    if not facts.on_cuda
                    else "syncs not counted"
                )
        elif key == "memory":
            if facts.peak_memory and facts.total_memory:
                headline = f"peak {facts.peak_memory / 2**30:.1f} GiB of {facts.total_memory / 2**30:.1f} GiB"
            else:
                headline = f"{facts.n_params:,} parameters, batch size {facts.batch_size or '?'}"
        else:
            headline = f"{facts.precision} on {device_words(facts)}"
        out[key] = {
            "title": title,
            "headline": headline,
            "tips": [f.tip for f in found],
            "worst": next((s for s in SEVERITIES if any(f.severity == s for f in found)), None),
            "not_checked": unchecked,
        }
    return out


def _meta(facts: Facts, result: Any = None) -> dict[str, Any]:
    return {
        "model": facts.model_name or None,
        "data": facts.datamodule_name or None,
        "device": device_words(facts) if facts.collected else None,
        "precision": facts.precision if facts.collected else None,
        "steps": facts.steps_run,
        "configured_devices": facts.configured_devices,
        "configs": list(getattr(result, "configs", []) or []),
        "options": list(getattr(result, "options", []) or []),
        "seconds": round(float(getattr(result, "seconds", 0.0) or facts.seconds or 0.0), 2),
    }


def op_overhead(facts: Facts) -> dict[str, Any]:
    """The fixed cost per op of the run's step, as the JSON holds it (see the module docstring)."""
    share = facts.op_overhead_fraction
    return {
        "ops_per_step": facts.ops_per_step,
        "op_cost_seconds": facts.op_cost_seconds,
        "step_seconds": facts.step_seconds,
        "share": round(share, 4) if share is not None else None,
        "reason": facts.unavailable.get("op_overhead"),
    }


def to_dict(result: Any, fail_on: str = "high") -> dict[str, Any]:
    """The JSON object of a :class:`~lightning_speedups.doctor.runner.DoctorResult`."""
    findings = list(result.findings)
    facts = result.facts
    doc: dict[str, Any] = {"tool": "lightning_speedups doctor", "version": 2}
    doc.update(_meta(facts, result))
    doc["verdict"] = primary_verdict(findings, facts).to_dict()
    doc["op_overhead"] = op_overhead(facts)
    doc.update(
        {
            "exit_code": result.exit_code(fail_on),
            "fail_on": fail_on,
            "error": result.error or result.run_error,
            "counts": counts(findings),
            "principles": principle_summary(findings, facts) if findings else {},
            "verify": result.verify.to_dict() if getattr(result, "verify", None) is not None else None,
            "findings": [f.to_dict() for f in findings],
        }
    )
    return doc


def to_json(result: Any, fail_on: str = "high") -> str:
    """One JSON object (see the module docstring)."""
    return json.dumps(to_dict(result, fail_on), indent=2, default=str)


def _console(console: Any = None) -> Any:
    from rich.console import Console

    if console is not None:
        return console
    if sys.stdout.isatty():
        return Console()
    try:
        width = int(os.environ.get("COLUMNS", "110"))
    except ValueError:
        width = 110
    return Console(width=max(60, width))


def print_report(
    findings: Sequence[Finding],
    facts: Facts,
    *,
    show_ok: bool = True,
    title: str = "lightning_speedups doctor",
    result: Any = None,
    fail_on: str | None = None,
    console: Any = None,
) -> None:
    """Print the report with rich (to ``console``, default stdout)."""
    from rich.markup import escape
    from rich.panel import Panel

    con = _console(console)
    con.print(Panel(_header(facts, result), title=title, expand=False))
    con.print(f"[bold]Verdict[/bold] {escape(primary_verdict(findings, facts).line())}\n")
    _print_principles(con, findings, facts)
    _print_findings(con, findings)
    _print_fine_and_unchecked(con, findings, show_ok)
    _print_tail(con, findings, result, fail_on)


def _header(facts: Facts, result: Any) -> Any:
    """The report's header: the model, the data, the device, the precision, the steps, the configs and options."""
    from rich.text import Text

    meta = _meta(facts, result)
    head = Text()
    head.append(f"{meta['model'] or 'model ?'}", style="bold")
    if meta["data"]:
        head.append(f" on {meta['data']}")
    head.append(
        f"  ·  {meta['device'] or facts.device_type}  ·  {meta['precision'] or facts.precision}  ·  {meta['steps']} training step(s)"
    )
    if meta["seconds"]:
        head.append(f" in {meta['seconds']:.1f} s")
    if meta["configured_devices"]:
        head.append(f"\nthe config asks for {meta['configured_devices']} devices; the doctor ran one")
    if result is not None:
        cfgs, opts = meta["configs"], meta["options"]
        if cfgs:
            head.append("\nconfig: " + ", ".join(cfgs))
        elif facts.model_name == "DigitsCNN":
            head.append("\nconfig: none, the embedded default (DigitsCNN on the scikit-learn digits)")
        if opts:
            head.append("\noptions: " + " ".join(opts))
        verified = getattr(result, "verify", None)
        if verified is not None:
            head.append("\n" + _verify_line(verified))
    if facts.run_error:
        head.append(f"\nthe training steps failed: {facts.run_error}", style="bold red")
    return head


def _print_principles(con: Any, findings: Sequence[Finding], facts: Facts) -> None:
    """One row per principle: its headline and the tips to change."""
    from rich.table import Table
    from rich.text import Text

    summary = principle_summary(findings, facts)
    table = Table(show_header=False, box=None, pad_edge=False, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_column()
    for row in summary.values():
        tips = ", ".join(row["tips"]) or "nothing to change"
        style = _STYLE.get(row["worst"] or "", "green")
        extra = f" ({len(row['not_checked'])} not checked here)" if row["not_checked"] else ""
        table.add_row(Text(row["title"]), Text(row["headline"]), Text(tips + extra, style=style))
    con.print(table)
    con.print()


def _print_findings(con: Any, findings: Sequence[Finding]) -> None:
    """The findings by severity, with their evidence and fix, then those their measurement demoted."""
    from rich.text import Text

    groups = [
        (
            sev.upper(),
            _STYLE[sev],
            [f for f in findings if f.status == "finding" and f.severity == sev and not f.demoted],
        )
        for sev in SEVERITIES
    ]
    groups.append(("MEASURED HERE, DOES NOT PAY (demoted)", "bold blue", [f for f in findings if f.demoted]))
    for label, style, group in groups:
        if not group:
            continue
        con.print(Text(f"{label} ({len(group)})", style=style))
        for f in group:
            line = Text("  ")
            line.append(f"{f.tip} {f.slug}", style="bold")
            line.append(f"  {f.title}", style="dim")
            con.print(line)
            for item in f.items:
                ev = Text("    ")
                if len(f.items) > 1:
                    ev.append(f"[{item.severity}] ", style=_STYLE.get(item.severity, ""))
                ev.append(item.evidence)
                con.print(ev)
                fx = Text("      fix: ", style="green")
                fx.append(item.fix)
                con.print(fx)
            if f.measured is not None:
                con.print(_measured_text(f))
            for note in f.notes:
                con.print(Text(f"    note: {note}", style="dim"))
        con.print()


def _print_fine_and_unchecked(con: Any, findings: Sequence[Finding], show_ok: bool) -> None:
    """The tips that are fine here, and those not checked here with how to check them."""
    from rich.text import Text

    ok = [f for f in findings if f.status == "ok"]
    if ok and show_ok:
        con.print(Text(f"FINE ({len(ok)})", style="bold green"))
        for f in ok:
            line = Text("  ")
            line.append(f"{f.tip} {f.slug:<25}", style="green")
            line.append(f.evidence)
            con.print(line)
        con.print()
    unchecked = [f for f in findings if f.status == "not-checked"]
    if unchecked:
        con.print(Text(f"NOT CHECKED HERE ({len(unchecked)})", style="bold magenta"))
        for f in unchecked:
            line = Text("  ")
            line.append(f"{f.tip} {f.slug:<25}", style="magenta")
            line.append(f.evidence)
            con.print(line)
            if f.fix:
                con.print(Text(f"      how: {f.fix}", style="dim"))
        con.print()


def _print_tail(con: Any, findings: Sequence[Finding], result: Any, fail_on: str | None) -> None:
    """The counts, and the exit code ``--fail-on`` gives."""
    from rich.text import Text

    c = counts(findings)
    tail = Text(
        f"{c['high']} high, {c['medium']} medium, {c['low']} low; {c['ok']} fine; {c['not-checked']} not checked here"
        + (f"; {c['demoted']} demoted by measurement" if c["demoted"] else "")
    )
    if result is not None and fail_on is not None:
        tail.append(f"  ·  exit {result.exit_code(fail_on)} (--fail-on {fail_on})")
    con.print(tail)


_VERDICT_WORDS = {
    "pays": ("measured here", "bold green"),
    "no-gain": ("measured here, no gain", "blue"),
    "slower": ("measured here, slower", "bold blue"),
    "failed": ("measured here, failed", "bold blue"),
    "not-timed": ("not timed", "dim"),
}


def _measured_text(f: Finding) -> Any:
    from rich.text import Text

    m = f.measured
    assert m is not None
    words, style = _VERDICT_WORDS.get(m.verdict, (m.verdict, ""))
    out = Text("    ")
    out.append(f"{words}: ", style=style)
    out.append(m.figure)
    if m.demotes and m.severity_before:
        advice = "do not apply it on this setup" if m.verdict != "no-gain" else "no measurable gain here"
        out.append(f" (was {m.severity_before}; {advice})", style="dim")
    return out


def _verify_line(v: Any) -> str:
    if v.error:
        return f"--verify: {v.error}"
    if not v.timed:
        return "--verify: " + ("; ".join(v.notes) or "nothing timed")
    noise = f", noise floor {100 * v.noise:.1f}%" if v.noise is not None else ""
    return (
        f"--verify: timed {', '.join(v.timed)} with bench ({v.repeats} paired repeat(s) x {v.steps} batches,"
        f" baseline = this config{noise}) in {v.seconds:.0f} s"
    )
