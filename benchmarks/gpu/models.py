"""Realistic GPU workloads for ``benchmarks/gpu_check.sh``, written here (torchvision may be absent).

* :class:`ResNet50` -- the ResNet-50 v1.5 shape (bottleneck blocks 3-4-6-3, widths 64..2048, stride
  on the 3x3 convolution, conv biases off before BatchNorm as torchvision has them), 25.6M
  parameters at 1000 classes, on 224x224 images. The data set hands over **uint8** images (a fixed
  pool of random pictures, indexed cheaply): 4x fewer bytes over the bus; they are normalised on the
  device, by ``DeviceNormalize`` when the variant has it, else by the model's own first line.
* :class:`GPT2` -- GPT-2 small (12 layers, d=768, 12 heads, vocabulary 50257, context 1024, tied
  embeddings): 124M parameters, causal attention through ``scaled_dot_product_attention``.

``size="tiny"`` gives the same code at toy sizes for the CPU dry run (``DEVICE=cpu``).
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "resnet50": {
        "full": dict(widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3), classes=1000, image=224, batch=128, pool=512),
        "tiny": dict(widths=(8, 16, 16, 32), blocks=(1, 1, 1, 1), classes=10, image=32, batch=8, pool=32),
    },
    "gpt2": {
        "full": dict(vocab=50257, seq=1024, d=768, heads=12, layers=12, batch=8, pool=64),
        "tiny": dict(vocab=256, seq=32, d=64, heads=4, layers=2, batch=4, pool=16),
    },
}


# ------------------------------------------------------------------------------------------ ResNet-50
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + idt)


class ResNet50(pl.LightningModule):
    """ResNet-50 (or a narrower, shallower one of the same shape) for uint8 NCHW images."""

    def __init__(
        self,
        widths: tuple[int, ...] = (64, 128, 256, 512),
        blocks: tuple[int, ...] = (3, 4, 6, 3),
        classes: int = 1000,
        lr: float = 0.1,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        stem = widths[0]
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(stem),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers: list[nn.Module] = []
        cin = stem
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(Bottleneck(cin, w, stride=2 if (j == 0 and i > 0) else 1))
                cin = w * Bottleneck.expansion
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:  # no DeviceNormalize in this variant: normalise here, on the device
            x = (x.float() / 255.0 - self.mean) / self.std
        x = self.body(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x).float(), y)
        self.log("train_loss", loss.detach(), batch_size=y.shape[0])  # no .item(): stays on the device
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-5)


class RandomImages(Dataset):
    """``length`` samples drawn from a pool of ``pool`` random uint8 images (cheap ``__getitem__``)."""

    def __init__(self, length: int, pool: int, image: int, classes: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (pool, 3, image, image), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (pool,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        j = i % len(self.labels)
        return self.images[j], self.labels[j]


class ImageData(pl.LightningDataModule):
    def __init__(
        self,
        batch_size: int = 128,
        image: int = 224,
        classes: int = 1000,
        pool: int = 512,
        length: int = 100_000,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.batch_size, self.image, self.classes, self.pool = batch_size, image, classes, pool
        self.length, self.num_workers = length, num_workers

    def train_dataloader(self) -> DataLoader:
        ds = RandomImages(self.length, self.pool, self.image, self.classes)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=True, drop_last=True, num_workers=self.num_workers)


# ------------------------------------------------------------------------------------------ GPT-2 small
class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(pl.LightningModule):
    """GPT-2 small (124M parameters at the default sizes), next-token loss."""

    def __init__(
        self, vocab: int = 50257, seq: int = 1024, d: int = 768, heads: int = 12, layers: int = 12, lr: float = 6e-4
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.tok.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.lm_head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (tokens,) = batch
        logits = self(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        self.log("train_loss", loss.detach(), batch_size=tokens.shape[0])
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, betas=(0.9, 0.95), weight_decay=0.1)


class RandomTokens(Dataset):
    def __init__(self, length: int, pool: int, seq: int, vocab: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (pool, seq + 1), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor]:
        return (self.tokens[i % len(self.tokens)],)


class TokenData(pl.LightningDataModule):
    def __init__(
        self,
        batch_size: int = 8,
        seq: int = 1024,
        vocab: int = 50257,
        pool: int = 64,
        length: int = 100_000,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.batch_size, self.seq, self.vocab, self.pool = batch_size, seq, vocab, pool
        self.length, self.num_workers = length, num_workers

    def train_dataloader(self) -> DataLoader:
        ds = RandomTokens(self.length, self.pool, self.seq, self.vocab)
        return DataLoader(ds, batch_size=self.batch_size, shuffle=True, drop_last=True, num_workers=self.num_workers)


def build(workload: str, size: str) -> tuple[pl.LightningModule, pl.LightningDataModule, dict[str, Any]]:
    """The model, data and sizes of a workload (``"resnet50"`` / ``"gpt2"``) at ``"full"`` or ``"tiny"`` size."""
    s = dict(SIZES[workload][size])
    if workload == "resnet50":
        model: pl.LightningModule = ResNet50(widths=s["widths"], blocks=s["blocks"], classes=s["classes"])
        data: pl.LightningDataModule = ImageData(s["batch"], s["image"], s["classes"], s["pool"])
    else:
        model = GPT2(vocab=s["vocab"], seq=s["seq"], d=s["d"], heads=s["heads"], layers=s["layers"])
        data = TokenData(s["batch"], s["seq"], s["vocab"], s["pool"])
    return model, data, s


def example_batch(workload: str, s: dict[str, Any], device: str = "meta") -> Any:
    """One training batch of the workload's shape (for ``measure_flops`` on the meta device)."""
    if workload == "resnet50":
        x = torch.zeros(s["batch"], 3, s["image"], s["image"], device=device)  # already normalised floats
        return x, torch.zeros(s["batch"], dtype=torch.long, device=device)
    return (torch.zeros(s["batch"], s["seq"] + 1, dtype=torch.long, device=device),)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
