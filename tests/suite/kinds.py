"""The model kinds of the shared property suite: tiny, deterministic, CPU, a few hundred parameters.

Every kind is a LightningModule with the same small interface, so the suite can treat them alike:

- ``kind``: its name, one of :data:`lightning_speedups.tips.record.KINDS`;
- ``steps_per_batch``: optimizer steps Lightning counts in ``global_step`` per training batch (two
  for the manual kind, which steps two optimizers);
- ``example_batch()``: the first training batch (a fixed batch for the maths comparisons);
- ``suite_output(batch)``: the tensor the maths comparison looks at (a forward pass);
- ``batches_seen``: training batches run, saved in checkpoints (a resume continues counting);
- ``last_loss``: the last training loss, for the composition runs;
- ``raise_at``: raise :class:`SuiteBoom` in ``training_step`` at that batch (for the flags tests).

The weights are initialised from ``seed`` inside :func:`seeded`, which forks the global RNG, so
building a kind never moves the global random state and two builds with one seed are equal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar, Optional

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from suite.namespace import pl

BATCH = 4
#: every batch is the same: a resume that restarts the epoch's loader from its first batch (Lightning
#: does, for loaders without state) still sees exactly what an uninterrupted run sees. 16 batches an
#: epoch, so the suite's checkpoints (after 2 optimizer steps, up to 8 batches with accumulation) are
#: mid-epoch: Lightning itself resumes a run stopped by ``max_steps`` on the last batch of an epoch
#: with gradient accumulation one batch short (plain ``accumulate_grad_batches=2``, no part: 7
#: batches instead of 8), which is not what this suite tests.
N_SAMPLES = 64


class SuiteBoom(RuntimeError):
    """Raised on purpose inside ``training_step`` (the flags must be restored after it)."""


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with the global CPU RNG seeded, and put the global RNG state back afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _repeated(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``N_SAMPLES`` samples made of the first ``BATCH`` ones repeated (every batch is the same)."""
    reps = N_SAMPLES // BATCH
    return tuple(t.repeat(reps, *([1] * (t.dim() - 1))) for t in tensors)


class SuiteModel(pl.LightningModule):
    """What every kind shares: data, counters, the deliberate failure, checkpointed counters."""

    kind: ClassVar[str] = ""
    steps_per_batch: ClassVar[int] = 1

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__()
        self.seed = seed
        self.raise_at = raise_at
        self.batches_seen = 0
        self.batch_size = BATCH  # read by train_dataloader (the largest-batch search changes it)
        self.last_loss: Optional[torch.Tensor] = None
        with seeded(seed + 1000):
            self.data = self.make_data()

    # ------------------------------------------------------------------ to implement
    def make_data(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def suite_output(self, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    def suite_loss(self, batch: Any) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    def example_batch(self) -> list[torch.Tensor]:
        return [t[:BATCH].clone() for t in self.data]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*self.data), batch_size=self.batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        """One batch; the suite's fits skip validation unless a case's ``trainer`` asks for it."""
        return DataLoader(TensorDataset(*self.example_batch()), batch_size=BATCH)

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.suite_loss(batch)
        self.log("val_loss", loss)
        return loss

    def _count(self, batch_idx: int) -> None:
        if self.raise_at is not None and batch_idx >= self.raise_at:
            raise SuiteBoom(f"deliberate failure at batch {batch_idx}")
        self.batches_seen += 1

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._count(batch_idx)
        loss = self.suite_loss(batch)
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["suite_batches_seen"] = self.batches_seen

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.batches_seen = int(checkpoint.get("suite_batches_seen", 0))


def _images_and_labels(classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(BATCH, 3, 16, 16)
    y = torch.randint(0, classes, (BATCH,))
    return _repeated(x, y)


def _conv_features() -> nn.Sequential:
    """conv(bias) -> BN -> ReLU -> max-pool -> conv(bias) -> BN -> ReLU -> global average pool."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=True),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1, bias=True),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
    )


class CNNKind(SuiteModel):
    """Conv -> BatchNorm blocks (biased convs, so conv-bias removal has work), a Linear head; 3x16x16 in."""

    kind = "cnn"

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__(seed, raise_at)
        with seeded(seed):
            self.features = _conv_features()
            self.head = nn.Linear(6, 10)

    def make_data(self) -> tuple[torch.Tensor, ...]:
        return _images_and_labels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))

    def suite_output(self, batch: Any) -> torch.Tensor:
        return self(batch[0])

    def suite_loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)


class Block(nn.Module):
    """A pre-norm transformer block: self-attention and a GELU MLP, each with a residual."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TransformerKind(SuiteModel):
    """Token embedding, two identical blocks in a ModuleList (repeated blocks), a language-model head."""

    kind = "transformer"
    vocab = 16
    seq = 8
    dim = 8

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__(seed, raise_at)
        with seeded(seed):
            self.embed = nn.Embedding(self.vocab, self.dim)
            self.blocks = nn.ModuleList([Block(self.dim, 2, 16) for _ in range(2)])
            self.norm = nn.LayerNorm(self.dim)
            self.lm_head = nn.Linear(self.dim, self.vocab)

    def make_data(self) -> tuple[torch.Tensor, ...]:
        return _repeated(torch.randint(0, self.vocab, (BATCH, self.seq + 1)))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))

    def suite_output(self, batch: Any) -> torch.Tensor:
        return self(batch[0][:, :-1])

    def suite_loss(self, batch: Any) -> torch.Tensor:
        (tokens,) = batch
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class ManualKind(SuiteModel):
    """A tiny GAN: manual optimization, two optimizers, ``manual_backward`` and ``step`` for each.

    The discriminator has a biased conv feeding a BatchNorm; the noise is part of the batch, so every
    run sees the same noise.
    """

    kind = "manual"
    steps_per_batch = 2
    latent = 8

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__(seed, raise_at)
        self.automatic_optimization = False
        with seeded(seed):
            self.generator = nn.Sequential(nn.Linear(self.latent, 3 * 8 * 8), nn.Tanh())
            self.discriminator = nn.Sequential(
                nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=True),
                nn.BatchNorm2d(4),
                nn.LeakyReLU(0.2),
                nn.Flatten(),
                nn.Linear(4 * 4 * 4, 1),
            )

    def make_data(self) -> tuple[torch.Tensor, ...]:
        return _repeated(torch.rand(BATCH, 3, 8, 8) * 2 - 1, torch.randn(BATCH, self.latent))

    def generate(self, z: torch.Tensor) -> torch.Tensor:
        return self.generator(z).view(-1, 3, 8, 8)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.discriminator(self.generate(z))

    def suite_output(self, batch: Any) -> torch.Tensor:
        real, z = batch
        return torch.cat([self.discriminator(real), self(z)])

    def suite_loss(self, batch: Any) -> torch.Tensor:
        real, z = batch
        fake = self.discriminator(self.generate(z))
        return F.binary_cross_entropy_with_logits(fake, torch.ones_like(fake))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._count(batch_idx)
        real, z = batch
        opt_g, opt_d = self.optimizers()
        # discriminator: real -> 1, fake -> 0
        real_logits = self.discriminator(real)
        fake_logits = self.discriminator(self.generate(z).detach())
        d_loss = F.binary_cross_entropy_with_logits(
            real_logits, torch.ones_like(real_logits)
        ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        # generator: make the discriminator say 1
        g_loss = self.suite_loss(batch)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.last_loss = (d_loss + g_loss).detach()
        return self.last_loss

    def configure_optimizers(self) -> Any:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        return [opt_g, opt_d]


class ConfigureModelKind(SuiteModel):
    """The CNN's layers, created in ``configure_model`` (as for FSDP / meta-device init), not ``__init__``."""

    kind = "configure_model"

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__(seed, raise_at)
        self.features: Optional[nn.Module] = None
        self.head: Optional[nn.Module] = None

    def configure_model(self) -> None:
        if self.features is not None:  # called again on every fit / validate: build once
            return
        with seeded(self.seed):
            self.features = _conv_features()
            self.head = nn.Linear(6, 10)

    def make_data(self) -> tuple[torch.Tensor, ...]:
        return _images_and_labels()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert self.features is not None and self.head is not None, "configure_model() not called"
        return self.head(torch.flatten(self.features(x), 1))

    def suite_output(self, batch: Any) -> torch.Tensor:
        return self(batch[0])

    def suite_loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)


class SchedulerKind(SuiteModel):
    """An MLP on small images whose ``configure_optimizers`` returns a per-step StepLR scheduler."""

    kind = "scheduler"

    def __init__(self, seed: int = 0, raise_at: Optional[int] = None) -> None:
        super().__init__(seed, raise_at)
        with seeded(seed):
            self.net = nn.Sequential(
                nn.Flatten(), nn.Linear(3 * 4 * 4, 12), nn.LayerNorm(12), nn.GELU(), nn.Linear(12, 5)
            )

    def make_data(self) -> tuple[torch.Tensor, ...]:
        return _repeated(torch.randn(BATCH, 3, 4, 4), torch.randint(0, 5, (BATCH,)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def suite_output(self, batch: Any) -> torch.Tensor:
        return self(batch[0])

    def suite_loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


KIND_CLASSES: dict[str, type[SuiteModel]] = {
    cls.kind: cls for cls in (CNNKind, TransformerKind, ManualKind, ConfigureModelKind, SchedulerKind)
}


def make(kind: str, seed: int = 0, raise_at: Optional[int] = None) -> SuiteModel:
    """A fresh model of ``kind`` (equal weights for equal seeds)."""
    return KIND_CLASSES[kind](seed=seed, raise_at=raise_at)


def materialize(model: SuiteModel) -> SuiteModel:
    """Build the layers of a ``configure_model`` kind outside a Trainer (a no-op for the others)."""
    model.configure_model()
    return model
