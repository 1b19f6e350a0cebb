"""A tiny model with repeated blocks (about 1,100 parameters) for the distributed tests, and its data."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset


class DistributedOrder(Sampler):
    """One process's stand-in for Lightning's DistributedSampler(shuffle=True, seed=0) over all ranks:
    the same permutation per epoch, so batch k here holds the samples of batch k on every rank."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator()
        g.manual_seed(self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class Block(nn.Module):
    """A residual block: LayerNorm -> Linear -> GELU, added to its input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.lin = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.gelu(self.lin(self.norm(x)))


class TinyBlocks(pl.LightningModule):
    """Linear(8, 16) -> 3 Blocks -> Linear(16, 4) on fixed random data; records each step's loss.

    Args:
        batch_size: per-process batch.
        n: samples (``n / (batch_size x world size)`` steps per epoch).
    """

    def __init__(self, batch_size: int = 4, n: int = 16, lr: float = 0.1, reference: bool = False) -> None:
        super().__init__()
        self.reference = reference
        torch.manual_seed(0)
        self.batch_size, self.lr = batch_size, lr
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(Block(16) for _ in range(3))
        self.head = nn.Linear(16, 4)
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x).float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def train_dataloader(self):
        # under a distributed strategy Lightning puts a shuffling DistributedSampler here (seed 0)
        sampler = DistributedOrder(len(self.x)) if self.reference else None
        return DataLoader(TensorDataset(self.x, self.y), batch_size=self.batch_size, sampler=sampler)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def named_params(module: nn.Module) -> dict[str, list[float]]:
    """Parameters by name, wrapper prefixes (FSDP, DDP, checkpoint wrappers) removed."""
    out = {}
    for name, p in module.named_parameters():
        for prefix in ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "module."):
            name = name.replace(prefix, "")
        out[name] = p.detach().float().reshape(-1).tolist()
    return out


def reference_run(batch_size: int, epochs: int, accumulate: int = 1, n: int = 16) -> tuple[list[float], dict]:
    """One process, the global batch: the losses per micro-batch and the final parameters."""
    model = TinyBlocks(batch_size=batch_size, n=n, reference=True)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)
    return model.losses, named_params(model)
