"""Planted: an input-bound loader (heavy per-sample work in __getitem__, no workers)."""

import torch
from common import Classifier, trainer
from torch.utils.data import DataLoader, Dataset


class Decoded(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.randn(64)
        for _ in range(300):  # stands for decoding and augmenting one sample on the host
            x = torch.tanh(x * 1.01)
        return x, torch.tensor(i % 10)


if __name__ == "__main__":
    trainer().fit(Classifier(), DataLoader(Decoded(), batch_size=32))
