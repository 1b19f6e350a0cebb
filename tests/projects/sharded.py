"""A CNN whose layers are created in ``configure_model`` (the FSDP / large-model way), not in ``__init__``."""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F


class LateBuiltCNN(pl.LightningModule):
    def __init__(self, classes: int = 10, width: int = 8, lr: float = 0.02) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.features: Optional[nn.Module] = None
        self.classifier: Optional[nn.Module] = None
        self.last_loss: torch.Tensor | None = None

    def configure_model(self) -> None:
        if self.features is not None:  # Lightning calls it on every fit / validate / test
            return
        w = self.hparams.width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1),  # biased conv before a BatchNorm: conv-bias removal has work
            nn.BatchNorm2d(w),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(w, w * 2, 3, padding=1),
            nn.BatchNorm2d(w * 2),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(w * 2, self.hparams.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.features is not None and self.classifier is not None
        return self.classifier(torch.flatten(self.features(x), 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch", "frequency": 1}}
