"""How often a line runs, decided over the project: cases whose frequency (not only whether they fire)
the fixtures' ``# expect`` comments cannot show."""

from __future__ import annotations

from pathlib import Path

from lightning_speedups.lint import lint_sources

FIXTURES = Path(__file__).parent / "fixtures"


def _sources(folder: str) -> dict[str, str]:
    d = FIXTURES / folder
    return {f"project/{folder}/{p.name.removesuffix('.txt')}": p.read_text() for p in sorted(d.glob("*.py.txt"))}


def test_method_of_a_returned_object_runs_where_the_object_is_used():
    """``posterior = self.encode(x); posterior.sample()``: encode returns DiagonalGaussian(...), so
    sample() runs per batch (it was "unknown"), and Prior.draw(), called on make_prior()'s object only
    from __init__, runs once (it was reported as "unknown")."""
    found = lint_sources(_sources("ls203_returned_object"))
    assert [(Path(f.path).name, f.line, f.code, f.severity, f.runs) for f in found] == [
        ("distributions.py", 11, "LS203", "warning", "per batch")
    ]
    assert "called from forward" in found[0].message


def test_a_function_with_returns_of_two_classes_resolves_to_neither():
    sources = {
        "dist.py": (
            "import torch\n"
            "class A:\n"
            "    def sample(self):\n"
            "        return torch.randn(3).to('cuda')\n"
            "class B:\n"
            "    def sample(self):\n"
            "        return torch.rand(3).to('cuda')\n"
        ),
        "model.py": (
            "import torch\n"
            "from dist import A, B\n"
            "class M(torch.nn.Module):\n"
            "    def pick(self, x):\n"
            "        if x:\n"
            "            return A()\n"
            "        return B()\n"
            "    def forward(self, x):\n"
            "        d = self.pick(x)\n"
            "        return d.sample()\n"
        ),
    }
    found = lint_sources(sources)
    # neither sample() is claimed per batch; with no call resolved and no training step reaching them,
    # their frequency is unknown and LS203 does not report them
    assert found == []


def test_rollout_loop_runs_per_environment_step_and_a_main_function_once():
    """cleanrl's shape: random actions drawn on the CPU inside the loop that calls envs.step() are per
    step warnings (they were "per epoch" info); a helper called from a function that runs the whole loop
    over epochs runs once (it was "per epoch")."""
    text = (FIXTURES / "ls203_rollout_loop.py.txt").read_text()
    found = lint_sources({"project/rollout.py": text})
    assert {(f.line, f.severity, f.runs) for f in found} == {(23, "warning", "per batch"), (26, "warning", "per batch")}
    assert all("a rollout loop (line 21): one environment step per iteration" in f.message for f in found)


def test_a_name_assigned_from_its_own_method_call_ends():
    """``h = h.refine()`` in a training loop (a value that refers to itself) once made the returned-class
    search recurse without end; it resolves to nothing now, and the rest of the file is still linted."""
    sources = {
        "model.py": ("import torch\nclass Block(torch.nn.Module):\n    def refine(self):\n        return self\n"),
        "train.py": (
            "import torch\n"
            "def train(model, loader, opt):\n"
            "    for x in loader:\n"
            "        h = model(x.cuda())\n"
            "        h = h.refine()\n"
            "        loss = h.sum()\n"
            "        loss.backward()\n"
            "        opt.step()\n"
            "        print(loss.item())\n"
        ),
    }
    found = lint_sources(sources)
    assert [(f.path, f.line, f.code, f.runs) for f in found] == [("train.py", 9, "LS201", "per batch")]


def test_a_host_copy_at_module_level_of_a_script_is_checked_against_the_module_scope():
    """A script's training loop at module level: the host-consumer check looks for consumers in the
    whole module (a module has no line range; that once raised AttributeError)."""
    text = (
        "import torch\n"
        "for obs in loader:\n"
        "    loss = net(obs.cuda()).sum()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    actions = net.act(obs.cuda()).cpu()\n"
        "    rb.add(actions)\n"
        "    print(loss.item())\n"
    )
    found = lint_sources({"train.py": text})
    assert [(f.line, f.code) for f in found] == [(8, "LS201")]
