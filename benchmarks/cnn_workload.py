"""Reference CNN workload for ``bench``: a small ResNet on scikit-learn's digits, upsampled to 32x32,
with real per-sample CPU work in the loader.

Data: the 1,797 handwritten 8x8 digits that scikit-learn ships (``sklearn.datasets.load_digits``,
no download), upsampled once to 32x32 (bilinear) and stored as uint8. Every sample then goes
through a per-sample numpy augmentation in ``__getitem__``, as an image pipeline does: a random
crop of the 4-pixel zero-padded image, a random contrast and brightness change, Gaussian pixel
noise, clipping and normalisation, then ``torch.from_numpy`` (no copy).

Model: a ResNet-style network written the way many users write it: every convolution keeps its
bias although a BatchNorm follows (tip T16 removes it), NCHW tensors (tip T24), plain SGD with
momentum. Stem 1->16 channels, three stages of two basic blocks (16, 32, 64 channels, stride 2
between stages), global average pooling, a linear classifier.

Used by ``benchmarks/cnn.yaml``::

    python -m lightning_speedups bench --config benchmarks/cnn.yaml --threads 1
"""

from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


def load_digits_32(size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """The digits as uint8 images ``N x size x size`` (0..255) and int64 labels."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    images = (images.clamp(0, 1) * 255).round().to(torch.uint8).squeeze(1).numpy()
    return images, bunch.target.astype(np.int64)


class AugmentedDigits(Dataset):
    """Per-sample numpy augmentation of uint8 images (random crop, contrast, brightness, noise).

    Randomness comes from ``np.random`` (seeded by Lightning's ``seed_everything``, per worker too).
    """

    def __init__(
        self, images: np.ndarray, labels: np.ndarray, pad: int = 4, noise: float = 0.05, train: bool = True
    ) -> None:
        self.images = images
        self.labels = labels
        self.pad = pad
        self.noise = noise
        self.train = train
        self.mean, self.std = 0.15, 0.30

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        img = self.images[index].astype(np.float32) / 255.0
        if self.train:
            size = img.shape[0]
            padded = np.pad(img, self.pad)
            top, left = np.random.randint(0, 2 * self.pad + 1, size=2)
            img = padded[top : top + size, left : left + size]
            contrast = np.random.uniform(0.8, 1.2)
            brightness = np.random.uniform(-0.1, 0.1)
            img = img * contrast + brightness + np.random.normal(0.0, self.noise, img.shape).astype(np.float32)
            img = np.clip(img, 0.0, 1.0)
        img = (img - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img[None], dtype=np.float32)), int(self.labels[index])


class DigitsAugmentedDataModule(pl.LightningDataModule):
    """Train / validation split of the upsampled digits with the per-sample augmentation.

    Args:
        batch_size: samples per batch.
        size: image side after upsampling.
        num_workers: loader workers (``speedups.loaders`` can change it).
    """

    def __init__(self, batch_size: int = 64, size: int = 32, num_workers: int = 0) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.size = size
        self.num_workers = num_workers
        self._train: Optional[Dataset] = None
        self._val: Optional[Dataset] = None

    def setup(self, stage: Optional[str] = None) -> None:
        if self._train is not None:
            return
        images, labels = load_digits_32(self.size)
        order = np.random.RandomState(0).permutation(len(labels))
        val, train = order[:300], order[300:]
        self._train = AugmentedDigits(images[train], labels[train])
        self._val = AugmentedDigits(images[val], labels[val], train=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self._train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, drop_last=True
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._val, batch_size=self.batch_size, num_workers=self.num_workers)


class BasicBlock(nn.Module):
    """conv(bias) -> BN -> ReLU -> conv(bias) -> BN, plus the (projected) input, ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=True)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=True)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.skip = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=True), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


class ResNetDigits(pl.LightningModule):
    """A small ResNet for 1-channel images, 10 classes.

    Args:
        widths: channels of the three stages.
        blocks: basic blocks per stage.
        lr: SGD learning rate (momentum 0.9, weight decay 5e-4).
    """

    def __init__(self, widths: tuple[int, int, int] = (16, 32, 64), blocks: int = 2, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=True), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers: list[nn.Module] = []
        c_in = widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks):
                layers.append(BasicBlock(c_in, w, 2 if (i > 0 and j == 0) else 1))
                c_in = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)))

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
