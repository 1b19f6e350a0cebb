"""The real clients: libraries from PyPI whose users train LightningModules, each driven the way its own
documentation says a user passes callbacks and Trainer flags, with its own model and data pipeline on small
synthetic data. (Held out, never used here: torchgeo, pytorch-forecasting, scvi-tools, pytorch-tabular,
neuralforecast, neuralprophet, anomalib, nequip, lightning-uq-box.)

| library | package | who builds the Trainer | how a user passes callbacks / flags |
|---|---|---|---|
| darts | ``pytorch_lightning`` | the library (``model.fit``) | ``pl_trainer_kwargs={"callbacks": [...], ...}`` |
| gluonts | ``lightning.pytorch`` | the library (``estimator.train``) | ``trainer_kwargs={"callbacks": [...], ...}`` |
| torch_geometric | ``lightning.pytorch`` | the user, on PyG's graph batches | ``Trainer(callbacks=[...], ...)`` |
| mlcolvar | ``lightning.pytorch`` | the user, on mlcolvar's CV models and dict batches | ``lightning.Trainer(callbacks=[...])`` |
| darts (RNNModel) | ``pytorch_lightning`` | the library, an LSTM | ``pl_trainer_kwargs={"callbacks": [...]}`` |
| gluonts (DeepAR) | ``lightning.pytorch`` | the library, an LSTM | ``trainer_kwargs={"callbacks": [...]}`` |
| transformers | ``lightning.pytorch`` | the user: a frozen BERT with a trained head, ``BatchEncoding`` batches | ``Trainer(callbacks=[...])`` |
| chemprop | ``lightning.pytorch`` | the user, on molecular graphs (NamedTuple of dataclass batches) | ``pl.Trainer(callbacks=[...])`` |
| pykeen | ``pytorch_lightning`` | the library (``lit_pipeline``), knowledge-graph embeddings | ``trainer_kwargs={"callbacks": [...]}`` |
| replay | ``lightning.pytorch`` | the user, SASRec over item sequences | ``lightning.Trainer(callbacks=[...])`` |
| e3nn | ``lightning.pytorch`` | the user: an equivariant potential, forces by autograd in the step | ``Trainer(callbacks=[...])`` |
| deeptab | ``lightning.pytorch`` | the library (``fit``), Mamba over tabular features | ``fit(X, y, callbacks=[...], **trainer_kwargs)`` |

Each ``run(callbacks, flags, steps)`` trains a few steps and returns what a :class:`Watch` saw.
"""

from __future__ import annotations

import importlib
import random
import tempfile
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
def _darts_fit(make: Callable[..., Any], callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int) -> Seen:
    """A darts forecasting model built by ``make(n_epochs=..., pl_trainer_kwargs=...)``, fit on a small series."""
    from darts import TimeSeries

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    t = np.arange(120, dtype=np.float32)
    series = TimeSeries.from_values((np.sin(t / 6) + 0.1 * np.cos(t / 2)).astype(np.float32))
    seed()
    model = make(
        n_epochs=1 if not seen.stop_at else 10_000,  # a long plan: max_steps decides
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


def run_darts(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    from darts.models import NBEATSModel

    def make(**kwargs: Any) -> Any:
        return NBEATSModel(
            input_chunk_length=12,
            output_chunk_length=4,
            num_stacks=2,
            num_blocks=1,
            num_layers=2,
            layer_widths=32,
            batch_size=16,
            random_state=0,
            **kwargs,
        )

    return _darts_fit(make, callbacks, flags, steps, plan)


# ----------------------------------------------------------------------------------------------- gluonts
def _gluonts_train(
    make: Callable[..., Any], callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int
) -> Seen:
    """A gluonts estimator built by ``make(num_batches_per_epoch=..., trainer_kwargs=...)``, trained on four small
    hourly series."""
    import pandas as pd
    from gluonts.dataset.common import ListDataset

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
    estimator = make(
        num_batches_per_epoch=steps,
        trainer_kwargs={
            **QUIET,
            "logger": False,
            "max_epochs": 1,
            "default_root_dir": tempfile.mkdtemp(prefix="gluonts-"),  # the estimator checkpoints every epoch
            **flags,
            "callbacks": [*callbacks, watch("lightning.pytorch", seen)],
        },
    )
    estimator.train(data, cache_data=True)
    return seen


def run_gluonts(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    from gluonts.torch import SimpleFeedForwardEstimator

    def make(**kwargs: Any) -> Any:
        return SimpleFeedForwardEstimator(
            prediction_length=6, context_length=24, hidden_dimensions=[16, 16], batch_size=8, **kwargs
        )

    return _gluonts_train(make, callbacks, flags, steps, plan)


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


# ----------------------------------------------------------------------------------------- darts, recurrent
def run_darts_rnn(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """darts' recurrent model (an LSTM): the kind whose bf16 kernels a CPU may lack."""
    from darts.models import RNNModel

    def make(**kwargs: Any) -> Any:
        return RNNModel(
            model="LSTM",
            input_chunk_length=12,
            training_length=16,
            hidden_dim=16,
            n_rnn_layers=1,
            batch_size=16,
            random_state=0,
            **kwargs,
        )

    return _darts_fit(make, callbacks, flags, steps, plan)


# --------------------------------------------------------------------------------------- gluonts, DeepAR
def run_gluonts_deepar(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """gluonts' DeepAR: an LSTM over lagged features, trained by the estimator's own Trainer."""
    from gluonts.torch import DeepAREstimator

    def make(**kwargs: Any) -> Any:
        return DeepAREstimator(
            freq="h",
            prediction_length=6,
            context_length=24,
            num_layers=1,
            hidden_size=16,
            lags_seq=[1, 2, 24],
            batch_size=8,
            **kwargs,
        )

    return _gluonts_train(make, callbacks, flags, steps, plan)


# ------------------------------------------------------------------------------ Hugging Face transformers
def run_transformers(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """A tiny BERT classifier built from its config (no download) whose encoder is frozen, a trainable head on top,
    in the LightningModule shape of Lightning's own text-classification example; batches are ``BatchEncoding``
    (a ``UserDict``), the model returns a ``ModelOutput``."""
    import lightning.pytorch as pl
    from transformers import BatchEncoding, BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = BertForSequenceClassification(config)
            for p in self.model.bert.parameters():  # the usual fine-tuning start: a frozen backbone
                p.requires_grad_(False)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            out = self.model(**batch)
            self.log("train_loss", out.loss)
            return out.loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW([p for p in self.parameters() if p.requires_grad], lr=1e-3)

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (64, 16), generator=g)
    labels = torch.randint(0, 2, (64,), generator=g)
    items = [
        {"input_ids": ids[i], "attention_mask": torch.ones(16, dtype=torch.long), "labels": labels[i]}
        for i in range(64)
    ]

    def collate(batch: list[dict[str, torch.Tensor]]) -> Any:
        return BatchEncoding({k: torch.stack([x[k] for x in batch]) for k in batch[0]})

    seed()
    model = Classifier()
    trainer = pl.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, torch.utils.data.DataLoader(items, batch_size=8, collate_fn=collate))
    return seen


# ----------------------------------------------------------------------------------------------- chemprop
def run_chemprop(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """chemprop's message-passing network on molecular graphs: batches are a NamedTuple (``TrainingBatch``) holding
    a dataclass graph (``BatchMolGraph``), as its Python API's training example builds them."""
    import lightning.pytorch as pl
    from chemprop import data, featurizers, models, nn

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    smiles = [
        "CCO",
        "CCN",
        "c1ccccc1",
        "CC(=O)O",
        "CCCC",
        "C1CCCCC1",
        "CCOC",
        "CNC",
        "OCCO",
        "CC(C)O",
        "CCCl",
        "c1ccncc1",
    ]
    smiles = smiles * 4
    ys = np.array([[len(s) / 10.0] for s in smiles], dtype=np.float32)
    featurizer = featurizers.SimpleMoleculeMolGraphFeaturizer()
    dataset = data.MoleculeDataset([data.MoleculeDatapoint.from_smi(s, y) for s, y in zip(smiles, ys)], featurizer)
    seed()
    loader = data.build_dataloader(dataset, num_workers=0, batch_size=8, seed=0)
    model = models.MPNN(
        nn.BondMessagePassing(d_h=32, depth=2), nn.MeanAggregation(), nn.RegressionFFN(input_dim=32, hidden_dim=32)
    )
    trainer = pl.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, loader)
    return seen


# ------------------------------------------------------------------------------------------------ pykeen
def run_pykeen(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """PyKEEN's knowledge-graph embeddings through its Lightning pipeline (``lit_pipeline`` builds a
    ``pytorch_lightning`` Trainer from ``trainer_kwargs``), on the Nations graph it ships; its loss has shape [1]."""
    from pykeen.contrib.lightning import lit_pipeline

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    seed()
    lit_pipeline(
        training_loop="slcwa",
        training_loop_kwargs={
            "model": "distmult",
            "dataset": "nations",
            "model_kwargs": {"embedding_dim": 16},
            "batch_size": 64,
        },
        trainer_kwargs={
            **QUIET,
            "logger": False,
            "enable_checkpointing": False,
            "max_steps": steps,
            "limit_val_batches": 0,
            **flags,
            "callbacks": [*callbacks, watch("pytorch_lightning", seen)],
        },
    )
    return seen


# ---------------------------------------------------------------------------------------------- replay
def run_replay(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """RePlay's SASRec, a transformer over item sequences, as its sequential-recommendation example trains it:
    interactions -> ``SequenceTokenizer`` -> ``SasRecTrainingDataset`` -> ``lightning.Trainer``."""
    import lightning
    import pandas as pd
    from replay.data import Dataset, FeatureHint, FeatureInfo, FeatureSchema, FeatureSource, FeatureType
    from replay.data.nn import SequenceTokenizer, TensorFeatureInfo, TensorFeatureSource, TensorSchema
    from replay.models.nn.sequential import SasRec
    from replay.models.nn.sequential.sasrec import SasRecTrainingDataset

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    rng = np.random.default_rng(0)
    rows = [(u, int(rng.integers(0, 30)), t) for u in range(40) for t in range(12)]
    interactions = pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])
    features = FeatureSchema(
        [
            FeatureInfo("user_id", FeatureType.CATEGORICAL, FeatureHint.QUERY_ID),
            FeatureInfo("item_id", FeatureType.CATEGORICAL, FeatureHint.ITEM_ID),
            FeatureInfo("timestamp", FeatureType.NUMERICAL, FeatureHint.TIMESTAMP),
        ]
    )
    schema = TensorSchema(
        TensorFeatureInfo(
            name="item_id_seq",
            is_seq=True,
            feature_type=FeatureType.CATEGORICAL,
            feature_sources=[TensorFeatureSource(FeatureSource.INTERACTIONS, "item_id")],
            feature_hint=FeatureHint.ITEM_ID,
        )
    )
    tokenizer = SequenceTokenizer(schema, allow_collect_to_master=True)
    sequences = tokenizer.fit_transform(Dataset(feature_schema=features, interactions=interactions))
    loader = torch.utils.data.DataLoader(SasRecTrainingDataset(sequences, max_sequence_length=10), batch_size=8)
    seed()
    model = SasRec(tokenizer.tensor_schema, block_count=2, head_count=1, hidden_size=16, max_seq_len=10)
    trainer = lightning.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, loader)
    return seen


# ------------------------------------------------------------------------------------------------- e3nn
def run_e3nn(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """An interatomic potential of e3nn's equivariant tensor products, in the shape such models train: energy from
    the atoms' positions, forces as its gradient taken inside ``training_step`` (``create_graph=True``), a loss on
    both; its ``Irreps`` attributes are a tuple subclass built from a string."""
    import lightning.pytorch as pl
    from e3nn import o3

    class Interaction(torch.nn.Module):
        def __init__(self, irreps_in: Any, irreps_sh: Any, irreps_out: Any) -> None:
            super().__init__()
            self.tp = o3.FullyConnectedTensorProduct(irreps_in, irreps_sh, irreps_out)
            self.self_interaction = o3.Linear(irreps_in, irreps_out)

        def forward(self, h: torch.Tensor, sh: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
            messages = self.tp(h[src], sh)
            summed = torch.zeros(h.shape[0], messages.shape[1], dtype=messages.dtype).index_add(0, dst, messages)
            return self.self_interaction(h) + summed

    class Potential(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.irreps_sh = o3.Irreps.spherical_harmonics(2)
            self.irreps_hidden = o3.Irreps("8x0e + 4x1o")
            self.embed = torch.nn.Embedding(3, 8)
            self.blocks = torch.nn.ModuleList(
                [
                    Interaction(o3.Irreps("8x0e"), self.irreps_sh, self.irreps_hidden),
                    Interaction(self.irreps_hidden, self.irreps_sh, self.irreps_hidden),
                ]
            )
            self.readout = o3.Linear(self.irreps_hidden, o3.Irreps("1x0e"))

        def energy(self, pos: torch.Tensor, species: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> Any:
            sh = o3.spherical_harmonics(self.irreps_sh, pos[dst] - pos[src], normalize=True)
            h = self.embed(species)
            for block in self.blocks:
                h = block(h, sh, src, dst)
            return self.readout(h).sum()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            pos, species = batch["pos"][0], batch["species"][0]
            n = pos.shape[0]
            src, dst = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            keep = src != dst
            pos = pos.clone().requires_grad_(True)
            energy = self.energy(pos, species, src[keep], dst[keep])
            forces = -torch.autograd.grad(energy, pos, create_graph=True)[0]
            loss = (energy - batch["energy"][0]) ** 2 + ((forces - batch["forces"][0]) ** 2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    seen = Seen(stop_at=steps if plan else 0)
    steps = plan or steps
    g = torch.Generator().manual_seed(0)
    frames = [
        {
            "pos": torch.randn(5, 3, generator=g),
            "species": torch.randint(0, 3, (5,), generator=g),
            "energy": torch.randn((), generator=g),
            "forces": torch.randn(5, 3, generator=g),
        }
        for _ in range(16)
    ]
    seed()
    model = Potential()
    trainer = pl.Trainer(
        **{**QUIET, "logger": False, "enable_checkpointing": False, "max_steps": steps, **flags},
        callbacks=[*callbacks, watch("lightning.pytorch", seen)],
    )
    trainer.fit(model, torch.utils.data.DataLoader(frames, batch_size=1))
    return seen


# ------------------------------------------------------------------------------------------------ deeptab
def run_deeptab(callbacks: list[Any], flags: dict[str, Any], steps: int, plan: int = 0) -> Seen:
    """deeptab's Mambular (Mamba blocks over tabular features) through its scikit-learn estimator, whose ``fit``
    builds the Trainer with its own early stopping and checkpointing and passes ``**trainer_kwargs`` on."""
    import pandas as pd
    from deeptab.configs import MambularConfig
    from deeptab.models import MambularRegressor

    seen = Seen(stop_at=steps if plan else 0)
    rng = np.random.default_rng(0)
    rows = 40 * steps  # 80% for training in batches of 32: `steps` steps an epoch
    frame = pd.DataFrame(
        {"a": rng.normal(size=rows), "b": rng.normal(size=rows), "c": rng.integers(0, 4, rows).astype(str)}
    )
    target = (frame["a"] * 2 - frame["b"] + (frame["c"] == "1")).to_numpy(dtype=np.float32)
    seed()
    model = MambularRegressor(model_config=MambularConfig(d_model=16, n_layers=2))
    with tempfile.TemporaryDirectory() as folder:
        model.fit(
            frame,
            target,
            max_epochs=1 if not plan else plan,
            batch_size=32,
            random_state=0,
            checkpoint_path=folder,
            **{**QUIET, "logger": False, **({"max_steps": plan} if plan else {}), **flags},
            callbacks=[*callbacks, watch("lightning.pytorch", seen)],
        )
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
    Library(
        "darts-rnn",
        "darts",
        "pytorch_lightning",
        True,
        run_darts_rnn,
        'RNNModel(..., pl_trainer_kwargs={"callbacks": ...})',
    ),
    Library(
        "gluonts-deepar",
        "gluonts.torch",
        "lightning.pytorch",
        True,
        run_gluonts_deepar,
        'DeepAREstimator(..., trainer_kwargs={"callbacks": ...})',
    ),
    Library("transformers", "transformers", "lightning.pytorch", False, run_transformers, "Trainer(callbacks=...)"),
    Library("chemprop", "chemprop", "lightning.pytorch", False, run_chemprop, "pl.Trainer(callbacks=...)"),
    Library(
        "pykeen",
        "pykeen.contrib.lightning",
        "pytorch_lightning",
        True,
        run_pykeen,
        'lit_pipeline(..., trainer_kwargs={"callbacks": ...})',
    ),
    Library(
        "replay",
        "replay.models.nn.sequential",
        "lightning.pytorch",
        False,
        run_replay,
        "lightning.Trainer(callbacks=...)",
    ),
    Library("e3nn", "e3nn", "lightning.pytorch", False, run_e3nn, "Trainer(callbacks=...)"),
    Library(
        "deeptab",
        "deeptab",
        "lightning.pytorch",
        True,
        run_deeptab,
        "MambularRegressor().fit(X, y, callbacks=[...], **trainer_kwargs)",
    ),
]
