"""Three models of different kinds for the start-up probe's measurement (issue 21), none of them a
reference workload: a user's small CNN with BatchNorm, a small vision transformer, an MLP. All train on
Fashion-MNIST (the Debian package dataset-fashion-mnist, via
:class:`lightning_speedups.data.fashion_mnist.FashionMNISTDataModule`), written the way users write them.

    python -m lightning_speedups bench --config benchmarks/probe_cnn.yaml --presets fast --tips none
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn


class _Classifier(pl.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr

    def training_step(self, batch, batch_idx: int):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())


class SmallCNN(_Classifier):
    """conv(bias) -> BN -> ReLU blocks with max-pooling, a linear head; SGD with momentum."""

    def __init__(self, width: int = 32, lr: float = 0.05) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        layers: list[nn.Module] = []
        c_in = 1
        for c_out in (width, 2 * width, 4 * width):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(4 * width * 3 * 3, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class TinyViT(_Classifier):
    """7x7 patches (a strided conv embedding), a learned position embedding, pre-norm encoder layers,
    mean pooling; AdamW with weight decay."""

    def __init__(self, dim: int = 96, depth: int = 3, heads: int = 4, lr: float = 1e-3) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.embed = nn.Conv2d(1, dim, kernel_size=7, stride=7)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.encoder(tokens)).mean(1))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.05)


class MLP(_Classifier):
    """784 -> 512 -> 256 -> 10 with ReLU and dropout; Adam."""

    def __init__(self, hidden: int = 512, lr: float = 1e-3) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(28 * 28, hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)
