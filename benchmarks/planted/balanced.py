"""Planted: nothing (data in memory, a moderate model in a plain loop): the verdict must invent no cause."""

import torch
from common import Classifier, trainer
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    trainer().fit(Classifier(width=1024, inputs=256), DataLoader(data, batch_size=128))
