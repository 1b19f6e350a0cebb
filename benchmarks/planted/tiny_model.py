"""Planted: a tiny model whose step is mostly per-op overhead (launches, Python, hooks), not arithmetic."""

import torch
from common import Classifier, trainer
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(8192, 8), torch.randint(0, 10, (8192,)))
    trainer().fit(Classifier(width=8, depth=6, inputs=8), DataLoader(data, batch_size=8))
