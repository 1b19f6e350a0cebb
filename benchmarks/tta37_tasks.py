"""Two more held-out-style time-to-accuracy tasks (issue 37, item 5), of kinds the search was never tuned on,
written as users write them: a config with only ``model:`` and ``data:`` (no plan: Lightning's default
length), a constant learning rate a user picks, real data (Fashion-MNIST, the Debian package
``dataset-fashion-mnist``; validation is the official 10,000-image test split, once an epoch).

* :class:`RowGRU` (``benchmarks/tta_gru.yaml``): a recurrent classifier that reads an image row by row (28
  steps of 28 pixels) with a one-layer GRU and classifies its last hidden state, Adam at lr 1e-3. A GRU has
  no bf16 kernel on a CPU without AVX-512 bf16: the precision lever is not there on such hardware.
* :class:`LeNet` (``benchmarks/tta_lenet.yaml``): LeNet-5 as tutorials write it (conv5-pool-conv5-pool,
  120-84-10, ReLU), SGD with momentum 0.9 at lr 0.01, no BatchNorm.

Both are measured by ``benchmarks/time_to_target.py``: bench as a user runs it, then ``fit`` to the target for
the baseline and bench's pick, alternating, several seeds.
"""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.tta_tasks import Classifier


class RowGRU(Classifier):
    """Rows of the image as a sequence into a GRU; a linear classifier on the last hidden state; Adam.

    Args:
        lr: Adam's learning rate (constant unless a schedule is added).
        hidden: the GRU's hidden size.
    """

    def __init__(self, lr: float = 1e-3, hidden: int = 128) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.rnn = nn.GRU(28, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 10)
        self.example_input_array = torch.zeros(2, 1, 28, 28)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x.reshape(x.shape[0], 28, 28))  # one 28-pixel row per time step
        return self.head(h[-1])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class LeNet(Classifier):
    """LeNet-5 with ReLU and max pooling, SGD (momentum 0.9).

    Args:
        lr: SGD's learning rate (constant unless a schedule is added).
    """

    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, 10),
        )
        self.example_input_array = torch.zeros(2, 1, 28, 28)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
