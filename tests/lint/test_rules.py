"""Each rule against fixture files: positives, look-alike negatives, and ``# noqa`` suppression.

Every fixture line that must produce a finding ends with ``# expect: CODE[, CODE]``; every other line
must produce none. The tests compare the exact set of ``(line, code)`` pairs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_speedups.lint import RULES, lint_source, lint_sources
from lightning_speedups.lint.runner import _noqa_lines

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*.py.txt"))
#: Several files linted together (calls between files count): one folder of ``*.py.txt`` each.
PROJECT_FIXTURES = sorted(p for p in FIXTURES.iterdir() if p.is_dir())
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z0-9, ]+)$")


def expected(text: str) -> set[tuple[int, str]]:
    out = set()
    for i, line in enumerate(text.splitlines(), 1):
        m = _EXPECT.search(line)
        if m:
            out |= {(i, c.strip()) for c in m.group("codes").split(",") if c.strip()}
    return out


def lint_fixture(path: Path, **kwargs):
    # lint under a neutral path: the real one sits in tests/, which exempts debugging rules
    return lint_source(path.read_text(), path=f"project/{path.name.removesuffix('.txt')}", **kwargs)


def lint_project(folder: Path, **kwargs):
    sources = {
        f"project/{folder.name}/{p.name.removesuffix('.txt')}": p.read_text() for p in sorted(folder.glob("*.py.txt"))
    }
    return sources, lint_sources(sources, **kwargs)


def test_fixtures_exist():
    assert len(FIXTURE_FILES) >= 10
    assert len(PROJECT_FIXTURES) >= 2 and all(len(list(p.glob("*.py.txt"))) >= 2 for p in PROJECT_FIXTURES)


@pytest.mark.parametrize("folder", PROJECT_FIXTURES, ids=lambda p: p.name)
def test_project_fixture_findings_are_exactly_the_expected_ones(folder):
    sources, found = lint_project(folder)
    want = {(path, line, code) for path, text in sources.items() for line, code in expected(text)}
    assert {(f.path, f.line, f.code) for f in found} == want


@pytest.mark.parametrize("folder", PROJECT_FIXTURES, ids=lambda p: p.name)
def test_project_fixture_files_alone_lose_the_cross_file_frequency(folder):
    """Each file linted on its own does not show its callers: what the project fixture expects needs the graph."""
    sources, found = lint_project(folder)
    alone = {(path, f.line, f.code, f.runs) for path, text in sources.items() for f in lint_source(text, path=path)}
    assert alone != {(f.path, f.line, f.code, f.runs) for f in found}


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_fixture_findings_are_exactly_the_expected_ones(path):
    text = path.read_text()
    got = {(f.line, f.code) for f in lint_fixture(path)}
    assert got == expected(text)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_noqa_lines_would_fire_without_noqa(path):
    """A ``# noqa`` line in a fixture is a real positive: switch suppression off and it fires."""
    text = path.read_text()
    raw = lint_fixture(path, noqa=False)
    for line, codes in _noqa_lines(text).items():
        hits = [f for f in raw if line in (f.line, f.end_line)]
        if codes is not None:
            hits = [f for f in hits if any(f.code.startswith(c) for c in codes)]
        assert hits, f"{path.name}:{line}: # noqa suppresses nothing"


def test_every_rule_has_positive_and_suppressed_fixture_cases():
    positives: set[str] = set()
    suppressed: set[str] = set()
    for folder in PROJECT_FIXTURES:
        sources, found = lint_project(folder)
        positives |= {code for text in sources.values() for _, code in expected(text)}
        _, raw = lint_project(folder, noqa=False)
        kept = {(f.path, f.line, f.code) for f in found}
        suppressed |= {f.code for f in raw if (f.path, f.line, f.code) not in kept}
    for path in FIXTURE_FILES:
        text = path.read_text()
        positives |= {code for _, code in expected(text)}
        raw = lint_fixture(path, noqa=False)
        kept = {(f.line, f.code) for f in lint_fixture(path)}
        suppressed |= {f.code for f in raw if (f.line, f.code) not in kept}
    codes = {r.code for r in RULES}
    assert codes - positives == set()
    assert codes - suppressed == set()


def test_registry_is_consistent():
    codes = [r.code for r in RULES]
    assert codes == sorted(set(codes))
    for r in RULES:
        assert re.fullmatch(r"LS[123]\d\d", r.code)
        assert re.fullmatch(r"T(0[1-9]|1\d|2[0-4])", r.tip)
        assert r.summary and r.fix and r.name
    assert {r.code for r in RULES if r.tip == "T08"} == {"LS201", "LS202", "LS204", "LS205", "LS206", "LS207", "LS208"}
    assert {r.tip for r in RULES} >= {"T02", "T03", "T07", "T08", "T11", "T12", "T13", "T14", "T20", "T21"}


def codes_of(source: str, path: str = "train.py") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(source, path=path)]


@pytest.mark.parametrize(
    "deterministic",
    [
        "torch.backends.cudnn.deterministic = True",
        "torch.use_deterministic_algorithms(True)",
        "L.Trainer(deterministic=True)",
        'L.Trainer(deterministic="warn")',
    ],
)
def test_benchmark_off_is_fine_in_deterministic_files(deterministic):
    base = "import torch\nimport lightning as L\ntorch.backends.cudnn.benchmark = False\nL.Trainer(benchmark=False)\n"
    assert codes_of(base) == [(3, "LS304"), (4, "LS304")]
    assert codes_of(base + deterministic + "\n") == []


ANOMALY = "import torch\ntorch.autograd.set_detect_anomaly(True)\n"


@pytest.mark.parametrize(
    "path, flagged",
    [
        ("train.py", True),
        ("src/model/fit.py", True),
        ("tests/test_model.py", False),
        ("test/helpers.py", False),
        ("pkg/model_test.py", False),
        ("conftest.py", False),
        ("scripts/debug_nan.py", False),
        ("debugging/run.py", False),
    ],
)
def test_debug_tools_are_exempt_in_test_and_debug_files(path, flagged):
    assert codes_of(ANOMALY, path) == ([(2, "LS305")] if flagged else [])


def test_without_imports_nothing_resolves():
    # `torch` is not imported: the linter cannot tell what these names are, so it says nothing
    src = "x = torch.zeros(3).cuda()\nm = nn.DataParallel(net)\ntorch.backends.cudnn.benchmark = False\n"
    assert codes_of(src) == []


def test_shadowed_print_is_not_reported():
    src = (
        "import torch\nfrom rich import print\n\n"
        "def fit(model, loader, opt):\n"
        "    for x in loader:\n"
        "        x = x.cuda()\n"
        "        loss = torch.sum(model(x))\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        print(loss)\n"
    )
    assert codes_of(src) == []
    assert codes_of(src.replace("from rich import print", "from .console import print")) == []
    assert codes_of(src.replace("from rich import print\n", "")) == [(9, "LS202")]


def test_chained_sync_is_one_finding():
    src = "class M:\n    def training_step(self, batch, i):\n        return batch.detach().cpu().numpy().tolist()\n"
    found = lint_source(src)
    assert [(f.line, f.col, f.code) for f in found] == [(3, 16, "LS201")]
    assert "`.tolist()`" in found[0].message


def test_select_and_ignore_filter_rules():
    src = "import torch\nm = torch.nn.DataParallel(net)\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.zeros(3).cuda()\n"
    assert [f.code for f in lint_source(src, select=["LS2"])] == ["LS203"]
    assert [f.code for f in lint_source(src, select=["T11"])] == ["LS301"]
    assert [f.code for f in lint_source(src, ignore=["LS203"])] == ["LS301"]
    assert [f.code for f in lint_source(src, select=["ALL"], ignore=["LS3"])] == ["LS203"]
    with pytest.raises(ValueError, match="unknown rule selector 'LS9'"):
        lint_source(src, select=["LS9"])


def test_noqa_forms():
    src = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.zeros(3).cuda()  # {}\n"
    for comment, kept in [
        ("noqa", 0),
        ("noqa: LS203", 0),
        ("NOQA:LS203", 0),
        ("noqa: E501, LS203", 0),
        ("noqa: LS2", 0),
        ("noqa: LS201", 1),
        ("noqa: E501", 1),
        ("not a noqa-comment", 1),
    ]:
        assert len(lint_source(src.format(comment))) == kept, comment
    # "# noqa" inside a string is not a comment
    assert len(lint_source(src.format("").replace("cuda()  #", 'cuda(); s = "# noqa"'))) == 1


FORWARD = "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.zeros(3).cuda()\n"


def test_finding_fields_and_format():
    (f,) = lint_source(FORWARD, path="a/b.py")
    assert f.to_dict() == {
        "code": "LS203",
        "tip": "T20",
        "path": "a/b.py",
        "line": 5,
        "col": 16,
        "message": f.message,
        "fix": f.fix,
        "runs": "per batch",
        "severity": "warning",
        "replacement": "torch.zeros(3, device='cuda')",
    }
    assert list(f.to_dict()) == [
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
    ]
    assert f.format() == f"a/b.py:5:16: LS203 [T20] warning (per batch): {f.message} (fix: {f.fix})"
    assert "device=" in f.fix
    assert f.replacement in f.fix


def test_a_name_imported_as_two_things_is_not_resolved():
    src = "import numpy as np\nimport torch\n\ndef f():\n    import jax.numpy as np\n    a = np.zeros(3)\n    return torch.tensor(a)\n"
    assert codes_of(src) == []
    assert codes_of(src.replace("    import jax.numpy as np\n", "")) == [(6, "LS101")]


def test_a_cuda_call_alone_makes_the_file_a_gpu_run():
    # the only GPU signal is torch.cuda.*: the loop is not CPU-only, so its syncs count
    src = (
        "import torch\n\n\ndef fit(model, loader, opt):\n    for x in loader:\n"
        "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
        "        torch.cuda.synchronize()\n        print(loss.item())\n"
    )
    assert codes_of(src) == [(9, "LS205")]  # the .item() after the explicit sync waits for nothing more
    assert codes_of(src.replace("        torch.cuda.synchronize()\n", "")) == []  # no GPU signal left: CPU-only
