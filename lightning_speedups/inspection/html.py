"""The doctor's report as one self-contained HTML file (``doctor --html FILE``): no JavaScript, no network request,
its one chart an inline SVG. It is written from the report's JSON object
(:func:`~lightning_speedups.inspection.report.to_dict`), so the two always say the same: the verdict, where the
step time goes (and the fixed cost per op), the host reads by line, memory, and every finding with its evidence and
fix.

Examples:
    >>> doc = {"model": "Net", "device": "cpu", "precision": "32-true", "steps": 5,
    ...        "verdict": {"name": "balanced", "headline": "no single cause dominates", "fix": None,
    ...                    "shares": {"data": 0.1, "forward": 0.5, "backward": 0.4}},
    ...        "findings": [], "counts": {}}
    >>> page = render_html(doc)
    >>> page.startswith("<!DOCTYPE html>"), "<script" in page, "BALANCED" in page
    (True, False, True)
"""

from __future__ import annotations

from html import escape
from typing import Any

__all__ = ["render_html", "write_html"]

#: one colour per share of the step (colour-blind safe, from the Okabe-Ito palette)
_COLOURS = {"data": "#E69F00", "forward": "#0072B2", "backward": "#56B4E9", "optimizer": "#009E73"}
_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:60rem;color:#222}
h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:2rem} table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top;font-size:.92rem}
.verdict{font-size:1.15rem;padding:1rem;border-left:6px solid #0072B2;background:#f3f7fb}
.sev-high{color:#b00020;font-weight:600} .sev-medium{color:#a05a00} .sev-low{color:#555} code{font-size:.9em}
.muted{color:#666}
"""


def _chart(shares: dict[str, float]) -> str:
    """A stacked horizontal bar of the step's shares, as inline SVG (an image with nothing to fetch)."""
    if not shares:
        return '<p class="muted">The step was not timed.</p>'
    width, x, parts, legend = 600.0, 0.0, [], []
    for i, (name, share) in enumerate(shares.items()):
        w = max(0.0, min(1.0, share)) * width
        colour = _COLOURS.get(name, "#999999")
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="28" fill="{colour}"><title>'
            f"{escape(name)} {share:.0%}</title></rect>"
        )
        legend.append(
            f'<rect x="{i * 150}" y="40" width="12" height="12" fill="{colour}"/>'
            f'<text x="{i * 150 + 18}" y="51" font-size="13">{escape(name)} {share:.0%}</text>'
        )
        x += w
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="where the step time goes" width="{width:.0f}"'
        f' height="60" viewBox="0 0 {width:.0f} 60">{"".join(parts)}{"".join(legend)}</svg>'
    )


def _findings_rows(findings: list[dict[str, Any]], status: str) -> str:
    rows = []
    for f in findings:
        if f.get("status") != status:
            continue
        sev = f.get("severity") or ""
        rows.append(
            f"<tr><td>{escape(f.get('tip', ''))} {escape(f.get('slug', '') or '')}</td>"
            f'<td class="sev-{escape(sev)}">{escape(sev)}</td><td>{escape(f.get("evidence", "") or "")}</td>'
            f"<td><code>{escape(f.get('fix', '') or '')}</code></td></tr>"
        )
    if not rows:
        return '<p class="muted">None.</p>'
    return "<table><tr><th>tip</th><th>severity</th><th>evidence</th><th>fix</th></tr>" + "".join(rows) + "</table>"


def _host_reads(findings: list[dict[str, Any]]) -> str:
    """The items of the sync and host-read tips (T08, T13), each naming its ``file:line``."""
    items = [
        item
        for f in findings
        if f.get("tip") in ("T08", "T13") and f.get("status") == "finding"
        for item in f.get("items", [])
    ]
    if not items:
        return '<p class="muted">No host read or device sync found in the watched steps.</p>'
    rows = "".join(
        f"<tr><td>{escape(i.get('evidence', ''))}</td><td><code>{escape(i.get('fix', ''))}</code></td></tr>"
        for i in items
    )
    return f"<table><tr><th>where and how often</th><th>fix</th></tr>{rows}</table>"


def _op_overhead(doc: dict[str, Any]) -> str:
    """The fixed cost per op of the step, in one line (nothing for a report without it)."""
    o = doc.get("op_overhead") or {}
    if not o:
        return ""
    if o.get("share") is None:
        reason = f": {escape(str(o['reason']))}" if o.get("reason") else ""
        return f'<p class="muted">Fixed cost per op: not measured{reason}.</p>'
    return (
        f"<p>Fixed cost per op: {int(o['ops_per_step']):,} ops a step at {1e6 * float(o['op_cost_seconds']):.1f} µs"
        f" each, {float(o['share']):.0%} of the {1e3 * float(o['step_seconds']):.2f} ms step.</p>"
    )


def render_html(doc: dict[str, Any]) -> str:
    """The report ``doc`` (the doctor's JSON object) as one HTML page."""
    verdict = doc.get("verdict") or {}
    findings = list(doc.get("findings") or [])
    title = f"lightning_speedups doctor: {doc.get('model') or 'model'} on {doc.get('device') or '?'}"
    fix = verdict.get("fix")
    memory: dict[str, Any] = next((f for f in findings if f.get("tip") == "T04"), {})
    meta = (
        f"{escape(str(doc.get('model') or '?'))} · {escape(str(doc.get('device') or '?'))} · "
        f"{escape(str(doc.get('precision') or '?'))} · {escape(str(doc.get('steps') or 0))} training steps"
    )
    watched = doc.get("watched")
    if watched:
        meta += f" · watched Trainer {escape(str(watched.get('trainer')))} of <code>{escape(' '.join(watched.get('command', [])))}</code>"
    return "".join(
        [
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/>',
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
            f'<h1>{escape(title)}</h1><p class="muted">{meta}</p>',
            f'<p class="verdict"><b>{escape(str(verdict.get("name", "not-measured")).upper())}</b>: '
            f"{escape(str(verdict.get('headline', '')))}"
            + (f"<br/>Change: <code>{escape(fix)}</code>" if fix else "")
            + "</p>",
            "<h2>Where the step time goes</h2>",
            _chart(dict(verdict.get("shares") or {})),
            _op_overhead(doc),
            "<h2>Host reads and device syncs, by line</h2>",
            _host_reads(findings),
            "<h2>Memory</h2>",
            f"<p>{escape(str(memory.get('evidence') or 'not measured'))}</p>",
            "<h2>Findings</h2>",
            _findings_rows(findings, "finding"),
            "<h2>Checked and fine</h2>",
            _findings_rows(findings, "ok"),
            "<h2>Not checked here</h2>",
            _findings_rows(findings, "not-checked"),
            f'<p class="muted">lightning_speedups doctor, report version {escape(str(doc.get("version", "")))}.</p>',
            "</body></html>\n",
        ]
    )


def write_html(path: str, doc: dict[str, Any]) -> None:
    """Write :func:`render_html` of ``doc`` to ``path`` (UTF-8)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render_html(doc))
