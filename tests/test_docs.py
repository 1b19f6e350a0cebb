"""The documentation: a README a newcomer reads in minutes, the reference in docs/ built strict (a broken link,
a page missing from the nav or a docstring the API pages cannot parse fails), and the README's links alive."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="the test extra installs mkdocs")
    pytest.importorskip("mkdocstrings", reason="the test extra installs mkdocstrings")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    for page in ("index", "presets", "doctor", "lint", "bench", "parts", "api/callbacks"):
        assert (tmp_path / "site" / page / "index.html").is_file() or (tmp_path / "site" / f"{page}.html").is_file()


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120, "the reference belongs in docs/, the README stays a few minutes' read"
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks and blocks[0].strip().splitlines() == [
        "pip install torch==2.13.0 . && python -m lightning_speedups fit --config fast.yaml",
        "pip install torch==2.13.0 -e '.[test,clients]' && python -m pytest -q",
    ], "the quick start is exactly two commands"
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
