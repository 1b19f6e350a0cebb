"""An autoencoder trained with manual optimization: one optimizer, its scheduler stepped by hand."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class AutoEncoder(pl.LightningModule):
    def __init__(self, features: int = 64, hidden: int = 16, code: int = 4, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, features))
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        opt = self.optimizers()
        loss = F.mse_loss(self.decoder(self.encoder(x)), x)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.lr_schedulers().step()
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (x,) = batch
        self.log("val_loss", F.mse_loss(self.decoder(self.encoder(x)), x), on_epoch=True)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.99)}


class FlatImageData(pl.LightningDataModule):
    """8x8 images flattened to 64 features, as MNIST autoencoders flatten 28x28."""

    def __init__(self, batch_size: int = 8, n: int = 40) -> None:
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(0)
        self.data = torch.rand(n, 64, generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.data[:32]), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.data[32:]), batch_size=self.batch_size)
