"""The pack's callbacks added to an existing Trainer: no preset, no CLI, your own LightningModule.

Run:  python examples/callbacks_on_existing_trainer.py [--max-epochs 3]

Each callback prints whether it applied and why (`SpeedupsSummary`), and the model is the user's own:
a conv -> BatchNorm network on the digits that scikit-learn ships.
"""

import argparse

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups import (
    ChannelsLast,
    ConvBiasRemoval,
    DataWaitMonitor,
    FusedOptimizer,
    LoaderTuning,
    LRSchedule,
    SpeedupsSummary,
)


class MyNet(pl.LightningModule):
    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def digits_loaders(batch_size: int = 64):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.as_tensor(d.images, dtype=torch.float32).unsqueeze(1)
    x = (x - x.mean()) / x.std()
    y = torch.as_tensor(d.target)
    train = DataLoader(TensorDataset(x[:1400], y[:1400]), batch_size=batch_size, shuffle=True)
    val = DataLoader(TensorDataset(x[1400:], y[1400:]), batch_size=batch_size)
    return train, val


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=-1)
    args = parser.parse_args()
    train, val = digits_loaders()
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        logger=False,
        enable_checkpointing=False,
        callbacks=[
            ConvBiasRemoval(),  # T16: biases before BatchNorm removed, outputs unchanged
            ChannelsLast(),  # T24: NHWC weights and batches
            LoaderTuning(),  # T02/T03: workers and pinning decided for this machine
            FusedOptimizer(),  # T06: fused AdamW kernels
            LRSchedule("onecycle"),  # T01: total steps from the trainer, stepped per optimizer step
            DataWaitMonitor(),  # T02/T19: share of each step spent waiting for data
            SpeedupsSummary(),  # prints what is on, what was skipped, and why
        ],
    )
    model = MyNet()
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    (metrics,) = trainer.validate(model, dataloaders=val, verbose=False)
    print("val_acc:", metrics["val_acc"])


if __name__ == "__main__":
    main()
