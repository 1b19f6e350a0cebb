"""The real clients: libraries from PyPI whose users train LightningModules, each driven the way its own
documentation says a user passes callbacks and Trainer flags, with its own model and data pipeline on small
synthetic data. (Held out, never used here: torchgeo, pytorch-forecasting, scvi-tools, pytorch-tabular,
neuralforecast.)

| library | package | who builds the Trainer | how a user passes callbacks / flags |
|---|---|---|---|
| darts | ``pytorch_lightning`` | the library (``model.fit``) | ``pl_trainer_kwargs={"callbacks": [...], ...}`` |
| gluonts | ``lightning.pytorch`` | the library (``estimator.train``) | ``trainer_kwargs={"callbacks": [...], ...}`` |
| torch_geometric | ``lightning.pytorch`` | the user, on PyG's graph batches | ``Trainer(callbacks=[...], ...)`` |
| mlcolvar | ``lightning.pytorch`` | the user, on mlcolvar's CV models and dict batches | ``lightning.Trainer(callbacks=[...])`` |

Each ``run(callbacks, flags, steps)`` trains a few steps and returns what a :class:`Watch` saw.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

QUIET: dict[str, Any] = {"accelerator": "cpu", "enable_progress_bar": False, "enable_model_summary": False}


@dataclass
class Seen:
    """What one run did, read from inside the Trainer while it trained."""

    losses: list[float] = field(default_factory=list)
    precision: list[str] = field(default_factory=list)
    clip: list[Any] = field(default_factory=list)
    accumulate: list[int] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    trainer: Any = None
    stop_at: int = 0  # with a longer plan (max_steps): end the run after this many steps, as a user's stop would


def watch(namespace: str, seen: Seen) -> Any:
    """A callback of the library's own Lightning package that records each training step."""
    pl = importlib.import_module(namespace)

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            # read after the step (a part that decides at the first batch, such as the start-up probe, may run after
            # this callback's batch-start hook but before the step)
            seen.trainer = trainer
            seen.precision.append(str(trainer.precision))
            seen.clip.append(trainer.gradient_clip_val)
            seen.accumulate.append(int(trainer.accumulate_grad_batches))
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if isinstance(loss, torch.Tensor):
                seen.losses.append(float(loss.detach().float()))
            # the gradients the optimizer stepped with (after any clipping; zeroed only at the next step)
            grads = [p.grad.detach().float().norm() for p in pl_module.parameters() if p.grad is not None]
            seen.grad_norm.append(float(torch.stack(grads).norm()) if grads else 0.0)
            if seen.stop_at and len(seen.losses) >= seen.stop_at:
                trainer.should_stop = True

    return Watch()


def seed(value: int = 0) -> None:
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)


# ------------------------------------------------------------------------------------------------- darts
def run_darts(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    from darts import TimeSeries
    from darts.models import NBEATSModel

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    t = np.arange(120, dtype=np.float32)
    series = TimeSeries.from_values((np.sin(t / 6) + 0.1 * np.cos(t / 2)).astype(np.float32))
    seed()
    model = NBEATSModel(
        input_chunk_length=12,
        output_chunk_length=4,
        num_stacks=2,
        num_blocks=1,
        num_layers=2,
        layer_widths=32,
        batch_size=16,
        n_epochs=1 if not seen.stop_at else 10_000,  # a long plan: max_steps decides
        random_state=0,
        pl_trainer_kwargs={
            **QUIET,
            "logger": False,
            "enable_checkpointing": False,
            "max_steps": steps,
            **flags,
            "callbacks": [*callbacks, watch("pytorch_lightning", seen)],
        },
    )
    model.fit(series)
    return seen


# ----------------------------------------------------------------------------------------------- gluonts
def run_gluonts(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    import pandas as pd
    from gluonts.dataset.common import ListDataset
    from gluonts.torch import SimpleFeedForwardEstimator

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    rng = np.random.default_rng(0)
    data = ListDataset(
        [
            {
                "start": pd.Period("2024-01-01", freq="h"),
                "target": np.sin(np.arange(200) / 8 + k) + rng.normal(0, 0.1, 200),
            }
            for k in range(4)
        ],
        freq="h",
    )
    seed()
    estimator = SimpleFeedForwardEstimator(
        prediction_length=6,
        context_length=24,
        hidden_dimensions=[16, 16],
        batch_size=8,
        num_batches_per_epoch=steps,
        trainer_kwargs={
            **QUIET,
            "logger": False,
            "max_epochs": 1,
            **flags,
            "callbacks": [*callbacks, watch("lightning.pytorch", seen)],
        },
    )
    estimator.train(data, cache_data=True)
    return seen


# ------------------------------------------------------------------------------------------------ PyG
def run_pyg(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    import lightning.pytorch as pl
    from torch_geometric.data import Data
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import GCNConv, global_mean_pool

    class GraphClassifier(pl.LightningModule):
        def __init__(self, features: int = 8, hidden: int = 32) -> None:
            super().__init__()
            self.conv1 = GCNConv(features, hidden)
            self.conv2 = GCNConv(hidden, hidden)
            self.head = torch.nn.Linear(hidden, 2)

        def forward(self, batch: Any) -> torch.Tensor:
            x = self.conv1(batch.x, batch.edge_index).relu()
            x = self.conv2(x, batch.edge_index).relu()
            return self.head(global_mean_pool(x, batch.batch))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.cross_entropy(self(batch), batch.y)
            self.log("train_loss", loss, batch_size=batch.num_graphs)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    g = torch.Generator().manual_seed(0)
    graphs = []
    for k in range(64):
        n = 6 + k % 5
        edges = torch.randint(0, n, (2, 3 * n), generator=g)
        graphs.append(Data(x=torch.randn(n, 8, generator=g), edge_index=edges, y=torch.tensor([k % 2])))
    seed()
    model = GraphClassifier()
    trainer = pl.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, DataLoader(graphs, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0)))
    return seen


# ----------------------------------------------------------------------------------------------- mlcolvar
def run_mlcolvar(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    import lightning
    from mlcolvar.cvs import RegressionCV
    from mlcolvar.data import DictDataset, DictModule

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 6, generator=g)
    y = (x[:, :1] * 2 - x[:, 1:2] ** 2 + 0.05 * torch.randn(256, 1, generator=g)).float()
    seed()
    datamodule = DictModule(
        DictDataset({"data": x, "target": y}), lengths=[0.8, 0.2], batch_size=16, random_split=False
    )
    model = RegressionCV(layers=[6, 16, 16, 1])
    trainer = lightning.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, datamodule)
    return seen


@dataclass(frozen=True)
class Library:
    name: str
    module: str  # what to import to find it installed
    namespace: str
    owns_trainer: bool
    run: Callable[..., Seen]  # (callbacks, trainer flags, steps, plan=max_steps when longer) -> Seen
    passes: str  # how its docs say a user passes callbacks and flags


LIBRARIES = [
    Library(
        "darts", "darts", "pytorch_lightning", True, run_darts, 'NBEATSModel(..., pl_trainer_kwargs={"callbacks": ...})'
    ),
    Library(
        "gluonts",
        "gluonts.torch",
        "lightning.pytorch",
        True,
        run_gluonts,
        'Estimator(..., trainer_kwargs={"callbacks": ...})',
    ),
    Library("torch_geometric", "torch_geometric", "lightning.pytorch", False, run_pyg, "Trainer(callbacks=...)"),
    Library("mlcolvar", "mlcolvar", "lightning.pytorch", False, run_mlcolvar, "lightning.Trainer(callbacks=...)"),
]
