"""Self-supervised twins, in the shape of public BYOL / MoCo / DINO LightningModules (written here, none copied):

- :class:`MomentumTwins`: an online encoder + projector + predictor and a momentum (EMA) copy updated in
  ``on_train_batch_end``; LARS (a custom optimizer, biases and norms excluded from adaptation) with a
  linear-warm-up-cosine scheduler dict ``interval: step``; a config object (``SimpleNamespace``, as
  ``easydict`` configs are) saved as a hyper-parameter; two validation loaders; a torchmetrics metric
  logged as an object.
- :class:`StudentTeacher`: a DINO-style student and a frozen teacher (``requires_grad`` off, EMA of the
  student in ``on_train_batch_end``), a centre buffer updated every step, temperature-sharpened targets.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import torch
import torchmetrics
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class LARS(torch.optim.Optimizer):
    """Layer-wise adaptive rate scaling (You et al. 2017) over SGD with momentum; groups with
    ``lars_exclude`` (biases, norms) take plain SGD steps."""

    def __init__(
        self, params: Any, lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 1e-6, eta: float = 1e-3
    ):
        super().__init__(
            params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "eta": eta, "lars_exclude": False}
        )

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if not group["lars_exclude"]:
                    d = d.add(p, alpha=group["weight_decay"])
                    w, g = torch.norm(p), torch.norm(d)
                    trust = torch.where((w > 0) & (g > 0), group["eta"] * w / g, torch.ones_like(w))
                    d = d.mul(trust)
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = d.clone()
                else:
                    buf.mul_(group["momentum"]).add_(d)
                p.add_(buf, alpha=-group["lr"])
        return loss


def warmup_cosine(warmup: int, total: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))

    return f


def _encoder(dim: int = 32, hidden: int = 16) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, hidden))


def _mlp(dim: int = 16, out: int = 8) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, out))


def augment(x: torch.Tensor) -> torch.Tensor:
    return x + 0.1 * torch.randn_like(x)


class MomentumTwins(pl.LightningModule):
    def __init__(self, lr: float = 0.2, base_momentum: float = 0.99, warmup_steps: int = 2) -> None:
        super().__init__()
        # a config object in the hyper-parameters, as easydict / OmegaConf-configured projects save theirs
        cfg = SimpleNamespace(lr=lr, base_momentum=base_momentum, warmup_steps=warmup_steps, weight_decay=1e-6)
        self.save_hyperparameters({"cfg": cfg})
        self.cfg = cfg
        self.online = _encoder()
        self.projector = _mlp()
        self.predictor = _mlp(8, 8)
        self.momentum_encoder = copy.deepcopy(self.online)
        self.momentum_projector = copy.deepcopy(self.projector)
        for p in [*self.momentum_encoder.parameters(), *self.momentum_projector.parameters()]:
            p.requires_grad = False
        self.current_momentum = base_momentum
        self.knn_acc = torchmetrics.classification.MulticlassAccuracy(num_classes=4)
        self.last_loss: torch.Tensor | None = None

    @staticmethod
    def _byol(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        v1, v2 = augment(x), augment(x)
        p1, p2 = self.predictor(self.projector(self.online(v1))), self.predictor(self.projector(self.online(v2)))
        with torch.no_grad():
            z1, z2 = (
                self.momentum_projector(self.momentum_encoder(v1)),
                self.momentum_projector(self.momentum_encoder(v2)),
            )
        loss = self._byol(p1, z2) + self._byol(p2, z1)
        self.log("train_loss", loss)
        self.log("tau", self.current_momentum)
        self.last_loss = loss.detach()
        return loss

    @torch.no_grad()
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        tau = self.current_momentum
        for online, target in ((self.online, self.momentum_encoder), (self.projector, self.momentum_projector)):
            for po, pt in zip(online.parameters(), target.parameters()):
                pt.mul_(tau).add_(po.detach(), alpha=1 - tau)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        self.current_momentum = (
            1 - (1 - self.cfg.base_momentum) * (math.cos(math.pi * self.global_step / total) + 1) / 2
        )

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        logits = self.online(x)[:, :4]
        if dataloader_idx == 0:
            self.knn_acc(logits, y)
            self.log("val_acc", self.knn_acc, add_dataloader_idx=False)
        else:
            self.log(
                "val_align",
                self._byol(self.projector(self.online(augment(x)))[:, :8], self.projector(self.online(x))),
                add_dataloader_idx=False,
            )

    def configure_optimizers(self) -> Any:
        exclude = [p for n, p in self.named_parameters() if p.requires_grad and (n.endswith(".bias") or p.ndim == 1)]
        ids = {id(p) for p in exclude}
        rest = [p for p in self.parameters() if p.requires_grad and id(p) not in ids]
        opt = LARS(
            [{"params": rest}, {"params": exclude, "lars_exclude": True, "weight_decay": 0.0}],
            lr=self.cfg.lr,
            weight_decay=self.cfg.weight_decay,
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(self.cfg.warmup_steps, total))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}


class StudentTeacher(pl.LightningModule):
    def __init__(self, lr: float = 1e-3, teacher_momentum: float = 0.996, out_dim: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.student = nn.Sequential(_encoder(), nn.GELU(), nn.Linear(16, out_dim))
        self.teacher = copy.deepcopy(self.student)
        self.teacher.requires_grad_(False)  # frozen: only the EMA moves it
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.last_loss: torch.Tensor | None = None

    def on_train_start(self) -> None:
        self.teacher.eval()

    def _dino(self, student_out: torch.Tensor, teacher_out: torch.Tensor) -> torch.Tensor:
        targets = F.softmax((teacher_out - self.center) / 0.04, dim=-1).detach()
        return torch.sum(-targets * F.log_softmax(student_out / 0.1, dim=-1), dim=-1).mean()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        g1, g2 = augment(x), augment(x)
        with torch.no_grad():
            t1, t2 = self.teacher(g1), self.teacher(g2)
        s1, s2 = self.student(g1), self.student(g2)
        loss = 0.5 * (self._dino(s1, t2) + self._dino(s2, t1))
        with torch.no_grad():
            self.center.mul_(0.9).add_(torch.cat([t1, t2]).mean(0, keepdim=True), alpha=0.1)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.last_loss = loss.detach()
        return loss

    @torch.no_grad()
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        m = self.hparams.teacher_momentum
        for ps, pt in zip(self.student.parameters(), self.teacher.parameters()):
            pt.mul_(m).add_(ps.detach(), alpha=1 - m)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, _ = batch
        self.log("val_loss", self._dino(self.student(x), self.teacher(x)))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.student.parameters(), lr=self.hparams.lr, weight_decay=0.04)


class UnlabelledData(pl.LightningDataModule):
    """32-feature vectors from 4 clusters; labels only for the validation probe."""

    def __init__(self, batch_size: int = 8, n: int = 48) -> None:
        super().__init__()
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(0)
        centres = torch.randn(4, 32, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.x = centres[self.y] + 0.3 * torch.randn(n, 32, generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            TensorDataset(self.x[:32], self.y[:32]), batch_size=self.batch_size, shuffle=True, drop_last=True
        )

    def val_dataloader(self) -> list[DataLoader]:
        probe = DataLoader(TensorDataset(self.x[32:], self.y[32:]), batch_size=self.batch_size)
        align = DataLoader(TensorDataset(self.x[32:40], self.y[32:40]), batch_size=self.batch_size)
        return [probe, align]
