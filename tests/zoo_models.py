"""The adversarial zoo (issue 35): LightningModules in the shapes real libraries give the pack, which plain
Lightning trains and a careless speed-up part breaks. Written here in the shape public code has them (a
validated dataclass batch as anomaly-detection libraries build them, an irreducible-representation tuple as
equivariant-network libraries hold them, message-passing blocks that update a feature dict in place, a
``tensordot`` with a float32 weight, a frozen pretrained backbone under a trained head, an LSTM), never copied.

Each module builds its own small data (``train_dataloader``), so a test is a Trainer and a fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

N = 64
BATCH = 8


# ------------------------------------------------------------------------------------- objects users bring
@dataclass
class ImageBatch:
    """A batch whose fields are validated when it is built: rebuilt with ``None`` fields, it raises."""

    image: torch.Tensor
    label: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.image, torch.Tensor):
            raise TypeError(f"Image must be a torch.Tensor, got {type(self.image).__name__}")
        if not isinstance(self.label, torch.Tensor):
            raise TypeError(f"Label must be a torch.Tensor, got {type(self.label).__name__}")


class Multiplicities(tuple):
    """A tuple subclass built from a string (``"4x0e+2x1o"``-like, here ``"4+2"``): ``type(x)(items)`` fails."""

    def __new__(cls, text: str) -> Multiplicities:
        counts = [int(part) for part in str(text).split("+")]
        if any(c <= 0 for c in counts):
            raise ValueError(f"multiplicities must be positive, got {counts}")
        return super().__new__(cls, counts)

    @property
    def dim(self) -> int:
        return sum(self)


class GraphBatch:
    """A graph batch object (not a dataclass): its own ``.to()``, and a property that costs and counts its reads."""

    reads = 0

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x = x
        self.y = y

    @property
    def num_nodes(self) -> int:
        GraphBatch.reads += 1
        return int(self.x.shape[0])

    def to(self, device: Any, **kwargs: Any) -> GraphBatch:
        return GraphBatch(self.x.to(device, **kwargs), self.y.to(device, **kwargs))


def _xy(n: int = N, features: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g), torch.randn(n, 1, generator=g)


class _Pairs(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class ZooModule(pl.LightningModule):
    """Adam at 1e-2, shuffled loader off (runs compare step for step), losses recorded per step."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self.losses.append(float(loss.detach().float()))


# ------------------------------------------------------------------------------------------------ the zoo
class DataclassBatchCNN(ZooModule):
    """A conv net over a validated dataclass batch (the probe's channels_last and optimizer candidates apply)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.head = nn.Linear(8, 1)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        images, labels = torch.randn(N, 1, 8, 8, generator=g), torch.randn(N, 1, generator=g)

        def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> ImageBatch:
            return ImageBatch(torch.stack([i for i, _ in items]), torch.stack([t for _, t in items]))

        return DataLoader(_Pairs(images, labels), batch_size=BATCH, collate_fn=collate)

    def training_step(self, batch: ImageBatch, batch_idx: int) -> torch.Tensor:
        assert isinstance(batch, ImageBatch)
        return nn.functional.mse_loss(self.head(self.net(batch.image)), batch.label)


class TupleSubclassMLP(ZooModule):
    """Holds its layout as a tuple subclass with its own constructor, and reads a graph batch object."""

    def __init__(self) -> None:
        super().__init__()
        self.layout = Multiplicities("8+8")
        self.body = nn.Sequential(nn.Linear(16, self.layout.dim), nn.ReLU(), nn.Linear(self.layout.dim, 1))

    def train_dataloader(self) -> DataLoader:
        x, y = _xy()

        def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> GraphBatch:
            return GraphBatch(torch.stack([a for a, _ in items]), torch.stack([b for _, b in items]))

        return DataLoader(_Pairs(x, y), batch_size=BATCH, collate_fn=collate)

    def training_step(self, batch: GraphBatch, batch_idx: int) -> torch.Tensor:
        assert isinstance(self.layout, Multiplicities) and self.layout == (8, 8)
        return nn.functional.mse_loss(self.body(batch.x), batch.y)


class UpdateInPlace(nn.Module):
    """A message-passing block that updates the feature dict it is given, and returns it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        features["h"] = features["h"] + torch.tanh(self.lin(features["h"]))
        return features


class Pure(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + torch.tanh(self.lin(h))


class InPlaceBlocks(ZooModule):
    """Repeated blocks that change their input dict in place (unsafe to checkpoint), then repeated pure blocks
    of another class (safe): ``mutating`` picks which kind the model repeats most."""

    def __init__(self, mutating: bool = True) -> None:
        super().__init__()
        self.mutating = nn.ModuleList(UpdateInPlace(16) for _ in range(4 if mutating else 2))
        self.pure = nn.ModuleList(Pure(16) for _ in range(2 if mutating else 4))
        self.head = nn.Linear(16, 1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*_xy()), batch_size=BATCH)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        features = {"h": x}
        for block in self.mutating:
            features = block(features)
        h = features["h"]
        for block in self.pure:
            h = block(h)
        return nn.functional.mse_loss(self.head(h), y)


class TensordotModel(ZooModule):
    """An equivariant-style contraction: ``torch.tensordot`` of the activations with a float32 weight, which CPU
    autocast does not cast (bf16 activations x fp32 weight: "both inputs should have same dtype")."""

    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = not manual
        self.embed = nn.Linear(16, 8)
        self.weight = nn.Parameter(torch.randn(8, 4) / 3)
        self.head = nn.Linear(4, 1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*_xy()), batch_size=BATCH)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        h = torch.tensordot(self.embed(x), self.weight, dims=([1], [0]))
        loss = nn.functional.mse_loss(self.head(h).float(), y)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.losses.append(float(loss.detach()))
        return None


class FrozenBackbone(ZooModule):
    """A pretrained encoder of repeated layers, frozen, under a trained head (a fine-tuning script's shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(Pure(16) for _ in range(4))
        self.encoder.requires_grad_(False)
        self.head = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*_xy()), batch_size=BATCH)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        for layer in self.encoder:
            x = layer(x)
        return nn.functional.mse_loss(self.head(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.head.parameters(), lr=1e-2)


class RecurrentModel(ZooModule):
    """An LSTM forecaster (on a CPU without bf16 kernels, oneDNN has no bf16 LSTM: the step raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 16, batch_first=True)
        self.head = nn.Linear(16, 1)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        return DataLoader(
            TensorDataset(torch.randn(N, 12, 4, generator=g), torch.randn(N, 1, generator=g)), batch_size=BATCH
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out, _ = self.rnn(x)
        return nn.functional.mse_loss(self.head(out[:, -1]).float(), y)


class FailsOnItsOwn(ZooModule):
    """The user's own bug at a given step: plain Lightning raises it, and so must every preset."""

    def __init__(self, at: int = 1) -> None:
        super().__init__()
        self.at = at
        self.body = nn.ModuleList(Pure(16) for _ in range(3))
        self.head = nn.Linear(16, 1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(*_xy()), batch_size=BATCH)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        if batch_idx == self.at:
            raise ValueError(f"label out of range at batch {batch_idx}")
        for block in self.body:
            x = block(x)
        return nn.functional.mse_loss(self.head(x), y)


ZOO: dict[str, type[ZooModule]] = {
    "dataclass-batch": DataclassBatchCNN,
    "tuple-subclass": TupleSubclassMLP,
    "in-place-blocks": InPlaceBlocks,
    "tensordot": TensordotModel,
    "frozen-backbone": FrozenBackbone,
    "lstm": RecurrentModel,
}
