"""Tests of T12 grads-to-none: the detection function and the run-time GradsToNoneCheck callback."""

from __future__ import annotations

import warnings

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from torch import nn
from torch.nn import functional as F

from lightning_speedups.callbacks.grads import GradsToNoneCheck
from lightning_speedups.functional.grads import find_zeroed_grads


def test_find_zeroed_grads():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    model[1].bias.requires_grad_(False)
    model(torch.randn(5, 4)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert find_zeroed_grads(model).found  # after backward: grads present, not zero
    assert find_zeroed_grads(model).all_zero == 0
    opt.zero_grad(set_to_none=False)
    rep = find_zeroed_grads(model)
    assert rep.names == ["0.weight", "0.bias", "1.weight"] and rep.total == 3
    assert rep.all_zero == 3 and rep.nbytes == (12 + 3 + 6) * 4
    assert "3 parameter gradient(s)" in rep.summary()
    assert find_zeroed_grads(model.parameters(), check_values=False).all_zero == 0
    opt.zero_grad()
    rep = find_zeroed_grads(model)
    assert not rep.found and rep.summary() == "all 3 gradients are None"
    with pytest.raises(TypeError, match="params"):
        find_zeroed_grads(torch.zeros(3))
    with pytest.raises(TypeError, match="params"):
        find_zeroed_grads(3)  # type: ignore[arg-type]


class Lit(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        self.frozen = nn.Linear(8, 2).requires_grad_(False)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x) + self.frozen(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train_dataloader(self):
        data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
        return torch.utils.data.DataLoader(data, batch_size=8)


class ZeroingOverride(Lit):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=False)


class ZeroingSGD(torch.optim.SGD):
    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=False)


class ZeroingOptimizer(Lit):
    def configure_optimizers(self):
        return ZeroingSGD(self.net.parameters(), lr=0.1)


class Manual(Lit):
    def __init__(self, set_to_none):
        super().__init__()
        self.automatic_optimization = False
        self.set_to_none = set_to_none

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad(set_to_none=self.set_to_none)
        self.manual_backward(super().training_step(batch, batch_idx))
        opt.step()


def _fit(model, max_steps=3, **kw):
    cb = GradsToNoneCheck()
    trainer = Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
        **kw,
    )
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        trainer.fit(model)
    return cb, [str(w.message) for w in rec if "grads-to-none" in str(w.message)]


@pytest.mark.parametrize(
    ("model", "culprit"),
    [(ZeroingOverride(), "ZeroingOverride.optimizer_zero_grad"), (ZeroingOptimizer(), "ZeroingSGD.zero_grad")],
)
def test_callback_finds_zeroing(model, culprit):
    cb, msgs = _fit(model)
    assert len(msgs) == 1  # once
    assert culprit in msgs[0] and "set_to_none=True" in msgs[0]
    assert cb.finding.all_zero == 4 and cb.finding.nbytes == (8 * 16 + 16 + 16 * 2 + 2) * 4
    assert "frozen.weight" not in cb.finding.names  # frozen parameters have no gradient
    assert culprit in cb.status[1]


def test_callback_quiet_when_set_to_none():
    cb, msgs = _fit(Lit())
    assert msgs == [] and cb.finding is None
    assert "set to None" in cb.status[1]


def test_callback_accumulation_is_not_a_finding():
    cb, msgs = _fit(Lit(), max_steps=2, accumulate_grad_batches=2)
    assert msgs == [] and cb.finding is None


@pytest.mark.parametrize("set_to_none", [True, False])
def test_callback_manual_optimization(set_to_none):
    cb, msgs = _fit(Manual(set_to_none))
    assert (len(msgs) == 1) is (not set_to_none)


def test_bad_arguments():
    with pytest.raises(ValueError, match="check_steps"):
        GradsToNoneCheck(check_steps=0)
