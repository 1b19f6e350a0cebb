"""Issue 38 item 5: every ``raise`` of the package is classified (bad input / the user's own error passed on / the
pack's own signal or bug), and every bad-input class is run through the command line from where a user meets it
(reading the configuration, building the Trainer, a part's hook during the fit): one line, exit 2, never "a bug
in lightning_speedups".

The walk reads each ``raise`` with ``ast``: ``raise`` and ``raise err`` pass on what was caught (the user's code's
error, or a bad input raised below); ``raise C(...)`` and ``raise make_error(...)`` are resolved to the class (a
factory by its return annotation). A class that is neither bad input nor one of the pack's signals
(``test_architecture.NOT_BAD_INPUT``) must be listed in :data:`NOT_USER_INPUT` by the function that raises it,
with why it is not the user's mistake.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import typing
from pathlib import Path
from typing import Any, Optional

import pytest
from test_architecture import MODULES, NOT_BAD_INPUT

from lightning_speedups.cli import main
from lightning_speedups.errors import BadInput

#: ``module:function`` raising a class that is not bad input, and why that is right
NOT_USER_INPUT = {
    "lightning_speedups.functional.op_overhead:stop": "OpCounter stopped before it started: the pack's bug",
    "lightning_speedups:__getattr__": "Python's protocol for an unknown module attribute",
    "lightning_speedups.doctor:__getattr__": "Python's protocol for an unknown module attribute",
    "lightning_speedups.config:all_settings": "two records owning one key: the pack's bug, met at import",
    "lightning_speedups.bench.host:_estimate": "a mixin's member the Bench class defines (the pack's bug if not)",
    "lightning_speedups.bench.host:_remaining": "a mixin's member the Bench class defines (the pack's bug if not)",
    "lightning_speedups.bench.host:_add_total": "a mixin's member the Bench class defines (the pack's bug if not)",
    "lightning_speedups.bench.host:_run_one": "a mixin's member the Bench class defines (the pack's bug if not)",
    "lightning_speedups.bench.host:_summarize_phase_one": "a mixin's member the Bench class defines (the pack's bug if not)",
    "lightning_speedups.inspection.findings:from_items": "a check returning no item: the pack's bug",
    "lightning_speedups.tips.record:fill": "a settings group taking FROM_PART a parameter its part lacks: the pack's "
    "bug, met at import",
    "lightning_speedups.lint.graph:context": "a Project built without contexts: the pack's bug",
    "lightning_speedups.lint.runner:select_rules": "lint imports nothing outside lint: its bad input is a "
    "ValueError, which lint/command.py prints on one line with exit 2 (a case of tests/test_bad_input.py)",
    "lightning_speedups.lint.runner:_read_files": "the same ValueError Python's compile() raises for a null byte; "
    "lint reports the file as unreadable, never raises it",
    "lightning_speedups.tips.generate:parts_page_text": "the developer's checkout lost the page's markers",
    "lightning_speedups.tips.generate:tip_module_text": "the developer's checkout lost a tip module's Card: line",
    "lightning_speedups.tips.generate:<module>": "the script's exit code",
    "lightning_speedups.environment:callbacks_factory": "exits 2 after printing the bad LIGHTNING_SPEEDUPS value",
    "lightning_speedups.arguments:import_dotted": "the ImportError its callers catch and reword with the key",
    "lightning_speedups.functional.agc:adaptive_clip_grad_": "a model with sparse gradients: the part steps aside "
    "with this reason (the model is not wrong, the part cannot serve it)",
    "lightning_speedups.trainer.batch_trials:measure_trial_peak": "no step ran at a trial size: the search steps "
    "aside with the fix in its reason (the fit plain Lightning runs still runs)",
    "lightning_speedups.callbacks.conv_bias:on_load_checkpoint": "a checkpoint the part cannot remap: it steps "
    "aside with the fix in its reason (resume without it, or start from the weights); its ValueErrors are caught there "
    "and reworded",
    "lightning_speedups.callbacks.float8:_config": "a torchao without recipes: the part steps aside with the reason",
}


def _enclosing(tree: ast.Module) -> dict[int, tuple[Optional[ast.ClassDef], str]]:
    """``id(raise node) -> (its class, its function name)``."""
    out: dict[int, tuple[Optional[ast.ClassDef], str]] = {}

    def visit(node: ast.AST, cls: Optional[ast.ClassDef], func: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child, func)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, cls, child.name)
            else:
                if isinstance(child, ast.Raise):
                    out[id(child)] = (cls, func)
                visit(child, cls, func)

    visit(tree, None, "<module>")
    return out


def _returned_class(func: Any) -> Optional[type]:
    try:
        hint = typing.get_type_hints(func).get("return")
    except Exception:  # an annotation that does not resolve: the walk says so below
        return None
    return hint if inspect.isclass(hint) else None


def _raised_class(module: Any, node: ast.expr, cls: Optional[ast.ClassDef]) -> Optional[type]:
    target = node.func if isinstance(node, ast.Call) else node
    obj: Any = None
    if isinstance(target, ast.Name):
        obj = vars(module).get(target.id, getattr(builtins, target.id, None))
    elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        if target.value.id == "self" and cls is not None:
            obj = getattr(vars(module).get(cls.name), target.attr, None)
        else:
            obj = getattr(vars(module).get(target.value.id), target.attr, None)
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return obj
    if callable(obj) and isinstance(node, ast.Call):
        return _returned_class(obj)
    return None


def raise_sites() -> list[tuple[str, int, str, str]]:
    """Every ``raise`` of the package: ``(module:function, line, kind, class name)``."""
    sites = []
    for name, path in MODULES.items():
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        module = importlib.import_module(name)
        where = _enclosing(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise):
                continue
            cls_node, func = where[id(node)]
            site = f"{name}:{func}"
            if node.exc is None:
                sites.append((site, node.lineno, "passes on", ""))
                continue
            raised = _raised_class(module, node.exc, cls_node)
            if raised is None:
                if isinstance(node.exc, ast.Name):  # a caught or collected exception, raised again
                    sites.append((site, node.lineno, "passes on", ""))
                else:
                    sites.append((site, node.lineno, "unresolved", ast.unparse(node.exc)[:60]))
            elif issubclass(raised, BadInput):
                sites.append((site, node.lineno, "bad input", raised.__name__))
            elif raised.__name__ in NOT_BAD_INPUT:
                sites.append((site, node.lineno, "the pack's signal", raised.__name__))
            else:
                sites.append(
                    (site, node.lineno, "listed" if site in NOT_USER_INPUT else "unclassified", raised.__name__)
                )
    return sites


SITES = raise_sites()


def test_every_raise_is_classified():
    kinds = {kind for _, _, kind, _ in SITES}
    assert len(SITES) > 200 and {"bad input", "passes on", "the pack's signal", "listed"} <= kinds
    bad = [
        f"{site} (line {line}): {kind} {what}"
        for site, line, kind, what in SITES
        if kind in ("unresolved", "unclassified")
    ]
    assert not bad, (
        "raise a BadInput subclass for the user's mistakes, or list the function in NOT_USER_INPUT with why:\n"
        + "\n".join(bad)
    )
    listed = {site for site, _, kind, _ in SITES if kind == "listed"}
    assert not set(NOT_USER_INPUT) - listed, f"NOT_USER_INPUT names no raise any more: {set(NOT_USER_INPUT) - listed}"


def test_the_walk_resolves_factories_and_methods():
    """The walk could fail: a factory's class comes from its return annotation, a method's through the class."""
    by_site = {(site, what) for site, _, kind, what in SITES if kind == "bad input"}
    assert ("lightning_speedups.callbacks.largest_batch:_search", "BadInput") in by_site  # self._too_small_error
    assert ("lightning_speedups.callbacks.largest_batch:on_fit_start", "SetupRefused") in by_site  # factory
    assert any(what == "SettingError" for _, what in by_site)


def _bad_input_classes() -> list[type]:
    found = {}
    for site, _, kind, what in SITES:
        if kind == "bad input":
            module = importlib.import_module(site.split(":")[0])
            for value in vars(module).values():
                if inspect.isclass(value) and value.__name__ == what:
                    found[what] = value
            if what not in found:  # raised through a factory: found among the package's classes below
                found[what] = None
    for name in MODULES:
        for value in vars(importlib.import_module(name)).values():
            if inspect.isclass(value) and value.__name__ in found and issubclass(value, BadInput):
                found[value.__name__] = value
    assert all(found.values()), [n for n, c in found.items() if c is None]
    return sorted(found.values(), key=lambda c: c.__name__)


BAD_INPUT_CLASSES = _bad_input_classes()

PROJECT = """
import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(32, 3, 8, 8, generator=g), torch.randint(0, 2, (32,), generator=g))
        return DataLoader(data, batch_size=8)


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)
"""

#: where a bad input is met, and the function the injection replaces there
PLACES = {
    "reading the config": ("lightning_speedups.session", "with_default_model"),
    "building the Trainer": ("lightning_speedups.config.Speedups", "callbacks"),
    "a part's hook in the fit": ("lightning_speedups.callbacks.conv_bias", "plan_conv_bias_removal"),
}


def write_project(folder: Path, monkeypatch: Any, extra: str = "") -> None:
    """A user's folder: their module and ``my.yaml`` (a short, quiet fit; ``extra`` appended)."""
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    (folder / "rs_proj.py").write_text(PROJECT)
    (folder / "my.yaml").write_text(
        "model:\n  class_path: rs_proj.Net\ndata:\n  class_path: rs_proj.Data\n"
        "trainer:\n  max_steps: 2\n  logger: false\n  enable_progress_bar: false\n  enable_model_summary: false\n"
        "  enable_checkpointing: false\n" + extra
    )


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("cls", BAD_INPUT_CLASSES, ids=lambda c: c.__name__)
def test_each_bad_input_class_is_one_line_and_exit_2_from_the_command_line(cls, place, tmp_path, monkeypatch, capsys):
    write_project(tmp_path, monkeypatch, "speedups:\n  conv_bias: true\n")
    message = f"`speedups.example` is wrong in the {place} ({cls.__name__}); set it to 1."
    owner_path, attr = PLACES[place]
    module_path, _, owner_name = owner_path.rpartition(".") if owner_path.endswith("Speedups") else (owner_path, "", "")
    owner = (
        getattr(importlib.import_module(module_path), owner_name) if owner_name else importlib.import_module(owner_path)
    )

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise cls(message)

    monkeypatch.setattr(owner, attr, fail)
    code = main(["fit", "--config", "my.yaml"])
    out = capsys.readouterr()
    text = re.sub(r"--- Logging error ---.*?Arguments: [^\n]*\n", "", out.err + out.out, flags=re.S)
    assert code == 2, f"exit {code}\n{text[-2000:]}"
    errors = [line for line in out.err.splitlines() if line.startswith("error: ")]
    assert errors and message in errors[0], text[-2000:]
    assert "bug in lightning_speedups" not in text and "Traceback" not in text, text[-2000:]


def _global_state() -> dict[str, Any]:
    import logging
    import signal
    import sys
    import warnings

    import torch

    loggers = {
        name: (lg.level, tuple(lg.handlers), lg.propagate, lg.disabled)
        for name, lg in [("", logging.getLogger()), *logging.root.manager.loggerDict.items()]
        if isinstance(lg, logging.Logger)
        and name.split(".")[0]
        in ("", "lightning", "pytorch_lightning", "lightning_speedups", "lightning_fabric", "lightning_utilities")
    }
    return {
        "argv": list(sys.argv),
        "warnings": list(warnings.filters),
        "loggers": loggers,
        "sigint": signal.getsignal(signal.SIGINT),
        "torch": (
            torch.backends.cudnn.benchmark,
            torch.get_float32_matmul_precision(),
            torch.is_anomaly_enabled(),
            torch.is_grad_enabled(),
            torch.get_default_dtype(),
        ),
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--config", "my.yaml", "--config", "fast"],
        ["fit", "--config", "my.yaml", "--config", "memory"],
        ["fit", "--config", "my.yaml", "--trainer.max_steps", "-3"],  # refused by Lightning: one line, exit 2
        ["tips"],
        ["lint", "rs_proj.py"],
    ],
    ids=["fit-fast", "fit-memory", "refused", "tips", "lint"],
)
def test_a_command_leaves_no_global_state_changed(argv, tmp_path, monkeypatch, capsys):
    """Issue 38 item 5: after a command (run from Python, as tests and notebooks do) sys.argv, the warnings filters,
    the loggers of Lightning and the pack, the SIGINT handler and torch's global flags are as they were."""
    write_project(tmp_path, monkeypatch)
    import lightning.pytorch  # noqa: F401  (its loggers exist before the command, as in a user's session)

    before = _global_state()
    main(argv)
    capsys.readouterr()
    after = _global_state()
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    if "loggers" in changed:
        old, new = changed["loggers"]
        changed["loggers"] = {n: (old.get(n), new.get(n)) for n in set(old) | set(new) if old.get(n) != new.get(n)}
        changed["loggers"] = {n: v for n, v in changed["loggers"].items() if v[0] is not None} or None
        if changed["loggers"] is None:  # a logger first created by the command is not a changed one
            del changed["loggers"]
    assert not changed, changed
