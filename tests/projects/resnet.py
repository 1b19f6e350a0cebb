"""A small ResNet classifier (basic blocks, no conv bias, as torchvision's) whose datasets are built in ``setup``."""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: tuple[int, ...] = (1, 1), width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        blocks: list[nn.Module] = []
        cin = width
        for i, n in enumerate(layers):
            cout = width * 2**i
            for j in range(n):
                blocks.append(BasicBlock(cin, cout, stride=2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


class ResNetClassifier(pl.LightningModule):
    def __init__(self, classes: int = 10, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = ResNet(classes=classes)
        self.last_loss: torch.Tensor | None = None
        self._correct = 0
        self._seen = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self._correct += int((logits.argmax(1) == y).sum())
        self._seen += len(y)
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return loss

    def on_train_epoch_end(self) -> None:
        # logged once an epoch, from the counts gathered over the epoch
        self.log("train_acc_epoch", self._correct / max(1, self._seen))
        self._correct = self._seen = 0

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        return [opt], [{"scheduler": sched, "interval": "step", "frequency": 2}]


class ImageClassData(pl.LightningDataModule):
    """3x16x16 images of 10 classes; the datasets are created in ``setup``, the loaders from them."""

    def __init__(self, batch_size: int = 8, n: int = 48, classes: int = 10) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.n = n
        self.classes = classes
        self.train_set: Any = None
        self.val_set: Any = None

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, self.classes, (self.n,), generator=g)
        x = torch.randn(self.n, 3, 16, 16, generator=g) + y.view(-1, 1, 1, 1) * 0.1
        self.train_set, self.val_set = random_split(TensorDataset(x, y), [self.n - 8, 8], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)
