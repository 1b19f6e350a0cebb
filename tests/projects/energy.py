"""Input gradients inside ``training_step``, in the shape of public energy-based-model tutorials and
adversarial-training modules (written here):

- :class:`EnergyModel`: a sampler object holding the network freezes its parameters, follows the input
  gradient (Langevin dynamics) and unfreezes them; a replay buffer of samples that grows every step.
- :class:`AdversarialClassifier`: FGSM examples from ``torch.autograd.grad`` of the loss w.r.t. the input.
"""

from __future__ import annotations

import random
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Sampler:
    def __init__(self, model: nn.Module, shape: tuple[int, ...], sample_size: int = 8, max_len: int = 64) -> None:
        self.model, self.shape, self.sample_size, self.max_len = model, shape, sample_size, max_len
        self.examples = [torch.rand((1, *shape)) * 2 - 1 for _ in range(sample_size)]

    def sample_new_exmps(self, steps: int = 4, step_size: float = 10.0) -> torch.Tensor:
        n_new = max(1, int(0.05 * self.sample_size))
        fresh = torch.rand((n_new, *self.shape)) * 2 - 1
        old = torch.cat(random.choices(self.examples, k=self.sample_size - n_new), dim=0)
        imgs = self.generate_samples(torch.cat([fresh, old], dim=0).detach(), steps, step_size)
        self.examples = list(imgs.chunk(self.sample_size, dim=0)) + self.examples
        self.examples = self.examples[: self.max_len]
        return imgs

    def generate_samples(self, inp: torch.Tensor, steps: int, step_size: float) -> torch.Tensor:
        was_training = self.model.training
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad = False
        inp.requires_grad = True
        with torch.enable_grad():
            for _ in range(steps):
                inp.data.add_(torch.randn_like(inp) * 0.005).clamp_(-1.0, 1.0)
                out = -self.model(inp)
                out.sum().backward()
                inp.grad.data.clamp_(-0.03, 0.03)
                inp.data.add_(-step_size * inp.grad.data).clamp_(-1.0, 1.0)
                inp.grad.detach_()
                inp.grad.zero_()
        for p in self.model.parameters():
            p.requires_grad = True
        self.model.train(was_training)
        return inp.detach()


class EnergyModel(pl.LightningModule):
    def __init__(self, features: int = 16, alpha: float = 0.1, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.cnn = nn.Sequential(nn.Linear(features, 32), nn.SiLU(), nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, 1))
        self.sampler = Sampler(self.cnn, (features,), sample_size=8)
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cnn(x).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (real,) = batch
        real = (real + 0.005 * torch.randn_like(real)).clamp(-1, 1)
        fake = self.sampler.sample_new_exmps(steps=3)
        real_out, fake_out = self(real), self(fake)
        reg = self.hparams.alpha * (real_out**2 + fake_out**2).mean()
        loss = reg + (fake_out.mean() - real_out.mean())
        self.log("loss", loss)
        self.log("buffer", float(len(self.sampler.examples)))
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        (real,) = batch
        self.log("val_contrast", self(real).mean() - self(torch.rand_like(real) * 2 - 1).mean())

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(0.0, 0.999))
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.97)]


class AdversarialClassifier(pl.LightningModule):
    def __init__(self, eps: float = 0.1, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = x.clone().requires_grad_(True)
        clean = F.cross_entropy(self(x), y)
        (grad,) = torch.autograd.grad(clean, x, retain_graph=True)
        adv = F.cross_entropy(self((x + self.hparams.eps * grad.sign()).detach()), y)
        loss = 0.5 * (clean + adv)
        self.log("train_loss", loss)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class VectorData(pl.LightningDataModule):
    """16-feature vectors in [-1, 1] from 3 clusters (labels for the classifier; the EBM takes inputs only)."""

    def __init__(self, batch_size: int = 8, n: int = 48, labels: bool = True) -> None:
        super().__init__()
        self.batch_size, self.labels = batch_size, labels
        g = torch.Generator().manual_seed(0)
        centres = torch.rand(3, 16, generator=g) * 1.6 - 0.8
        self.y = torch.randint(0, 3, (n,), generator=g)
        self.x = (centres[self.y] + 0.1 * torch.randn(n, 16, generator=g)).clamp(-1, 1)

    def _set(self, sl: slice) -> TensorDataset:
        return TensorDataset(self.x[sl], self.y[sl]) if self.labels else TensorDataset(self.x[sl])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self._set(slice(0, 32)), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._set(slice(32, None)), batch_size=self.batch_size)


class UnlabelledVectors(VectorData):
    def __init__(self, batch_size: int = 8, n: int = 48) -> None:
        super().__init__(batch_size=batch_size, n=n, labels=False)
