"""``lint`` as a flake8 plugin (TorchFix's convention): ``flake8 --select LS`` runs the same rules.

Registered in ``pyproject.toml`` under ``[project.entry-points."flake8.extension"]`` as
``LS = "lightning_speedups.lint.flake8:LintPlugin"``. flake8 hands over the parsed tree and the
file name; the plugin yields ``(line, col, "LSxxx message", type)`` with a 0-based column, as
flake8 expects. ``# noqa`` is flake8's own business (it filters the results itself).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import Optional

from lightning_speedups.lint.rules import RULES
from lightning_speedups.lint.runner import lint_tree, triggered_rules

try:  # the package version, without importing the package's heavy top level
    from importlib.metadata import version as _version

    _VERSION = _version("lightning_speedups")
except ImportError:  # pragma: no cover - not installed (PackageNotFoundError)
    _VERSION = "0"


class LintPlugin:
    """flake8 plugin: ``LintPlugin(tree, filename, lines).run()`` yields flake8's result tuples."""

    name = "lightning-speedups-lint"
    version = _VERSION

    def __init__(self, tree: ast.Module, filename: str = "<string>", lines: Optional[Sequence[str]] = None) -> None:
        self.tree = tree
        self.filename = filename
        self.lines = lines

    def _source(self) -> str:
        if self.lines is not None:
            return "".join(self.lines)
        try:
            with open(self.filename, encoding="utf-8") as fh:
                return fh.read()
        except OSError:
            return ast.unparse(self.tree)

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        source = self._source()
        rules = triggered_rules(source, RULES)
        if not rules:
            return
        for f in lint_tree(self.tree, source, self.filename, rules, noqa=False):
            text = f"{f.code} [{f.tip}] {f.severity} ({f.runs}): {f.message} (fix: {f.fix})"
            yield f.line, f.col - 1, text, type(self)


__all__ = ["LintPlugin"]
