"""A UNet for binary segmentation: double convs, max-pool down, transposed-conv up, skip concatenation."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )


class Down(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.MaxPool2d(2), DoubleConv(cin, cout))


class Up(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = self.up(x)
        dy, dx = skip.size(2) - x.size(2), skip.size(3) - x.size(3)
        x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(pl.LightningModule):
    def __init__(self, channels: int = 3, classes: int = 1, width: int = 4, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.inc = DoubleConv(channels, width)
        self.down1 = Down(width, width * 2)
        self.down2 = Down(width * 2, width * 4)
        self.up1 = Up(width * 4, width * 2)
        self.up2 = Up(width * 2, width)
        self.outc = nn.Conv2d(width, classes, 1)
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, Any]:
        logits = self(batch["image"])
        loss = F.binary_cross_entropy_with_logits(logits, batch["mask"])
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return {"loss": loss, "pixels": batch["mask"].numel()}

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch["image"])
        pred = (logits > 0).float()
        inter = (pred * batch["mask"]).sum()
        dice = 2 * inter / (pred.sum() + batch["mask"].sum() + 1e-6)
        self.log("val_dice", dice)

    def configure_optimizers(self) -> Any:
        return torch.optim.RMSprop(self.parameters(), lr=self.hparams.lr, weight_decay=1e-8, momentum=0.9)


class Shapes(Dataset):
    """Images with a bright square; the mask marks it."""

    def __init__(self, n: int = 32, size: int = 16, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(n, 3, size, size, generator=g) * 0.2
        self.masks = torch.zeros(n, 1, size, size)
        for i in range(n):
            y, x = torch.randint(0, size - 6, (2,), generator=g).tolist()
            self.images[i, :, y : y + 6, x : x + 6] += 0.8
            self.masks[i, :, y : y + 6, x : x + 6] = 1.0

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"image": self.images[i], "mask": self.masks[i]}


class SegmentationData(pl.LightningDataModule):
    """The user's loaders come with one worker of their own."""

    def __init__(self, batch_size: int = 4, num_workers: int = 1) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_set = Shapes(32, seed=0)
        self.val_set = Shapes(8, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)
