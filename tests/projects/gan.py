"""A DCGAN: transposed-conv generator, strided-conv discriminator, manual optimization, two optimizers."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Generator(nn.Module):
    def __init__(self, latent: int = 8, width: int = 8, channels: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(latent, width * 2, 4, 1, 0, bias=False),  # 1 -> 4
            nn.BatchNorm2d(width * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(width * 2, channels, 4, 2, 1, bias=False),  # 4 -> 8
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, width: int = 8, channels: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1),  # 8 -> 4
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(width, width * 2, 4, 2, 1),  # 4 -> 2, its bias is cancelled by the BatchNorm
            nn.BatchNorm2d(width * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(width * 2, 1, 2, 1, 0),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).flatten(1)


class DCGAN(pl.LightningModule):
    def __init__(self, latent: int = 8, lr: float = 2e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = Generator(latent)
        self.discriminator = Discriminator()
        self.last_loss: torch.Tensor | None = None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.size(0), self.hparams.latent, 1, 1, device=self.device)
        # generator: fool the discriminator
        fake = self(z)
        logits = self.discriminator(fake)
        g_loss = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        # discriminator: real -> 1, fake -> 0
        real_logits = self.discriminator(real)
        fake_logits = self.discriminator(fake.detach())
        d_loss = (
            F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
            + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        ) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)
        self.last_loss = (g_loss + d_loss).detach()

    def configure_optimizers(self) -> Any:
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []


class ImageData(pl.LightningDataModule):
    """Random 1x8x8 images in [-1, 1]; the loader asks for pinned memory, as most GAN scripts do."""

    def __init__(self, batch_size: int = 8, n: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.n = n

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.rand(self.n, 1, 8, 8, generator=g) * 2 - 1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, pin_memory=True)
