"""The command line: paths, --select/--ignore, --json, exit codes, bad input, the pre-commit hook."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import lightning_speedups.lint as lint_pkg
from lightning_speedups.lint import lint_paths, main

REPO = Path(__file__).resolve().parents[2]
BAD = "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.zeros(3).cuda()\n\n\nm = torch.nn.DataParallel(net)\n"
CLEAN = "import torch\nx = torch.zeros(3, device='cuda')\n"
LINE = re.compile(
    r"^(?P<path>.+):(?P<line>\d+):(?P<col>\d+): (?P<code>LS\d{3}) \[(?P<tip>T\d\d)\] "
    r"(?P<severity>warning|info) \((?P<runs>[a-zA-Z ]+)\): .+ \(fix: .+\)$"
)


@pytest.fixture()
def tree(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD)
    (tmp_path / "pkg" / "clean.py").write_text(CLEAN)
    (tmp_path / "pkg" / "notes.txt").write_text(BAD)  # not *.py: skipped in a directory walk
    for skipped in (".venv", "__pycache__", "build", "venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "bad.py").write_text(BAD)
    return tmp_path


def test_clean_file_exits_0(tmp_path, capsys):
    f = tmp_path / "clean.py"
    f.write_text(CLEAN)
    assert main([str(f)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "no findings" in err


def test_findings_exit_1_one_line_each(tree, capsys):
    assert main([str(tree), "--all"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2  # only pkg/bad.py: hidden dirs, venvs, build and *.txt are skipped
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    assert [(m["line"], m["col"], m["code"], m["tip"]) for m in parsed] == [
        ("6", "16", "LS203", "T20"),
        ("9", "5", "LS301", "T11"),
    ]
    assert all(Path(m["path"]) == tree / "pkg" / "bad.py" for m in parsed)
    assert "2 findings in 1 file (2 files checked)" in err


def test_explicit_file_is_linted_whatever_its_suffix(tree):
    result = lint_paths([tree / "pkg" / "notes.txt"])
    assert result.files == 1 and len(result.findings) == 2


def test_select_ignore_and_tip_ids(tree, capsys):
    assert main([str(tree / "pkg"), "--select", "LS2"]) == 1
    assert "LS301" not in capsys.readouterr().out
    assert main([str(tree / "pkg"), "--select", "T11,T20", "--ignore", "LS203,LS301"]) == 0
    assert main([str(tree / "pkg"), "--ignore", "LS"]) == 0


def test_unknown_selector_exits_2(tree, capsys):
    assert main([str(tree), "--select", "XX1"]) == 2
    err = capsys.readouterr().err
    assert "unknown rule selector 'XX1'" in err and "Traceback" not in err


def test_json_output(tree, capsys):
    assert main([str(tree / "pkg"), "--json", "--all"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["files"] == 2
    assert data["errors"] == []
    assert [f["code"] for f in data["findings"]] == ["LS203", "LS301"]
    assert set(data["findings"][0]) == {
        "code",
        "tip",
        "path",
        "line",
        "col",
        "message",
        "fix",
        "runs",
        "severity",
        "replacement",
    }
    assert data["findings"][0]["line"] == 6 and data["findings"][0]["tip"] == "T20"
    assert data["findings"][0]["runs"] == "per batch" and data["findings"][0]["severity"] == "warning"


def test_missing_path_and_unparsable_file_exit_2_others_still_linted(tree, capsys):
    broken = tree / "pkg" / "broken.py"
    # a file is parsed when some rule could fire on its text (here: .item() and backward)
    broken.write_text("def f(:\n    loss.backward(); loss.item()\n")
    code = main([str(tree / "pkg"), str(tree / "nope.py"), "--json", "--all"])
    assert code == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [f["code"] for f in data["findings"]] == ["LS203", "LS301"]  # bad.py still linted
    assert data["files"] == 2
    errors = captured.err.strip().splitlines()
    assert len(errors) == 2
    assert any("nope.py: no such file or directory" in e for e in errors)
    assert any(re.search(r"broken\.py:1:\d+: cannot parse: ", e) for e in errors)
    assert "Traceback" not in captured.err
    assert data["errors"] == [e.removeprefix("lint: error: ") for e in errors]


def test_null_bytes_and_bad_encoding_are_errors_not_crashes(tmp_path, capsys):
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xe9'\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("lint: error:") == 2 and "Traceback" not in err


def test_help_and_usage_errors(capsys):
    assert main(["--help"]) == 0
    assert "--select" in capsys.readouterr().out
    assert main(["--no-such-option"]) == 2


def test_list_rules_prints_the_table(capsys):
    assert main(["--list-rules", "--select", "T08"]) == 0
    out = capsys.readouterr().out
    assert "| LS201 | T08 |" in out and "| LS202 | T08 |" in out and "LS301" not in out


def test_python_dash_m_entry_point(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text(BAD)
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_speedups.lint", str(f), "--select", "LS301"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    (rule,) = [r for r in lint_pkg.RULES if r.code == "LS301"]
    assert proc.stdout.strip().endswith("(fix: " + rule.fix + ")")
    assert ":9:5: LS301 [T11] warning (per batch): " in proc.stdout


def test_lint_package_imports_no_heavy_dependency():
    """The linter is pure ast: it must stay fast to start from a pre-commit hook."""
    pkg = Path(lint_pkg.__file__).parent
    for src in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(src.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"torch", "lightning", "numpy", "pytorch_lightning"}, (src, name)
                if name.startswith("lightning_speedups"):
                    assert name.startswith("lightning_speedups.lint"), (src, name)


def test_pre_commit_hook_definition():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "lightning-speedups-lint"]
    assert hook["entry"] == "python -m lightning_speedups lint"
    assert hook["language"] == "python"
    assert hook["types"] == ["python"]
    readme = (Path(lint_pkg.__file__).parent / "README.md").read_text()
    assert "lightning-speedups-lint" in readme
    for rule in lint_pkg.RULES:  # the README lists every rule
        assert f"| {rule.code} | {rule.tip} |" in readme, rule.code


def test_info_findings_alone_exit_0(tmp_path, capsys):
    f = tmp_path / "sample.py"
    # runs per epoch: reported as info, which does not fail a hook
    f.write_text(
        "import torch\n\ndef sample(model, epochs):\n    for epoch in range(epochs):\n        model(torch.zeros(3).cuda())\n"
    )
    assert main([str(f), "--select", "LS203"]) == 0
    out = capsys.readouterr().out
    assert ":5:15: LS203 [T20] info (per epoch): " in out


@pytest.mark.parametrize("text", ["def f(:\n    return 1\n", "x = 1\nclass C\n", "print('a'\n"])
def test_a_file_that_does_not_parse_is_reported_whatever_it_holds(tmp_path, capsys, text):
    # issue 19: a syntax error in a file without any rule's trigger word was "no findings", exit 0
    bad = tmp_path / "plain.py"
    bad.write_text(text)
    (tmp_path / "ok.py").write_text("import torch\nm = torch.nn.DataParallel(net)\n")
    result = lint_paths([tmp_path])
    assert len(result.errors) == 1 and result.errors[0].startswith(f"{bad}:") and "cannot parse" in result.errors[0]
    assert [f.code for f in result.findings] == ["LS301"]  # the other file is still linted
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"lint: error: {bad}:" in err


def test_an_internal_error_on_one_file_is_reported_and_the_others_still_linted(tmp_path, monkeypatch, capsys):
    import lightning_speedups.lint.runner as runner

    (tmp_path / "a.py").write_text(BAD)
    (tmp_path / "b.py").write_text(BAD)
    real = runner.lint_tree

    def failing(tree, source, path, *args, **kwargs):
        if str(path).endswith("a.py"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(tree, source, path, *args, **kwargs)

    monkeypatch.setattr(runner, "lint_tree", failing)
    assert main([str(tmp_path), "--all"]) == 2
    out, err = capsys.readouterr()
    assert f"{tmp_path / 'a.py'}: internal error of the linter: RecursionError" in err
    assert "b.py" in out and "a.py" not in out


STEP = """import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader


class Net(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self.model(batch).mean()
        self.seen = loss.item()
        return loss

    def on_train_epoch_end(self):
        self.model(torch.zeros(3).cuda())


def helper(t):
    return t.item()


loader = DataLoader(range(10))
m = torch.nn.DataParallel(net)
"""


def test_the_default_set_reports_only_sure_per_step_host_reads(tmp_path, capsys):
    f = tmp_path / "step.py"
    f.write_text(STEP)
    assert main([str(f), "--json"]) == 1
    default = [(x["code"], x["line"], x["severity"]) for x in json.loads(capsys.readouterr().out)["findings"]]
    assert default == [("LS201", 9, "warning")]  # not the loader, DataParallel, per-epoch creation, unsure helper
    assert main([str(f), "--json", "--all"]) == 1
    every = {(x["code"], x["line"], x["severity"]) for x in json.loads(capsys.readouterr().out)["findings"]}
    assert {("LS201", 9, "warning"), ("LS301", 21, "warning")} <= every
    assert {c for c, _, _ in every} > {"LS201", "LS301"}
    # extend the default set by the rules the user wants, as ruff does
    assert main([str(f), "--json", "--extend-select", "LS301"]) == 1
    codes = [x["code"] for x in json.loads(capsys.readouterr().out)["findings"]]
    assert codes == ["LS201", "LS301"]


EVERY_50 = """import lightning.pytorch as pl


class Net(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = self.model(batch).mean()
        self.maybe(loss, batch_idx)
        return loss

    def maybe(self, loss, batch_idx):
        if batch_idx % 50 != 0:
            return
        self.last = loss.item()

    def validation_step(self, batch, batch_idx):
        self.val = self.model(batch).mean().item()
"""


def test_a_default_rules_unsure_findings_come_back_when_the_rule_is_named(tmp_path):
    f = tmp_path / "every50.py"
    f.write_text(EVERY_50)
    # behind an early return taken on all but every 50th batch: not every step, in no output
    assert all(x.line != 13 for x in lint_paths([f], select=["ALL"]).findings)
    # a validation step's read: not the training step's, so not in the default output
    assert lint_paths([f], select=["DEFAULT"]).findings == []
    (named,) = lint_paths([f], select=["LS201"]).findings
    assert (named.line, named.severity) == (16, "warning") and "validation_step" in named.message
    (extended,) = lint_paths([f], select=["DEFAULT", "LS201"]).findings  # --extend-select LS201
    assert extended.line == 16
