"""Write out what is generated from the tip records, so that no copy of a tip is kept in sync by hand: the ``tips``
command's table (``lightning_speedups/catalog.json``, read without importing the records), the ``Card:`` block of
each tip module's docstring (:meth:`~lightning_speedups.tips.record.Tip.card`) and the parts table of
``docs/parts.md`` (between its ``parts-table`` markers, in a checkout).

    python -m lightning_speedups.tips.generate           # rewrite what is out of date
    python -m lightning_speedups.tips.generate --check   # say what is out of date, exit 1 (the tests run this)
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from lightning_speedups.tips import TIPS, catalog_rows, parts_table
from lightning_speedups.tips.record import Tip

PACKAGE = Path(__file__).resolve().parent.parent
CATALOG = PACKAGE / "catalog.json"
PARTS_PAGE = PACKAGE.parent / "docs" / "parts.md"
_MARKERS = re.compile(r"(<!-- parts-table:start -->\n)(.*?)(\n<!-- parts-table:end -->)", re.S)
#: a tip module's card: the ``Card:`` line and the indented lines under it
_CARD = re.compile(r"^Card:\n(?: {4}.*\n)*", re.M)


def catalog_text() -> str:
    """``catalog.json``: one row per tip, as :func:`~lightning_speedups.tips.catalog_rows` gives them."""
    return json.dumps([list(row) for row in catalog_rows()], indent=1, ensure_ascii=False) + "\n"


def parts_page_text(current: str) -> str:
    """``docs/parts.md`` with its generated table replaced by :func:`~lightning_speedups.tips.parts_table`."""
    if not _MARKERS.search(current):
        raise ValueError(f"{PARTS_PAGE} lost its <!-- parts-table:start --> / <!-- parts-table:end --> markers")
    return _MARKERS.sub(lambda m: m.group(1) + parts_table().strip() + m.group(3), current, count=1)


def tip_module_path(tip: Tip) -> Path:
    """The module that holds ``tip``'s record (its ``check`` is defined there)."""
    module = importlib.import_module(tip.check.__module__)
    return Path(str(module.__file__))


def tip_module_text(tip: Tip, current: str) -> str:
    """The tip module's source with the ``Card:`` block of its docstring written from the record."""
    card = tip.card() + "\n"
    if not _CARD.search(current):
        raise ValueError(f"{tip_module_path(tip)}: its docstring has no 'Card:' block for {tip.id}'s card")
    return _CARD.sub(lambda m: card, current, count=1)


def generated() -> dict[Path, str]:
    """Each generated file and the text it should hold (the parts page only where the checkout has it)."""
    out = {CATALOG: catalog_text()}
    for tip in TIPS:
        path = tip_module_path(tip)
        out[path] = tip_module_text(tip, path.read_text(encoding="utf-8"))
    if PARTS_PAGE.is_file():
        out[PARTS_PAGE] = parts_page_text(PARTS_PAGE.read_text(encoding="utf-8"))
    return out


def stale() -> list[Path]:
    """The generated files whose text differs from what the records give."""
    return [
        path for path, text in generated().items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["--check"]):
        print("usage: python -m lightning_speedups.tips.generate [--check]", file=sys.stderr)
        return 2
    out_of_date = stale()
    if args == ["--check"]:
        for path in out_of_date:
            print(f"{path} is out of date: run python -m lightning_speedups.tips.generate")
        return 1 if out_of_date else 0
    for path, text in generated().items():
        if path in out_of_date:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
