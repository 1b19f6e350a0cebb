"""Reference time-to-accuracy workload: a small ResNet on Fashion-MNIST (real data, 60,000 + 10,000 images).

Data: :class:`lightning_speedups.data.fashion_mnist.FashionMNISTDataModule` (the Debian package
``dataset-fashion-mnist``; its validation split is the official test split, so ``val_acc`` is test
accuracy). Model: written the way many users write one: every convolution keeps its bias although a
BatchNorm follows (T16), NCHW (T24), and a common constant-learning-rate optimizer (Adam, lr 1e-3).
Stem 1->w0, three stages of ``blocks`` basic blocks (stride 2 between stages), global average
pooling, a linear classifier. ``lr`` is the attribute Lightning's LR finder reads.

Used by ``benchmarks/fmnist.yaml``::

    python -m lightning_speedups bench --config benchmarks/fmnist.yaml --target val_acc=0.88 --threads 1
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn

from benchmarks.cnn_workload import BasicBlock


class ResNetFashion(pl.LightningModule):
    """A small ResNet for 28x28 grey images, 10 classes, trained with Adam at a constant learning rate.

    Args:
        widths: channels of the three stages.
        blocks: basic blocks per stage.
        lr: Adam's learning rate (constant unless a schedule is added).
    """

    def __init__(self, widths: tuple[int, int, int] = (8, 16, 32), blocks: int = 1, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
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

    def test_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)
