"""Print a :class:`~lightning_speedups.lint.runner.LintResult`: one line per finding, or JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from lightning_speedups.lint.rules.base import Rule
from lightning_speedups.lint.runner import DEFAULT_RULES, LintResult


def format_text(result: LintResult) -> list[str]:
    """``path:line:col: CODE [Txx] message (fix: ...)`` per finding, in path/line order."""
    ordered = sorted(result.findings, key=lambda f: (f.path, f.line, f.col, f.code))
    return [f.format() for f in ordered]


def summary(result: LintResult) -> str:
    """One closing line: how many findings in how many files, and the errors."""
    n = len(result.findings)
    files = len({f.path for f in result.findings})
    text = f"{n} finding{'s' if n != 1 else ''} in {files} file{'s' if files != 1 else ''}" if n else "no findings"
    text += f" ({result.files} file{'s' if result.files != 1 else ''} checked)"
    if result.errors:
        text += f", {len(result.errors)} error{'s' if len(result.errors) != 1 else ''}"
    return text


def to_json(result: LintResult) -> str:
    """``{"findings": [{code, tip, path, line, col, message, fix}], "files": N, "errors": [...]}``."""
    ordered = sorted(result.findings, key=lambda f: (f.path, f.line, f.col, f.code))
    return json.dumps(
        {"findings": [f.to_dict() for f in ordered], "files": result.files, "errors": list(result.errors)},
        indent=2,
    )


def rule_table(rules: Sequence[Rule]) -> str:
    """A Markdown table of ``rules`` (code, tip, name, on by default, what it finds, fix)."""
    lines = ["| code | tip | name | default | finds | fix |", "|---|---|---|---|---|---|"]
    for r in rules:
        on = "on" if r.code in DEFAULT_RULES else "off"
        lines.append(f"| {r.code} | {r.tip} | `{r.name}` | {on} | {r.summary} | {r.fix} |")
    return "\n".join(lines)
