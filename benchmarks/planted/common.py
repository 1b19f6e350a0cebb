"""What the planted scripts share: a small classifier and a plain Trainer, as users write them (no LightningCLI)."""

import lightning.pytorch as pl
import torch
from torch import nn


class Classifier(pl.LightningModule):
    def __init__(self, width: int = 256, depth: int = 2, inputs: int = 64, read_every_step: bool = False):
        super().__init__()
        layers, size = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(size, width), nn.ReLU()]
            size = width
        self.net = nn.Sequential(*layers, nn.Linear(size, 10))
        self.read_every_step = read_every_step

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.read_every_step:
            if loss > 100:  # a tensor `if`: the host waits for the device's value
                print("diverging")
            self.log("loss_value", loss.item())  # a per-step .item()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(
        max_steps=kwargs.pop("max_steps", 60),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
