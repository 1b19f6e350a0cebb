"""Config-driven modules, in the shape of public Hydra templates and course notebooks (written here):

- :class:`HydraClassifier`: an MNIST-like classifier whose hyper-parameters hold what a Hydra
  ``instantiate`` hands over (``functools.partial`` optimizer and scheduler, a dataclass config, a user
  class), saved with ``save_hyperparameters``; torchmetrics objects logged; two validation loaders.
- :class:`CourseTransformer`: a small Transformer classifier trained with the user's own gradient
  clipping (``gradient_clip_val`` / ``gradient_clip_algorithm: norm`` in their Trainer) and a warm-up
  stepped by hand in an ``optimizer_step`` override, as course notebooks do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import torch
import torchmetrics
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class NetConfig:
    """What a Hydra ``model/net/*.yaml`` describes."""

    hidden: list[int] = field(default_factory=lambda: [32, 16])
    dropout: float = 0.1


class Standardize:
    """A user class the config names (Hydra ``_target_``)."""

    def __init__(self, mean: float = 0.5, std: float = 0.25) -> None:
        self.mean, self.std = mean, std

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class HydraClassifier(pl.LightningModule):
    def __init__(self, lr: float = 0.05, step_size: int = 2) -> None:
        super().__init__()
        net = NetConfig()
        # what hydra.utils.instantiate passes in: partials and objects, all saved as hyper-parameters
        self.save_hyperparameters(
            {
                "net": net,
                "optimizer": functools.partial(torch.optim.SGD, lr=lr, momentum=0.9),
                "scheduler": functools.partial(torch.optim.lr_scheduler.StepLR, step_size=step_size, gamma=0.5),
                "transform": Standardize(),
            }
        )
        dims = [64, *net.hidden]
        layers: list[nn.Module] = []
        for a, b in zip(dims, dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(net.dropout)]
        self.net = nn.Sequential(*layers, nn.Linear(dims[-1], 10))
        self.train_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=10)
        self.val_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=10)
        self.test_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=10)
        self.val_loss = torchmetrics.MeanMetric()
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.hparams.transform(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("train/loss", loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        logits = self(x)
        if dataloader_idx == 0:
            self.val_loss(F.cross_entropy(logits, y))
            self.val_acc(logits, y)
            self.log("val/loss", self.val_loss, add_dataloader_idx=False)
            self.log("val/acc", self.val_acc, add_dataloader_idx=False)
        else:
            self.test_acc(logits, y)
            self.log("val/shifted_acc", self.test_acc, add_dataloader_idx=False)

    def configure_optimizers(self) -> Any:
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        scheduler = self.hparams.scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
        }


class DigitsLike(pl.LightningDataModule):
    """64-feature inputs in [0, 1] and 10 classes, as flattened 8x8 digits; a shifted copy for the second
    validation loader."""

    def __init__(self, batch_size: int = 8, n: int = 48) -> None:
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[:32], self.y[:32]), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> list[DataLoader]:
        val = TensorDataset(self.x[32:], self.y[32:])
        shifted = TensorDataset((self.x[32:] + 0.1).clamp(0, 1), self.y[32:])
        return [DataLoader(val, batch_size=self.batch_size), DataLoader(shifted, batch_size=self.batch_size)]


class CourseTransformer(pl.LightningModule):
    def __init__(
        self, vocab: int = 16, dim: int = 16, heads: int = 2, layers: int = 2, lr: float = 1e-3, warmup: int = 3
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, 8, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)
        self.last_loss: torch.Tensor | None = None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.pos).mean(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        tokens, y = batch
        loss = F.cross_entropy(self(tokens), y)
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        tokens, y = batch
        self.log("val_acc", (self(tokens).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        # the notebooks' learning-rate warm-up, by hand
        if self.trainer.global_step < self.hparams.warmup:
            scale = float(self.trainer.global_step + 1) / self.hparams.warmup
            for pg in optimizer.param_groups:
                pg["lr"] = scale * self.hparams.lr
        optimizer.step(closure=optimizer_closure)


class ParityData(pl.LightningDataModule):
    """Sequences of 8 tokens; the label is whether token 1 appears an odd number of times."""

    def __init__(self, batch_size: int = 8, n: int = 48) -> None:
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 16, (n, 8), generator=g)
        self.y = ((self.x == 1).sum(1) % 2).long()

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[:32], self.y[:32]), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.x[32:], self.y[32:]), batch_size=self.batch_size)
