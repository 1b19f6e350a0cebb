"""Static lint rules for the training-speed habits no callback can fix.

``python -m lightning_speedups lint PATH...`` (or ``python -m lightning_speedups.lint``) parses the
files with :mod:`ast` (nothing is imported or executed, torch is not needed) and reports each finding
as ``path:line:col: CODE [Txx] severity (how often it runs): message (fix: ...)``. See ``lint/README.md`` for the rules.

Examples:
    >>> from lightning_speedups.lint import lint_source
    >>> src = "import torch\\nclass M(torch.nn.Module):\\n    def forward(self, x):\\n        return torch.zeros(3).cuda()\\n"
    >>> [(f.line, f.code, f.tip, f.severity, f.runs) for f in lint_source(src)]
    [(4, 'LS203', 'T20', 'warning', 'per batch')]
"""

from lightning_speedups.lint.command import main
from lightning_speedups.lint.rules import RULES
from lightning_speedups.lint.rules.base import Rule
from lightning_speedups.lint.runner import Finding, LintResult, lint_paths, lint_source, lint_sources, select_rules

__all__ = [
    "RULES",
    "Finding",
    "LintResult",
    "Rule",
    "lint_paths",
    "lint_source",
    "lint_sources",
    "main",
    "select_rules",
]
