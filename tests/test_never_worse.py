"""Never worse than plain Lightning (issue 35): with any preset, a fit that plain Lightning completes completes.

The adversarial zoo (``zoo_models.py``) holds the shapes that broke the pack on real libraries: a validated
dataclass batch, a tuple subclass with its own constructor, a graph batch with a counting property, blocks that
update their input dict in place, a ``tensordot`` with no mixed-dtype kernel, a frozen backbone, an LSTM. Each
must train under every single-device preset (drawn from the registry), match plain Lightning where the maths
is unchanged, and say in the summary what stepped aside; the user's own error must still reach the user as
Lightning raises it, and bad input must still be refused before training.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from helpers import QUIET
from zoo_models import (
    ZOO,
    DataclassBatchCNN,
    FailsOnItsOwn,
    FrozenBackbone,
    GraphBatch,
    InPlaceBlocks,
    TensordotModel,
    TupleSubclassMLP,
)

from lightning_speedups.callbacks import ActivationCheckpointing, SpeedupCallback, SpeedupsSummary
from lightning_speedups.callbacks.base import TRACEBACK_ENV
from lightning_speedups.callbacks.safeguard import Safeguard
from lightning_speedups.environment import ENV_VAR
from lightning_speedups.errors import BadInput
from lightning_speedups.functional.precision import CPU_BF16_ENV
from lightning_speedups.presets import list_presets, preset

STEPS = 4
#: the presets for one device, from the registry (ddp and fsdp start several processes: tests/distributed)
PRESETS = [name for name in list_presets() if name not in ("ddp", "fsdp")]


class Watch(pl.Callback):
    """Records the precision each training step ran in, and stops after ``steps`` (a longer plan, cut short as a
    user's stop would)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.precision: list[str] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.precision.append(str(trainer.precision))
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


def made(make: Any, *args: Any) -> Any:
    """The module, its weights drawn from one seed (so two runs start equal)."""
    torch.manual_seed(0)
    return make(*args)


def fit(module: pl.LightningModule, callbacks: list[Any] = (), plan: int = 0, **flags: Any) -> tuple[pl.Trainer, Watch]:
    torch.manual_seed(0)
    watch = Watch(STEPS)
    trainer = pl.Trainer(**{**QUIET, "max_steps": plan or STEPS, **flags}, callbacks=[*callbacks, watch])
    trainer.fit(module)
    return trainer, watch


def fit_preset(module: pl.LightningModule, name: str, plan: int = 0) -> tuple[pl.Trainer, Watch]:
    p = preset(name)
    return fit(module, p.callbacks(), plan, **p.trainer_kwargs())


def summary(trainer: pl.Trainer) -> list[str]:
    found = [cb for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary)]
    assert len(found) == 1, f"{len(found)} summaries"
    return found[0].lines


def line_of(trainer: pl.Trainer, name: str) -> str:
    lines = [line for line in summary(trainer) if name in line]
    assert lines, f"no summary line for {name}:\n" + "\n".join(summary(trainer))
    return lines[0]


def aside(trainer: pl.Trainer) -> list[SpeedupCallback]:
    return [cb for cb in trainer.callbacks if isinstance(cb, SpeedupCallback) and cb.stepped_aside]


def check_truthful(trainer: pl.Trainer, watch: Watch) -> None:
    """The summary's precision is what the steps ran."""
    lines = summary(trainer)
    said_bf16 = any(line.startswith("  on ") and "precision (T05)" in line and "bf16" in line for line in lines)
    ran = set(watch.precision)
    assert ran == ({"bf16-mixed"} if said_bf16 else {"32-true"}), (ran, lines)


@pytest.mark.parametrize("kind", sorted(ZOO))
@pytest.mark.parametrize("name", PRESETS)
def test_every_zoo_model_trains_under_every_single_device_preset(kind: str, name: str) -> None:
    module = ZOO[kind]()
    trainer, watch = fit_preset(module, name)
    assert len(module.losses) == STEPS and all(math.isfinite(x) for x in module.losses), module.losses
    if name != "baseline":
        check_truthful(trainer, watch)


@pytest.mark.parametrize("bf16", ["0", "1"], ids=["cpu-without-bf16", "cpu-with-bf16-forced"])
@pytest.mark.parametrize("make", [DataclassBatchCNN, TupleSubclassMLP], ids=["dataclass-batch", "tuple-subclass"])
def test_the_probe_reads_the_users_objects_and_never_rebuilds_them(make: Any, bf16: str, monkeypatch: Any) -> None:
    """``fast`` over a plan long enough for the start-up probe: it snapshots and times the model holding a tuple
    subclass with its own constructor, on a validated dataclass batch and a graph batch whose property counts
    its reads; the run trains, its steps read no property, and where the probe kept fp32 it matches plain."""
    monkeypatch.setenv(CPU_BF16_ENV, bf16)
    plain = made(make)
    fit(plain, plan=2000)
    GraphBatch.reads = 0
    module = made(make)
    trainer, watch = fit_preset(module, "fast", plan=2000)
    probe = next(cb for cb in trainer.callbacks if type(cb).__name__ == "AutoProbe")
    assert probe.result is not None and probe.result.steps > 0, probe.status
    assert GraphBatch.reads == 0
    assert not aside(trainer), [cb.status for cb in aside(trainer)]
    check_truthful(trainer, watch)
    if set(watch.precision) == {"32-true"}:  # fp32 kept: the optimizer's kernel may differ, not the maths
        assert module.losses == pytest.approx(plain.losses, rel=1e-4, abs=1e-6)


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


@pytest.mark.parametrize("mutating", [True, False], ids=["blocks-change-their-inputs", "pure-blocks"])
def test_checkpointing_leaves_alone_blocks_that_change_their_inputs(mutating: bool) -> None:
    plain = made(InPlaceBlocks, mutating)
    fit(plain)
    module = made(InPlaceBlocks, mutating)
    part = ActivationCheckpointing("auto")
    trainer, _ = fit(module, [part, Safeguard(), SpeedupsSummary()])
    assert module.losses == pytest.approx(plain.losses, rel=1e-6, abs=1e-7)
    for a, b in zip(_grads(module), _grads(plain)):
        torch.testing.assert_close(a, b)
    line = line_of(trainer, "activation_checkpointing")
    if mutating:  # the repeated blocks update their input dict: none stays checkpointed, and the line says why
        assert part.wrapped == {} and line.startswith("  off"), line
        assert "changes its inputs in place" in line, line
    else:  # pure blocks: kept, and really wrapped through the run
        assert sorted(part.wrapped) == [f"pure.{i}" for i in range(4)] and line.startswith("  on"), line
    assert "tried" in line_of(trainer, "safeguard")


def test_a_frozen_backbone_is_never_checkpointed() -> None:
    module = FrozenBackbone()
    trainer, _ = fit_preset(module, "memory")
    line = line_of(trainer, "activation_checkpointing")
    assert line.startswith("  off") and "frozen (requires_grad=False)" in line, line
    assert not any(type(m.forward).__name__ == "_CheckpointedForward" for m in module.modules())


@pytest.mark.parametrize("path", ["python", "environment"])
@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual-optimization"])
def test_a_precision_with_no_kernel_for_an_op_keeps_full_precision(path: str, manual: bool, monkeypatch: Any) -> None:
    """``memory`` chooses bf16 on a CPU; ``tensordot`` has no mixed-dtype kernel: the trial on the first batch
    finds it, the run keeps 32-true, and the summary names the op."""
    module = TensordotModel(manual=manual)
    if path == "python":
        trainer, watch = fit_preset(module, "memory")
    else:
        monkeypatch.setenv(ENV_VAR, "memory")
        trainer, watch = fit(module)
    assert len(module.losses) == STEPS and all(math.isfinite(x) for x in module.losses)
    assert set(watch.precision) == {"32-true"}
    line = line_of(trainer, "precision (T05)")
    assert line.startswith("  off") and "bf16-mixed stepped aside" in line and "tensordot" in line, line
    # the same model under plain Lightning with the same precision fails: the op is the model's limit
    with pytest.raises(RuntimeError):
        monkeypatch.delenv(ENV_VAR, raising=False)
        fit(TensordotModel(manual=manual), precision="bf16-mixed")


class Broken(SpeedupCallback):
    """A part with a bug of its own in one hook."""

    part = "broken"

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.calls = 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.report(True, "on")
        if self.where == "setup":
            raise KeyError("no such layer")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.calls += 1
        if self.where == "batch" and batch_idx == 1:
            raise RuntimeError("boom")


@pytest.mark.parametrize("where", ["setup", "batch"])
def test_a_part_whose_own_hook_raises_steps_aside_and_the_fit_goes_on(
    where: str, monkeypatch: Any, caplog: Any
) -> None:
    module = InPlaceBlocks(False)
    part = Broken(where)
    trainer, _ = fit(module, [part, SpeedupsSummary()])
    assert len(module.losses) == STEPS
    assert part.stepped_aside and part.calls == (0 if where == "setup" else 2)
    phrase = "KeyError: 'no such layer' (in its setup)" if where == "setup" else "RuntimeError: boom (in its on_train"
    assert part.status is not None and part.status[0] == "skipped", part.status
    assert "stepped aside: " + phrase in part.status[1] and TRACEBACK_ENV in part.status[1], part.status
    if where == "setup":  # before the summary printed: its line there says it
        line = line_of(trainer, "broken")
        assert line.startswith("  off") and phrase in line, line
    else:  # after: said when it happens, once, on the pack's logger
        said = [
            r.getMessage()
            for r in caplog.records
            if r.name == "lightning_speedups" and "stepped aside" in r.getMessage()
        ]
        assert len(said) == 1 and phrase in said[0] and said[0].startswith("lightning_speedups: broken"), said
    # for a bug report: the traceback, and the run stops there
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    with pytest.raises((KeyError, RuntimeError)):
        fit(InPlaceBlocks(False), [Broken(where), SpeedupsSummary()])


@pytest.mark.parametrize("at", [0, 2], ids=["in-the-trial-batch", "in-a-watched-step"])
@pytest.mark.parametrize("name", ["memory", "fast"])
def test_the_users_own_error_is_raised_as_plain_lightning_raises_it(at: int, name: str) -> None:
    with pytest.raises(ValueError, match="label out of range") as plain:
        fit(FailsOnItsOwn(at))
    with pytest.raises(ValueError, match="label out of range") as ours:
        fit_preset(FailsOnItsOwn(at), name)
    assert str(ours.value) == str(plain.value)
    assert ours.traceback[-1].path.name == "zoo_models.py"  # raised in the user's code, as it is


def test_bad_input_is_still_refused_before_training(monkeypatch: Any) -> None:
    monkeypatch.setenv(CPU_BF16_ENV, "maybe")
    with pytest.raises(BadInput, match=CPU_BF16_ENV):
        preset("fast").callbacks()


_LIBRARY_SCRIPT = """
import logging, sys
import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# the library silences Lightning's start-up lines, as pytorch_lightning libraries do
logging.getLogger("pytorch_lightning.utilities.rank_zero").setLevel(logging.WARNING)

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
trainer = pl.Trainer(max_steps=4, accelerator="cpu", logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)
trainer.fit(Model(), data)
print("DONE", file=sys.stderr)
"""


@pytest.mark.parametrize("value", ["", "fast"])
def test_a_library_that_silenced_lightning_stays_silent_and_the_pack_speaks_in_one_block(value: str, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_LIBRARY_SCRIPT))
    env = {**os.environ, ENV_VAR: value}
    env.pop(TRACEBACK_ENV, None)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    # Python warnings aside (Lightning's own deprecations): "path.py:N: Message" and its source line
    lines = [
        line
        for line in (run.stdout + run.stderr).splitlines()
        if line.strip() and not re.match(r"^\S+\.py:\d+: ", line) and not line.startswith("  warnings.warn")
    ]
    assert not [line for line in lines if "GPU available" in line or "TPU available" in line], lines
    if not value:
        assert lines == ["DONE"], lines
        return
    # one block: its header, then indented rows; nothing from a part outside it
    start = next(i for i, line in enumerate(lines) if line.startswith("lightning_speedups: (its parts took "))
    block = lines[start + 1 :]
    block = block[: next(i for i, line in enumerate(block) if not line.startswith("  "))]
    outside = [line for line in lines if line not in block and line not in (lines[start], "DONE")]
    # Lightning's own line for an entry-point callback (lightning_fabric's registry logger), not the pack's
    outside = [
        line for line in outside if not line.startswith("Adding 1 callbacks from entry point 'lightning_speedups'")
    ]
    assert not outside, outside
    assert any("loaders (T02)" in line for line in block), block
