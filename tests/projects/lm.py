"""A language model on Lightning's demo ``Transformer``, on a tiny in-memory corpus shaped like WikiText2."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos import Transformer
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class TinyText(Dataset):
    """A token stream cut into ``(input, target)`` blocks, target shifted by one (as the demo's WikiText2)."""

    def __init__(self, vocab: int = 32, tokens: int = 400, block_size: int = 8, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        # a stream with structure: mostly the next token, sometimes a random one
        steps = torch.where(torch.rand(tokens, generator=g) < 0.8, 1, torch.randint(0, vocab, (tokens,), generator=g))
        self.data = torch.cumsum(steps, 0) % vocab
        self.vocab_size = vocab
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.block_size
        return self.data[start : start + self.block_size], self.data[start + 1 : start + self.block_size + 1]


class TinyTextData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 4, vocab: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.vocab = vocab

    def setup(self, stage: str) -> None:
        self.train_set = TinyText(self.vocab, seed=0)
        self.val_set = TinyText(self.vocab, tokens=80, seed=1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)


class LanguageModel(pl.LightningModule):
    def __init__(self, vocab_size: int = 32, lr: float = 1e-3, warmup: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Transformer(vocab_size=vocab_size, ninp=16, nhead=2, nhid=16, nlayers=1, dropout=0.1)
        self.last_loss: torch.Tensor | None = None

    def forward(self, inputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        output = self(inputs, target)
        loss = F.nll_loss(output, target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        self.last_loss = loss.detach()
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        inputs, target = batch
        self.log("val_loss", F.nll_loss(self(inputs, target), target.view(-1)))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        warmup = self.hparams.warmup
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
