"""The CLI's error messages are rewordings of jsonargparse's (``arguments.explain_parse_error`` reads its English
text): a jsonargparse release that changes a message must fail a test, not reach a user. The whole bad-input
table (``tests/test_bad_input.py``) runs on the newest jsonargparse the package allows (what CI installs) and,
here, again on the lowest (``pyproject.toml``'s floor), installed beside the others in a scratch folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lowest_jsonargparse() -> str:
    """The floor of the ``jsonargparse`` requirement in ``pyproject.toml``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'"jsonargparse\[[^\]]*\]>=([0-9.]+)"', text)
    assert found, "pyproject.toml names no jsonargparse floor"
    return found.group(1)


def test_the_floor_is_what_lightnings_cli_accepts():
    from importlib import metadata

    floors = [
        re.search(r">=([0-9.]+)", r).group(1)  # type: ignore[union-attr]
        for r in metadata.requires("lightning") or []
        if r.startswith("jsonargparse") and ">=" in r
    ]
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))
    assert not floors or as_tuple(lowest_jsonargparse()) >= max(map(as_tuple, floors))


@pytest.mark.slow
def test_the_bad_input_table_holds_on_the_lowest_jsonargparse(tmp_path):
    version = lowest_jsonargparse()
    target = tmp_path / "jsonargparse_lowest"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            f"jsonargparse=={version}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pip.returncode != 0:
        pytest.skip(f"cannot install jsonargparse=={version} here (no index?): {pip.stderr.strip()[-300:]}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    seen = subprocess.run(
        [sys.executable, "-c", "import jsonargparse; print(jsonargparse.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    assert seen == version
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "test_bad_input.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=1200,
    )
    assert run.returncode == 0, f"the bad-input table fails on jsonargparse {version}:\n{run.stdout[-4000:]}"
