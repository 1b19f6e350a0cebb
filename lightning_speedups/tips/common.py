"""What several tips' checks share: the result of a tip that only lint can check (T13, T20)."""

from __future__ import annotations

from lightning_speedups.inspection import Facts, Finding
from lightning_speedups.inspection.words import names_text, short_path


def lint_only(tip: str, facts: Facts, what: str) -> Finding:
    """The finding of a tip checked by lint alone: what lint found in the user's source, or why it could not run."""
    if facts.lint_error:
        return Finding.not_checked(tip, f"lint could not run: {facts.lint_error}")
    if not facts.lint_ran:
        return Finding.not_checked(
            tip, "lint was turned off (--no-lint)", "run without --no-lint, or `python -m lightning_speedups lint PATH`"
        )
    if not facts.lint_files:
        return Finding.not_checked(
            tip,
            "no source file of the model or data classes was found to lint",
            "`python -m lightning_speedups lint PATH` on your training code",
        )
    return Finding.ok(tip, f"lint found no {what} in {names_text([short_path(p) for p in facts.lint_files], 3)}")
