"""Reference transformer workload for ``bench``: a small character-level GPT-style language model
trained on Python's own documentation.

Text: ``pydoc_data.topics`` of the Python standard library, the documentation pages that
``help("topic")`` shows (79 topics, about 465,000 characters of English prose and code examples,
shipped with every CPython). Characters are mapped to ids below 128 (the text has about 100
distinct ones); every sample is a window of ``seq + 1`` characters (inputs and next-character
targets), cut from a numpy array in ``__getitem__`` and returned with ``torch.from_numpy``.

Model: token and learned position embeddings, ``layers`` pre-norm ``nn.TransformerEncoderLayer``
blocks with a causal mask (d=128, 4 heads, feed-forward 512, dropout 0.1), a final LayerNorm and a
linear head over the vocabulary; AdamW. Small enough that framework overhead and the cost of casts
matter, which is why the tips that help big models (bf16, ``torch.compile``) can hurt it.

Used by ``benchmarks/transformer.yaml``::

    python -m lightning_speedups bench --config benchmarks/transformer.yaml --threads 1
"""

from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB = 128


def load_python_docs() -> np.ndarray:
    """Python's ``help()`` topics as one int64 array of character ids (< ``VOCAB``)."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    chars = sorted(set(text))
    if len(chars) > VOCAB - 1:  # keep the most frequent characters, map the rest to 0
        from collections import Counter

        chars = [c for c, _ in Counter(text).most_common(VOCAB - 1)]
    index = {c: i + 1 for i, c in enumerate(chars)}
    return np.fromiter((index.get(c, 0) for c in text), dtype=np.int64, count=len(text))


class CharWindows(Dataset):
    """Non-overlapping windows of ``seq + 1`` characters."""

    def __init__(self, ids: np.ndarray, seq: int) -> None:
        self.ids = ids
        self.seq = seq

    def __len__(self) -> int:
        return (len(self.ids) - 1) // (self.seq + 1)

    def __getitem__(self, index: int) -> torch.Tensor:
        start = index * (self.seq + 1)
        return torch.from_numpy(self.ids[start : start + self.seq + 1])


class PythonDocsDataModule(pl.LightningDataModule):
    """Python's documentation as character windows, 95% train / 5% validation.

    Args:
        batch_size: windows per batch.
        seq: characters per window (inputs; targets are shifted by one).
        num_workers: loader workers.
    """

    def __init__(self, batch_size: int = 32, seq: int = 128, num_workers: int = 0) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.seq = seq
        self.num_workers = num_workers
        self._train: Optional[Dataset] = None
        self._val: Optional[Dataset] = None

    def setup(self, stage: Optional[str] = None) -> None:
        if self._train is not None:
            return
        ids = load_python_docs()
        cut = int(len(ids) * 0.95)
        self._train = CharWindows(ids[:cut], self.seq)
        self._val = CharWindows(ids[cut:], self.seq)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self._train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers, drop_last=True
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._val, batch_size=self.batch_size, num_workers=self.num_workers)


class CharGPT(pl.LightningModule):
    """A small causal transformer language model over characters.

    Args:
        d_model: width. heads: attention heads. ff: feed-forward width. layers: blocks.
        seq: longest input. dropout: dropout in the blocks. lr: AdamW learning rate.
    """

    def __init__(
        self,
        d_model: int = 128,
        heads: int = 4,
        ff: int = 512,
        layers: int = 4,
        seq: int = 128,
        dropout: float = 0.1,
        lr: float = 1e-3,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(seq, d_model)
        block = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.size(1)
        positions = torch.arange(n, device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))

    def _loss(self, batch: torch.Tensor) -> torch.Tensor:
        logits = self(batch[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
