"""``lint`` as a flake8 plugin: the class on its own, and through flake8 when it is installed."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from lightning_speedups.lint import lint_source
from lightning_speedups.lint.flake8 import LintPlugin

SRC = (
    "import torch\n\n\n"
    "class M(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.zeros(3).cuda()\n\n\n"
    "m = torch.nn.DataParallel(net)\n"
)


def test_plugin_class_follows_flake8_convention():
    assert LintPlugin.name and isinstance(LintPlugin.version, str)
    plugin = LintPlugin(ast.parse(SRC), "pkg/model.py", SRC.splitlines(keepends=True))
    results = list(plugin.run())
    assert [(line, col) for line, col, _, _ in results] == [(6, 15), (9, 4)]  # 0-based columns
    assert all(kind is LintPlugin for *_, kind in results)
    # the message starts with the code, and says the same as the command line
    expected = [f.format().split(": ", 1)[1] for f in lint_source(SRC, path="pkg/model.py")]
    assert [msg for _, _, msg, _ in results] == expected
    assert results[0][2].startswith("LS203 [T20] warning (per batch): ")


def test_plugin_reads_the_file_when_flake8_gives_no_lines(tmp_path):
    f = tmp_path / "model.py"
    f.write_text(SRC)
    results = list(LintPlugin(ast.parse(SRC), str(f)).run())
    assert [r[2].split()[0] for r in results] == ["LS203", "LS301"]


def test_plugin_yields_nothing_for_clean_or_test_files():
    clean = "import torch\nx = torch.zeros(3, device='cuda')\n"
    assert list(LintPlugin(ast.parse(clean), "a.py", clean.splitlines(True)).run()) == []
    assert list(LintPlugin(ast.parse(SRC), "tests/test_model.py", SRC.splitlines(True)).run()) == []


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="flake8.extension") if ep.value.startswith("lightning_speedups.lint")]
    if not eps:
        pytest.skip("package metadata not (re)installed in this environment")
    assert eps[0].name == "LS" and eps[0].value == "lightning_speedups.lint.flake8:LintPlugin"


def test_runs_under_flake8(tmp_path):
    pytest.importorskip("flake8")
    from importlib.metadata import entry_points

    if not any(ep.name == "LS" for ep in entry_points(group="flake8.extension")):
        pytest.skip("the flake8 entry point is not installed (pip install -e .)")
    f = tmp_path / "model.py"
    f.write_text(SRC)
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "LS", str(f)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(": ", 1)[0].rsplit(":", 2)[1:] for line in lines] == [["6", "16"], ["9", "5"]]
    assert "LS203 [T20] warning (per batch)" in lines[0] and "LS301 [T11]" in lines[1]
