"""Models and data for the doctor tests, importable by class path (``doctor_models.BadHabitsCNN``)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FakeClock:
    """A seconds counter that moves only when told: the doctor tests' injectable clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


#: The clock slow data advances; pass it to ``diagnose(..., clock=CLOCK)``.
CLOCK = FakeClock()


class RawPixels(Dataset):
    """8x8 single-channel "images" with raw 0..255 values (float32), optionally slow to read
    (``delay`` seconds per sample on :data:`CLOCK`; nothing sleeps)."""

    def __init__(self, n: int = 96, delay: float = 0.0, raw: bool = True, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 256, (n, 3, 8, 8), generator=g).float()
        if not raw:
            x = (x - 127.5) / 73.9
        self.x = x
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.delay = delay

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        if self.delay:
            CLOCK.advance(self.delay)  # a slow disk or decoder, on the test's clock
        return self.x[i], self.y[i]


class PixelData(pl.LightningDataModule):
    """Train / val loaders over :class:`RawPixels` (``delay`` seconds per sample on :data:`CLOCK`, ``raw`` 0..255 values)."""

    def __init__(self, batch_size: int = 16, delay: float = 0.0, raw: bool = True) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.delay = delay
        self.raw = raw

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RawPixels(delay=self.delay, raw=self.raw), batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RawPixels(n=32, raw=self.raw, seed=1), batch_size=self.batch_size)


class BadHabitsCNN(pl.LightningModule):
    """Biased convs before BatchNorm, NCHW weights, validation with gradients, zeroed gradients."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(width, 10),
        )

    def forward(self, x):
        return self.net(x / 255.0)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        with torch.enable_grad():  # T17: evaluation that builds a graph
            out = self(x)
        self.log("val_loss", nn.functional.cross_entropy(out, y).detach())

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=False)  # T12: zeroed, not None

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9, foreach=True)


class CleanCNN(pl.LightningModule):
    """No conv bias before BatchNorm, weights in channels_last, a one-cycle schedule stepped per step."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(width, 16),
        )
        self.net.to(memory_format=torch.channels_last)

    def forward(self, x):
        return self.net(x)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x.contiguous(memory_format=torch.channels_last), y

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=100)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class BrokenStepCNN(CleanCNN):
    """A training step that fails on its second batch."""

    def training_step(self, batch, batch_idx):
        if batch_idx == 1:
            raise RuntimeError("boom in training_step")
        return super().training_step(batch, batch_idx)
