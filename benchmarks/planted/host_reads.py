"""Planted: a step bound by host reads (a per-step .item() and a tensor `if`); they stall a GPU, not a CPU."""

import torch
from common import Classifier, trainer
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    trainer().fit(Classifier(width=1024, inputs=256, read_every_step=True), DataLoader(data, batch_size=128))
