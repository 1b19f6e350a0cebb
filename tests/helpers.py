"""Small models and data shared by the tests (tiny, CPU, a few milliseconds per step)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.bench import speedups_defaults
from lightning_speedups.bench.args import nest

QUIET = dict(
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
)


def quiet_trainer(**kwargs: Any) -> pl.Trainer:
    """A CPU Trainer that prints nothing, with ``kwargs`` winning."""
    return pl.Trainer(**{**QUIET, **kwargs})


class TinyCNN(pl.LightningModule):
    """conv(bias) -> BN -> ReLU -> conv(bias) -> BN -> pool -> linear, on 1x8x8 inputs, 10 classes."""

    def __init__(self, lr: float = 0.05, batch_size: int = 16, n: int = 128, optimizer: str = "sgd") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(8, 10)
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 1, 8, 8, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.lrs: list[list[float]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def on_before_optimizer_step(self, optimizer) -> None:
        self.lrs.append([g["lr"] for g in optimizer.param_groups])

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self):
        return DataLoader(TensorDataset(self.x[:32], self.y[:32]), batch_size=self.batch_size)

    def configure_optimizers(self):
        if self.hparams.optimizer == "adamw":
            return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class TinyTransformer(pl.LightningModule):
    """A two-layer transformer encoder language model on random tokens."""

    def __init__(
        self, vocab: int = 64, d_model: int = 32, layers: int = 2, seq: int = 16, n: int = 64, batch_size: int = 8
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.lm_head = nn.Linear(d_model, vocab)
        g = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, vocab, (n, seq + 1), generator=g)

    def forward(self, x):
        return self.lm_head(self.encoder(self.embed(x)))

    def training_step(self, batch, batch_idx):
        (tokens,) = batch
        logits = self(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.tokens), batch_size=self.hparams.batch_size)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def nested_speedups(overrides):
    """The ``speedups:`` section a bench run reports: every default, ``overrides`` (dotted keys) on top, nested."""
    return nest({**speedups_defaults(), **overrides})


@pytest.fixture
def one_thread():
    """One torch thread for the test (the 2 CI cores stay shared fairly), restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FakeLauncher:
    """A bench launcher that returns made-up samples/s by variant name (``baseline`` for every baseline)
    and records the order of the runs; its ``clock`` advances ``wall`` seconds a run. A rate may be a
    list: one figure per repeat of that variant. ``mems``: training-memory bytes by variant name."""

    def __init__(self, rates, losses=None, fail=(), wall=1.0, mems=None):
        self.rates = rates
        self.mems = mems or {}
        self.losses = losses or {}
        self.fail = set(fail)
        self.wall = wall
        self.calls: list[str] = []
        self.specs: list[dict] = []
        self.now = 0.0

    def clock(self):
        return self.now

    def run(self, spec, name, timeout=None):
        v = spec["variant"]
        self.calls.append(v)
        self.specs.append(spec)
        self.now += self.wall
        if v in self.fail:
            return {"status": "failed", "reason": "out of memory (OutOfMemoryError: boom)", "wall_s": self.wall}
        key = v if v in self.rates else ("baseline" if v.startswith("baseline") else v)
        rate = self.rates.get(key, 100.0)
        if isinstance(rate, (list, tuple)):  # one figure per repeat, in the order the runs come
            rate = rate[(self.calls.count(v) - 1) % len(rate)]
        overrides = spec["speedups_overrides"]
        return {
            "status": "ok",
            "samples_per_s": rate,
            "step_s": 64 / rate,
            "step_times": [64 / rate] * 3,
            "data_wait_fraction": 0.01,
            "warmup_s": 0.5,
            "warmup_excess_s": 0.2,
            "train_mem_bytes": self.mems.get(key, 1000 if "precision" not in overrides else 500),
            "loss": self.losses.get(key, 2.0),
            "speedups": nested_speedups(overrides),
            "wall_s": self.wall,
        }


def refused_in_process(folder: Any, monkeypatch: Any, capsys: Any, *args: str) -> tuple[int, str, str]:
    """``python -m lightning_speedups ARGS`` run in this process (``cli.main``), from ``folder``, with no
    ``LIGHTNING_SPEEDUPS*`` variable set: its exit code, stdout and stderr. For input the command refuses before any
    work: a fresh interpreter costs about 7 s of imports a case on 2 cores (the real process's exit path is tested
    where a command runs)."""
    import os

    from lightning_speedups.cli import main

    monkeypatch.chdir(folder)
    for name in [k for k in os.environ if k.startswith("LIGHTNING_SPEEDUPS")]:
        monkeypatch.delenv(name)
    try:
        code = main(list(args))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err
