"""Bad input, refused clearly: one table of cases across fit, doctor, bench and lint.

Every case must exit 2 before any training, print a message that names the key or file (``expect``),
and show no traceback. The ranges of the ``speedups:`` settings come from their records (``Bounds`` /
``bounded``), so the same value is refused by every command with the same message.
"""

from __future__ import annotations

import os
import re
import signal
import textwrap

import pytest

from lightning_speedups.cli import main

PROJECT = """
import os
import signal

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Data(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        self.train = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size)


class Net(pl.LightningModule):
    def __init__(self, lr: float = 0.05, interrupt_at: int = -1):
        super().__init__()
        self.interrupt_at = interrupt_at
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))

    def training_step(self, batch, batch_idx):
        if batch_idx == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C in the middle of training
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Boom(pl.LightningModule):
    def __init__(self):
        super().__init__()
        raise RuntimeError("my model cannot start")


class NotAModule:
    pass


import pytorch_lightning


class OlderNet(pytorch_lightning.LightningModule):
    # a model of the older package (its Trainer follows it)

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)
"""

QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's folder: their model module, configs, and a module with a syntax error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "bi_proj.py").write_text(PROJECT)
    (tmp_path / "bi_broken.py").write_text("def broken(:\n    pass\n")
    files = {
        "my.yaml": "model:\n  class_path: bi_proj.Net\ndata:\n  class_path: bi_proj.Data\ntrainer:\n  max_steps: 2\n",
        "empty.yaml": "",
        "list.yaml": "- fit\n- fast\n",
        "syntax.yaml": "model:\n  class_path: bi_proj.Net\n  init_args: [\n",
        "broken_model.yaml": "model:\n  class_path: bi_broken.Net\n",
        "not_lm.yaml": "model:\n  class_path: bi_proj.NotAModule\n",
        "boom.yaml": "model:\n  class_path: bi_proj.Boom\n",
        "data_only.yaml": "data:\n  class_path: bi_proj.Data\n",
        "steps.yaml": "trainer:\n  max_steps: 5\n",
        "nowhere.yaml": "model:\n  class_path: nowhere_pkg.Model\n",
        "a_file.txt": "not a folder\n",
        "mixed_callback.yaml": "model:\n  class_path: bi_proj.OlderNet\ntrainer:\n  callbacks:\n"
        "    - class_path: lightning.pytorch.callbacks.EarlyStopping\n      init_args: {monitor: loss}\n",
        "not_a_callback.yaml": "model:\n  class_path: bi_proj.Net\ntrainer:\n  callbacks:\n"
        "    - class_path: bi_proj.NotAModule\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "a_folder").mkdir()
    return tmp_path


def speedups(text: str) -> list[str]:
    """``--config`` of a file holding ``speedups:`` ``text`` (written by the case)."""
    return ["@speedups", textwrap.dedent(text)]


#: (id, argv, what the message must contain). ``@speedups TEXT`` becomes a config file with that section.
CASES: list[tuple[str, list[str], str]] = [
    # --- fit: files and classes
    ("unknown-command", ["fitt"], "did you mean fit?"),
    # Lightning refusing the user's Trainer setting: the user's input, in Lightning's words, one line
    ("lightning-refuses", ["fit", "--config", "my.yaml", "--trainer.max_steps=-3", *QUIET], "`max_steps` must be"),
    ("missing-config", ["fit", "--config", "nope.yaml"], "neither a file nor a packaged preset"),
    ("empty-config", ["fit", "--config", "empty.yaml"], "empty.yaml is empty"),
    ("list-config", ["fit", "--config", "list.yaml"], "list.yaml holds a list, not a mapping"),
    ("yaml-syntax", ["fit", "--config", "syntax.yaml"], "syntax.yaml line 4, column 1: YAML syntax error"),
    ("model-syntax-error", ["fit", "--config", "broken_model.yaml"], "bi_broken.py:1: SyntaxError"),
    ("not-a-lightning-module", ["fit", "--config", "not_lm.yaml"], "is a class that is not a LightningModule"),
    # the class's own message on every jsonargparse; its type, file and line where jsonargparse chains it (>= 4.51)
    ("model-raises", ["fit", "--config", "boom.yaml"], "my model cannot start"),
    ("data-without-model", ["fit", "--config", "data_only.yaml"], "sets data (bi_proj.Data) but no model"),
    ("no-such-module", ["fit", "--config", "nowhere.yaml"], "No module named 'nowhere_pkg'"),
    # a callback of the other Lightning package than the model's, given in the YAML (issue 38 item 5)
    (
        "callback-of-the-other-package",
        ["fit", "--config", "mixed_callback.yaml"],
        "use: class_path: pytorch_lightning.callbacks.EarlyStopping",
    ),
    ("callback-not-a-callback", ["fit", "--config", "not_a_callback.yaml"], "is not a Lightning callback"),
    ("bad-cli-value", ["fit", "--config", "steps.yaml", "--trainer.max_steps", "abc"], "given on the command line"),
    ("unknown-trainer-key", ["fit", "--config", "my.yaml", "--trainer.max_stepz=3"], "did you mean"),
    ("unknown-speedups-key", ["fit", *speedups("chanels_last: true")], "did you mean: speedups.channels_last"),
    ("bad-literal", ["fit", *speedups("precision: bf17")], "allowed:"),
    ("bad-bool-or-auto", ["fit", *speedups("channels_last: sometimes")], "allowed: true, false, auto"),
    # --- fit: every range a record declares
    (
        "clip-negative",
        ["fit", *speedups("grad_clip: {algorithm: norm, value: -1}")],
        "grad_clip.value: -1.0 must be > 0",
    ),
    ("clip-zero", ["fit", *speedups("grad_clip: {algorithm: value, value: 0}")], "grad_clip.value: 0.0 must be > 0"),
    ("agc-eps", ["fit", *speedups("grad_clip: {algorithm: agc, agc_eps: 0}")], "grad_clip.agc_eps: 0.0 must be > 0"),
    (
        "normalize-lengths",
        ["fit", *speedups("device_normalize: {mean: [0.5, 0.5, 0.5], std: [0.2]}")],
        "mean has 3 value(s) and std 1",
    ),
    ("normalize-std", ["fit", *speedups("device_normalize: {mean: [0.5], std: [0]}")], "device_normalize.std"),
    ("effective-batch", ["fit", *speedups("effective_batch_size: 0")], "effective_batch_size: 0 must be >= 1"),
    ("pct-start", ["fit", *speedups("lr_schedule: {name: onecycle, pct_start: 1.5}")], "pct_start: 1.5 must be > 0"),
    ("horizon", ["fit", *speedups("lr_schedule: {name: onecycle, horizon: 0}")], "horizon: 0.0 must be > 0 and <= 1"),
    ("cycles", ["fit", *speedups("lr_schedule: {name: cyclic, cycles: 0}")], "cycles: 0 must be >= 1"),
    ("max-lr", ["fit", *speedups("lr_schedule: {name: onecycle, max_lr: -0.1}")], "max_lr: -0.1 must be > 0"),
    ("range-test", ["fit", *speedups("lr_schedule: {max_lr: auto, range_test_steps: 1}")], "range_test_steps: 1"),
    ("workers", ["fit", *speedups("loaders: {num_workers: -1}")], "loaders.num_workers: -1 must be >= 0"),
    ("prefetch", ["fit", *speedups("loaders: {prefetch_factor: 0}")], "loaders.prefetch_factor: 0 must be >= 1"),
    ("margin", ["fit", *speedups("largest_batch: {enabled: true, margin: 1.0}")], "largest_batch.margin: 1.0"),
    ("multiple", ["fit", *speedups("largest_batch: {multiple: 0}")], "largest_batch.multiple: 0 must be >= 1"),
    (
        "batch-does-not-divide",
        ["fit", "--config", "my.yaml", "--speedups.effective_batch_size=12", *QUIET],
        "is not a multiple of batch size",
    ),
    # --- doctor
    ("doctor-missing-config", ["doctor", "--config", "nope.yaml"], "neither a file nor a packaged preset"),
    ("doctor-empty-config", ["doctor", "--config", "empty.yaml"], "empty.yaml is empty"),
    ("doctor-steps", ["doctor", "--steps", "0"], "--steps must be at least 1"),
    ("doctor-verify-budget", ["doctor", "--verify", "--verify-budget", "1"], "--verify-budget 1 s is too small"),
    ("doctor-verify-repeats", ["doctor", "--verify", "--verify-repeats", "0"], "--verify-repeats must be at least 1"),
    ("doctor-fail-on", ["doctor", "--fail-on", "sometimes"], "--fail-on"),
    ("doctor-clip", ["doctor", *speedups("grad_clip: {algorithm: norm, value: -1}")], "grad_clip.value: -1.0"),
    # --- bench
    ("bench-tip", ["bench", "--tips", "T99"], "T99"),
    ("bench-preset", ["bench", "--presets", "fastest"], "unknown preset 'fastest'"),
    ("bench-repeats", ["bench", "--repeats", "0"], "--repeats must be an integer >= 1"),
    ("bench-budget", ["bench", "--budget", "5"], "--budget 5 s is too small"),
    ("bench-plot-under-a-file", ["bench", "--plot", "a_file.txt/p.png"], "--plot a_file.txt/p.png"),
    ("bench-json-is-a-folder", ["bench", "--json", "a_folder"], "--json a_folder: that is a folder"),
    ("bench-log-dir-is-a-file", ["bench", "--log-dir", "a_file.txt"], "--log-dir a_file.txt: that is a file"),
    ("bench-target", ["bench", "--target", "val_acc"], "write METRIC=VALUE"),
    ("bench-baseline", ["bench", "--baseline", "mine"], "--baseline"),
    ("bench-clip", ["bench", *speedups("grad_clip: {algorithm: norm, value: -1}")], "grad_clip.value: -1.0"),
    ("bench-data-without-model", ["bench", "--config", "data_only.yaml"], "but no model"),
    # --- lint
    ("lint-missing-path", ["lint", "nowhere_dir"], "nowhere_dir"),
    ("lint-unknown-code", ["lint", ".", "--select", "LS999"], "LS999"),
    ("lint-syntax-error", ["lint", "bi_broken.py"], "bi_broken.py:1"),
]


def _argv(case_argv: list[str], folder) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(case_argv):
        if case_argv[i] == "@speedups":
            path = folder / f"speedups_{i}.yaml"
            path.write_text("speedups:\n" + textwrap.indent(case_argv[i + 1], "  "))
            out += ["--config", str(path)]
            i += 2
            continue
        out.append(case_argv[i])
        i += 1
    return out


def test_the_table_is_large_and_covers_every_command():
    assert len(CASES) >= 40
    assert {argv[0] for _, argv, _ in CASES} >= {"fit", "doctor", "bench", "lint"}
    assert len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("argv", "expect"), [pytest.param(a, e, id=n) for n, a, e in CASES])
def test_bad_input_is_refused_in_one_message(project, capsys, argv, expect):
    code = main(_argv(argv, project))
    out = capsys.readouterr()
    # a logging handler an earlier test left on a closed capture stream prints "--- Logging error ---" with a
    # traceback of its own: not this command's output
    text = re.sub(r"--- Logging error ---.*?Arguments: [^\n]*\n", "", out.err + out.out, flags=re.S)
    assert code == 2, f"exit {code}\n{text[-2000:]}"
    assert expect in text, text[-2000:]
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in out.err.splitlines() if re.match(r"^([\w .-]+: )?error: ", line)]
    assert errors, f"no 'error' line on stderr:\n{out.err[-2000:]}"
    assert len(errors[0]) < 600
    assert not list(project.glob("config*.yaml")), "a refused run left a saved config behind"


def test_ctrl_c_during_fit_exits_130_and_keeps_the_folder_consistent(project):
    # Python's own handler (an earlier test or library may have left SIGINT ignored: then no Ctrl+C arrives)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    handler = signal.getsignal(signal.SIGINT)
    code = main(["fit", "--config", "my.yaml", "--model.init_args.interrupt_at=1", "--trainer.max_steps=5", *QUIET])
    assert code == 130
    assert signal.getsignal(signal.SIGINT) is handler  # Lightning's shutdown set it to ignore: restored
    # the interrupted run trained a step: its saved config stays, and nothing blocks a rerun in place
    assert (project / "config.yaml").is_file()
    assert main(["fit", "--config", "my.yaml", "--trainer.max_steps=1", *QUIET]) == 0
    assert (project / "config-2.yaml").is_file() and os.path.getsize(project / "config.yaml") > 0
    signal.signal(signal.SIGINT, before)


def test_a_model_that_raises_is_named_with_its_file_and_line(project, capsys):
    from importlib import metadata

    if tuple(int(x) for x in metadata.version("jsonargparse").split(".")[:2]) < (4, 51):
        pytest.skip("jsonargparse < 4.51 does not chain the class's own exception: its message only")
    assert main(_argv(["fit", "--config", "boom.yaml"], project)) == 2
    err = capsys.readouterr().err
    assert "raised RuntimeError: my model cannot start (at " in err and "bi_proj.py:" in err
