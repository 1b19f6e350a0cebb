"""channels_last + activation checkpointing + compile on one small CNN through a Trainer."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks.channels_last import ChannelsLast
from lightning_speedups.callbacks.checkpointing import ActivationCheckpointing
from lightning_speedups.callbacks.compile import CompileModules
from lightning_speedups.functional.checkpointing import is_checkpointed
from lightning_speedups.functional.compile import CompileFallbackWarning, compile_status


class ResBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class SmallCNN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(8), ResBlock(8), ResBlock(8))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss(self(x), y)
        self.log("loss", loss)
        return loss

    def predict_step(self, batch, batch_idx):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def data():
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(12, 3, 8, 8, generator=g), torch.randint(0, 4, (12,), generator=g)), batch_size=4
    )


def run(model, callbacks):
    torch.manual_seed(3)
    trainer = pl.Trainer(
        max_steps=2,
        limit_predict_batches=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(model, data())
    preds = torch.cat(trainer.predict(model, data()))
    return preds


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_channels_last_checkpointing_compile_together(backend, recwarn):
    torch._dynamo.reset()
    torch.manual_seed(0)
    plain = SmallCNN()
    fast = copy.deepcopy(plain)
    parts = [ChannelsLast(), ActivationCheckpointing("auto"), CompileModules(backend=backend)]
    ref = run(plain, [])
    out = run(fast, parts)

    assert all(p.active for p in parts), [p.status for p in parts]
    assert fast.blocks[0].conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert [n for n, m in fast.named_modules() if is_checkpointed(m)] == ["blocks.0", "blocks.1", "blocks.2"]
    assert compile_status(fast) == {"stem": "compiled", "blocks": "compiled", "head": "compiled"}
    assert not [w for w in recwarn if issubclass(w.category, CompileFallbackWarning)]

    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert list(fast.state_dict()) == list(plain.state_dict())
    for (name, a), b in zip(plain.state_dict().items(), fast.state_dict().values()):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4, msg=name)
