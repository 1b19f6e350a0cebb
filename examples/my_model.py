"""A user's own model and data, driven by a preset YAML (see my_model.yaml).

Run from this folder:
    python -m lightning_speedups fit --config fast.yaml --config my_model.yaml
`fast.yaml` is the packaged preset; `my_model.yaml` names this model and data and adds one setting.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class WineData(pl.LightningDataModule):
    """scikit-learn's bundled wine data set (178 samples, 13 features, 3 classes), standardised."""

    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str | None = None) -> None:
        from sklearn.datasets import load_wine

        data = load_wine()
        x = torch.as_tensor(data.data, dtype=torch.float32)
        x = (x - x.mean(0)) / x.std(0)
        y = torch.as_tensor(data.target)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        self.train = TensorDataset(x[order[40:]], y[order[40:]])
        self.val = TensorDataset(x[order[:40]], y[order[:40]])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)


class WineMLP(pl.LightningModule):
    """A two-layer perceptron."""

    def __init__(self, hidden: int = 64, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(13, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
