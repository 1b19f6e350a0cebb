"""Two held-out-style time-to-accuracy tasks for ``bench --target`` (issue 28), written as users write
them: a config that sets only ``model:`` and ``data:`` (no ``max_epochs``: Lightning's default length),
a constant learning rate a user would pick for the optimizer, real data (Fashion-MNIST, the Debian
package ``dataset-fashion-mnist``; the validation split is the official 10,000-image test split).

* :class:`SmallVGG` (``benchmarks/tta_vgg.yaml``): an image classifier, two conv-conv-pool stages
  (16 and 32 channels) without BatchNorm, dropout, SGD with momentum 0.9 at lr 0.01 (the classic tutorial choice); its
  target is ``val_acc``.
* :class:`DenseAutoencoder` (``benchmarks/tta_autoencoder.yaml``): a reconstruction model, 784-1024
  -256-32-256-1024-784 with ReLU, Adam at lr 1e-3; its target is ``val_loss`` (mean squared error, lower is better).

``benchmarks/time_to_target.py`` measures both: bench as a user runs it, then ``fit`` to the target
for the baseline and bench's pick, alternating, several seeds.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn


class Classifier(pl.LightningModule):
    """The steps of a Fashion-MNIST classifier: cross-entropy, ``val_loss`` and ``val_acc`` logged each
    validation (``SmallVGG`` here, and the tasks of ``benchmarks/tta37_tasks.py``)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())


class SmallVGG(Classifier):
    """conv-conv-pool-conv-conv-pool-fc-fc10 with ReLU and dropout, SGD (momentum 0.9).

    Args:
        lr: SGD's learning rate (constant unless a schedule is added).
        widths: channels of the two stages.
        hidden: width of the hidden fully connected layer.
        dropout: before the classifier.
    """

    def __init__(
        self, lr: float = 0.01, widths: tuple[int, int] = (16, 32), hidden: int = 128, dropout: float = 0.25
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        a, b = widths
        self.features = nn.Sequential(
            nn.Conv2d(1, a, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(a, a, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(a, b, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(b, b, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(b * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, 10)
        )
        self.example_input_array = torch.zeros(2, 1, 28, 28)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class DenseAutoencoder(pl.LightningModule):
    """784-hidden...-code-...hidden-784 with ReLU, trained to reconstruct the (normalised) image with Adam.

    Args:
        lr: Adam's learning rate (constant unless a schedule is added).
        hidden: widths of the encoder's hidden layers (the decoder mirrors them).
        code: size of the bottleneck.
    """

    def __init__(self, lr: float = 1e-3, hidden: tuple[int, ...] = (1024, 256), code: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        sizes = [784, *hidden, code]
        enc: list[nn.Module] = [nn.Flatten()]
        dec: list[nn.Module] = []
        for i, (m, n) in enumerate(zip(sizes, sizes[1:])):
            enc += [nn.Linear(m, n)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
            dec = [nn.ReLU(), nn.Linear(n, m)] + dec
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)
        self.example_input_array = torch.zeros(2, 1, 28, 28)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x)).view_as(x)

    def training_step(self, batch, batch_idx):
        x, _ = batch
        loss = nn.functional.mse_loss(self(x), x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, _ = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), x))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class FitClock(pl.Callback):
    """Writes how long ``fit`` took (wall seconds, from the start of fit to its end, validation and any
    range test included), the optimizer steps and epochs it ran and the last value of ``monitor`` to a
    JSON file: the independent clock of ``benchmarks/time_to_target.py``.

    Args:
        path: the JSON file to write.
        monitor: the metric to report.
    """

    def __init__(self, path: str, monitor: str = "val_acc") -> None:
        self.path = path
        self.monitor = monitor
        self._t0 = 0.0

    def on_fit_start(self, trainer, pl_module) -> None:
        import time

        self._t0 = time.perf_counter()

    def on_fit_end(self, trainer, pl_module) -> None:
        import json
        import time

        value = trainer.callback_metrics.get(self.monitor)
        with open(self.path, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "fit_s": time.perf_counter() - self._t0,
                    "steps": int(trainer.global_step),
                    "epochs": int(trainer.current_epoch),
                    "value": None if value is None else float(value),
                },
                fh,
            )
