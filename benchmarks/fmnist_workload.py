"""Reference time-to-accuracy workload: a small ResNet on Fashion-MNIST (real data, 60,000 + 10,000 images).

Data: :class:`lightning_speedups.data.fashion_mnist.FashionMNISTDataModule` (the Debian package
``dataset-fashion-mnist``; its validation split is the official test split, so ``val_acc`` is test
accuracy). Model: written the way many users write one: every convolution keeps its bias although a
BatchNorm follows (T16), NCHW (T24), and a common constant-learning-rate optimizer (Adam, lr 1e-3).
Stem 1->w0, three stages of ``blocks`` basic blocks (stride 2 between stages), global average
pooling, a linear classifier. ``lr`` is the attribute Lightning's LR finder reads.

Used by ``benchmarks/fmnist.yaml``::

    python -m lightning_speedups bench --config benchmarks/fmnist.yaml --target val_acc=0.88 --threads 1
"""

from __future__ import annotations

import torch

from benchmarks.cnn_workload import ResNetDigits


class ResNetFashion(ResNetDigits):
    """The digits ResNet (same stem, blocks and head) for 28x28 grey images, trained with Adam at a constant
    learning rate.

    Args:
        widths: channels of the three stages.
        blocks: basic blocks per stage.
        lr: Adam's learning rate (constant unless a schedule is added).
    """

    def __init__(self, widths: tuple[int, int, int] = (8, 16, 32), blocks: int = 1, lr: float = 1e-3) -> None:
        super().__init__(widths=widths, blocks=blocks, lr=lr)
        self.lr = lr

    def test_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)
