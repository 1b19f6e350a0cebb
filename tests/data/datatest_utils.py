"""Small models, datasets and loaders for the data-pipeline tests."""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

QUIET = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


def trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(**{**QUIET, **kwargs})


class WorkerIdDataset(Dataset):
    """Sample i is (x_i, y_i, pid of the process that loaded it)."""

    def __init__(self, n: int = 32, dim: int = 4) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], torch.tensor(os.getpid())


class FakeClock:
    """A seconds counter that moves only when the test says so; monitors read it instead of the wall clock."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ClockedDataset(Dataset):
    """In-memory samples whose loading takes ``seconds`` each on a :class:`FakeClock`."""

    def __init__(self, clock: FakeClock, seconds: float, n: int = 64, dim: int = 4) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.clock = clock
        self.seconds = seconds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        self.clock.advance(self.seconds)
        return self.x[i], self.y[i]


def keep_collate(batch):
    """A user collate_fn the tests can recognise."""
    xs, ys, pids = zip(*batch)
    return torch.stack(xs), torch.stack(ys), torch.stack(pids)


class Recorder(pl.LightningModule):
    """Linear model that records the pids of the processes that loaded its batches."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.layer = nn.Linear(dim, 2)
        self.pids: list[int] = []
        self.seen: list[Any] = []

    def training_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        if len(batch) > 2:
            self.pids.extend(int(p) for p in batch[2])
        self.seen.append(batch)
        return nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        self.log("val_loss", nn.functional.cross_entropy(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class LoaderModel(Recorder):
    """Returns its own train and val loaders (the ones the tests expect LoaderTuning to rebuild)."""

    def __init__(
        self,
        loader_kwargs: dict | None = None,
        loader_cls: type = DataLoader,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.loader_kwargs = loader_kwargs or {}
        self.loader_cls = loader_cls
        self.returned: dict[str, DataLoader] = {}

    def train_dataloader(self):
        dl = self.loader_cls(
            WorkerIdDataset(),
            batch_size=8,
            shuffle=True,
            collate_fn=keep_collate,
            drop_last=True,
            **self.loader_kwargs,
        )
        self.returned["train"] = dl
        return dl

    def val_dataloader(self):
        dl = self.loader_cls(
            WorkerIdDataset(16),
            batch_size=4,
            collate_fn=keep_collate,
            **self.loader_kwargs,
        )
        self.returned["val"] = dl
        return dl


class LoaderDataModule(pl.LightningDataModule):
    def __init__(self, loader_kwargs: dict | None = None) -> None:
        super().__init__()
        self.loader_kwargs = loader_kwargs or {}
        self.returned: dict[str, DataLoader] = {}

    def train_dataloader(self):
        dl = DataLoader(
            WorkerIdDataset(),
            batch_size=8,
            shuffle=True,
            collate_fn=keep_collate,
            **self.loader_kwargs,
        )
        self.returned["train"] = dl
        return dl

    def val_dataloader(self):
        dl = DataLoader(
            WorkerIdDataset(16),
            batch_size=4,
            collate_fn=keep_collate,
            **self.loader_kwargs,
        )
        self.returned["val"] = dl
        return dl


def tensor_loader(n: int = 32, **kw: Any) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)),
        **kw,
    )


class ExtraArgLoaderBase(DataLoader):
    """A user DataLoader subclass with an extra required argument."""

    def __init__(self, dataset, tag="user", **kwargs):
        self.tag = tag
        super().__init__(dataset, **kwargs)
