"""Fine-tuning: a (pretend pre-trained) conv backbone frozen by Lightning's ``BackboneFinetuning``, a new head."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F


def backbone(width: int = 8) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.Conv2d(width, width * 2, 3, stride=2, padding=1),
        nn.BatchNorm2d(width * 2),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


class FineTuner(pl.LightningModule):
    """``self.backbone`` is the attribute ``BackboneFinetuning`` freezes and later unfreezes."""

    def __init__(self, classes: int = 10, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = backbone()
        self.head = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, classes))
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        # only what is trainable now: BackboneFinetuning adds the backbone's group when it unfreezes it
        opt = torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()), lr=self.hparams.lr)
        return opt
