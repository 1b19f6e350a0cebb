"""``python -m lightning_speedups lint PATH...``: the command line of the linter."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Optional

from lightning_speedups.lint.report import format_text, rule_table, summary, to_json
from lightning_speedups.lint.rules import RULES
from lightning_speedups.lint.runner import DEFAULT_RULES, lint_paths, select_rules

_EPILOG = """\
exit codes: 0 no findings, 1 findings, 2 errors (a path that does not exist, a file that does not
parse: reported one line each on stderr; the other files are still linted).
Suppress a finding with `# noqa: LS201` (or a bare `# noqa`) on its line.
"""


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "python -m lightning_speedups lint",
        description="Static checks for PyTorch / Lightning code habits that cost training speed.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", default=["."], help="files or directories (default: .)")
    parser.add_argument(
        "--select",
        type=_codes,
        default=None,
        metavar="CODES",
        help="comma-separated codes, code prefixes (LS2), tip ids (T08), DEFAULT or ALL to check instead of the"
        f" default set (DEFAULT: {', '.join(DEFAULT_RULES)}, only lines sure to run every step)",
    )
    parser.add_argument(
        "--extend-select",
        type=_codes,
        default=None,
        metavar="CODES",
        help="codes to check on top of the selection (same forms), e.g. LS102,LS103 for the loader habits",
    )
    parser.add_argument(
        "--all", action="store_true", help="every rule, every finding (same as --select ALL); off-by-default rules"
    )
    parser.add_argument("--ignore", type=_codes, default=None, metavar="CODES", help="codes to skip (same forms)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="syntax-check every file again (default: skip files whose exact contents passed before; "
        "digests under $XDG_CACHE_HOME/lightning_speedups, or set LIGHTNING_SPEEDUPS_LINT_CACHE=0)",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rules as a Markdown table and exit")
    return parser


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Run the linter; returns the exit code (0 clean, 1 findings, 2 errors).

    Examples:
        >>> main(["src/", "--select", "LS2", "--json"])  # doctest: +SKIP
    """
    parser = build_parser(prog)
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # --help or a usage error (argparse already printed it)
        return exc.code if isinstance(exc.code, int) else 2
    select = ["ALL"] if args.all else (args.select or ["DEFAULT"])
    select = [*select, *(args.extend_select or [])]
    try:
        rules = select_rules(select, args.ignore)
    except ValueError as exc:
        print(f"lint: error: {exc}", file=sys.stderr)
        return 2
    if args.list_rules:  # every rule unless some were selected, with whether it is on by default
        print(rule_table(rules if (args.select or args.all or args.extend_select) else select_rules(None, args.ignore)))
        return 0
    result = lint_paths(args.paths, select=select, ignore=args.ignore, cache=not args.no_cache)
    for error in result.errors:
        print(f"lint: error: {error}", file=sys.stderr)
    try:
        if args.json:
            print(to_json(result))
        else:
            for line in format_text(result):
                print(line)
            print(summary(result), file=sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:  # `lint src/ | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return result.exit_code


__all__ = ["RULES", "build_parser", "main"]
