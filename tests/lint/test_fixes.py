"""Every mechanical fix a rule suggests builds the same tensor: same dtype, shape and values.

A finding's ``replacement`` is the source text that replaces its node. On every fixture finding
that has one, the original expression and the replacement are both evaluated on the CPU (device
targets such as ``"cuda"`` / ``.cuda()`` read as the CPU, the only device CI has) and compared.
A fix that changed a dtype (``torch.empty(n, dtype=torch.long)`` for a float ``torch.Tensor(n)``,
the harmful fix of issue 20) or a value fails here.
"""

from __future__ import annotations

import ast
import math
import re
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from lightning_speedups.lint import lint_source  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


def _on_cpu(text: str) -> str:
    text = re.sub(r"\.cuda\(\s*\d*\s*\)", '.to("cpu")', text)
    text = re.sub(r"\.cuda\(non_blocking=True\)", '.to("cpu")', text)
    text = re.sub(r"([\"'])cuda(:\d+)?([\"'])", r"\1cpu\3", text)
    return text.replace("torch.cuda.", "torch.")


def _namespace() -> dict:
    x = torch.arange(12.0).reshape(4, 3)
    return {
        "torch": torch,
        "th": torch,
        "math": math,
        "x": x,
        "n": 5,
        "device": torch.device("cpu"),
        "self": types.SimpleNamespace(device=torch.device("cpu")),
        "zeros": torch.zeros,
        "randn": torch.randn,
        # PyTorch-GAN's aliases of the device's legacy class, read on the CPU
        "np": np,
        "cuda": False,
        "Tensor": torch.FloatTensor,
        "LongTensor": torch.LongTensor,
    }


def _cases() -> list[tuple[str, int, str, str]]:
    out = []
    for path in sorted(FIXTURES.rglob("*.py.txt")):
        text = path.read_text()
        for f in lint_source(text, path=f"project/{path.name.removesuffix('.txt')}", noqa=False):
            if f.replacement is None:
                continue
            node = next(
                n
                for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.Call) and n.lineno == f.line and n.col_offset == f.col - 1
            )
            out.append((path.name, f.line, ast.get_source_segment(text, node), f.replacement))
    return out


CASES = _cases()


def test_the_fixtures_have_mechanical_fixes_to_check():
    assert len(CASES) >= 15
    assert any("Tensor(" in original and "fill_(math.e" in original for _, _, original, _ in CASES)


@pytest.mark.parametrize("name, line, original, replacement", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_fix_gives_the_same_tensor(name, line, original, replacement):
    assert "device=" in replacement and ".cuda(" not in replacement
    torch.manual_seed(0)
    before = eval(_on_cpu(original), _namespace())
    torch.manual_seed(0)
    after = eval(_on_cpu(replacement), _namespace())
    assert after.dtype == before.dtype, (original, replacement)
    assert after.shape == before.shape
    assert after.device == before.device
    assert torch.equal(after, before), (original, replacement)


def test_legacy_float_constructor_keeps_its_float_dtype():
    src = "import math\nimport torch\nfrom torch import nn\n\nclass M(nn.Module):\n    def forward(self, x):\n        return torch.Tensor(x.size(0)).fill_(math.e ** 0.5).to(x.device)\n"
    (f,) = lint_source(src)
    assert "long" not in f.fix and "int64" not in f.fix
    assert f.replacement == "torch.empty(x.size(0), device=x.device).fill_(math.e ** 0.5)"
    (g,) = lint_source(src.replace("torch.Tensor", "torch.LongTensor"))
    assert g.replacement == "torch.empty(x.size(0), dtype=torch.int64, device=x.device).fill_(math.e ** 0.5)"


def test_random_factories_get_no_mechanical_fix():
    src = "import torch\nfrom torch import nn\n\nclass M(nn.Module):\n    def forward(self, x):\n        return torch.randn(3).cuda()\n"
    (f,) = lint_source(src)
    assert f.replacement is None and "seeded run" in f.message and "keep it" in f.fix
