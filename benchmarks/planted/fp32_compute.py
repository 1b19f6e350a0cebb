"""Planted: compute-bound fp32 (wide layers, data in memory) where the hardware may have a faster precision."""

import torch
from common import Classifier, trainer
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    data = TensorDataset(torch.randn(4096, 1024), torch.randint(0, 10, (4096,)))
    trainer(max_steps=30).fit(Classifier(width=2048, depth=3, inputs=1024), DataLoader(data, batch_size=256))
