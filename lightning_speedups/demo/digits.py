"""A small conv -> BatchNorm CNN on the 8x8 handwritten digits that scikit-learn ships.

It runs anywhere without a download: ``sklearn.datasets.load_digits`` reads a file bundled with
scikit-learn (1,797 images of 8x8 pixels, 10 classes). The model deliberately keeps the habits the
seed documents warn about (biased convolutions right before BatchNorm, contiguous NCHW tensors), so
that the pack's parts have something to change and ``doctor`` has something to find.
"""

from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import torch
import torchmetrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.errors import SettingError


def load_digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """Return the digits as ``(images, labels)``: float images ``N x 1 x 8 x 8`` in 0..16, int64 labels."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    return images, labels


class DigitsDataModule(pl.LightningDataModule):
    """The digits split into train / validation / test, normalised to mean 0 and std 1.

    Args:
        batch_size: samples per batch.
        val_fraction: share of the data held out for validation (the same share again for test).
        num_workers: loader worker processes (the ``speedups.loaders`` section can tune this).
        seed: seed of the split, so that every run sees the same split.

    Example::

        dm = DigitsDataModule(batch_size=64)
        trainer.fit(DigitsCNN(), datamodule=dm)
    """

    def __init__(self, batch_size: int = 64, val_fraction: float = 0.2, num_workers: int = 0, seed: int = 0) -> None:
        super().__init__()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise SettingError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        if not 0.0 < val_fraction < 0.5:
            raise SettingError(f"`val_fraction` must be between 0 and 0.5, got {val_fraction!r}.")
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.num_workers = num_workers
        self.seed = seed
        self._splits: Optional[dict[str, TensorDataset]] = None

    def setup(self, stage: Optional[str] = None) -> None:
        if self._splits is not None:
            return
        images, labels = load_digits_tensors()
        images = (images - images.mean()) / images.std()
        generator = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(len(labels), generator=generator)
        n_hold = int(len(labels) * self.val_fraction)
        parts = {"val": order[:n_hold], "test": order[n_hold : 2 * n_hold], "train": order[2 * n_hold :]}
        self._splits = {name: TensorDataset(images[idx], labels[idx]) for name, idx in parts.items()}

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        assert self._splits is not None, "call setup() first"
        return DataLoader(
            self._splits[split], batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


def _block(c_in: int, c_out: int) -> nn.Sequential:
    # bias=True before BatchNorm on purpose: the T16 part removes it.
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=True), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class DigitsCNN(pl.LightningModule):
    """Three conv -> BatchNorm -> ReLU blocks and a linear classifier for 8x8 digits.

    Args:
        channels: width of the conv blocks.
        lr: learning rate of the AdamW optimizer.
        weight_decay: AdamW weight decay.

    Example::

        trainer = Trainer(max_epochs=5)
        trainer.fit(DigitsCNN(), datamodule=DigitsDataModule())
    """

    def __init__(self, channels: int = 32, lr: float = 3e-3, weight_decay: float = 1e-4) -> None:
        super().__init__()
        if not isinstance(channels, int) or channels < 1:
            raise SettingError(f"`channels` must be a positive integer, got {channels!r}.")
        if lr <= 0:
            raise SettingError(f"`lr` must be positive, got {lr!r}.")
        self.save_hyperparameters()
        self.lr = lr
        self.features = nn.Sequential(
            _block(1, channels),
            _block(channels, channels),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            _block(channels, 2 * channels),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(2 * channels, 10)
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.test_acc = torchmetrics.Accuracy(task="multiclass", num_classes=10)
        self.example_input_array = torch.zeros(2, 1, 8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))

    def _shared_step(self, batch, metric: torchmetrics.Metric, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = nn.functional.cross_entropy(logits, y)
        metric(logits, y)
        self.log(f"{stage}_loss", loss, prog_bar=stage != "train", sync_dist=stage != "train")
        self.log(f"{stage}_acc", metric, prog_bar=True)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, self.train_acc, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._shared_step(batch, self.val_acc, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._shared_step(batch, self.test_acc, "test")

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.hparams.weight_decay)
