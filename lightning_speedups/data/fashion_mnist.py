"""Fashion-MNIST (Zalando, 60,000 training + 10,000 test images of clothes, 28x28 grey) as a DataModule.

Real data for real benchmarks, read from the IDX files where the Debian / Ubuntu package
``dataset-fashion-mnist`` puts them (``/usr/share/datasets/fashion-mnist``), or from any folder that
holds the four files (gzipped or not)::

    sudo apt-get install dataset-fashion-mnist          # Debian / Ubuntu
    # elsewhere: the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist in a folder,
    # then FashionMNISTDataModule(root="that/folder") or FASHION_MNIST_DIR=that/folder

The validation loader is the official **test** split (10,000 images), so ``val_acc`` logged by a model
is test accuracy; ``test_dataloader`` is the same split. Images are normalised once (mean 0.2860,
std 0.3530 of the training set) and kept as one float tensor, so the loader does no per-sample work.

Example::

    dm = FashionMNISTDataModule(batch_size=128)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))      # x: 128 x 1 x 28 x 28 float32, y: 128 int64
"""

from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Any, Optional, Union

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.errors import MissingFileError, SettingError

__all__ = ["DEFAULT_ROOT", "FILES", "FashionMNISTDataModule", "find_fashion_mnist", "read_idx"]

#: where ``apt-get install dataset-fashion-mnist`` puts the IDX files
DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
#: split -> (images file, labels file), without the optional ``.gz``
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MEAN, STD = 0.2860, 0.3530
INSTALL = (
    "install it with `sudo apt-get install dataset-fashion-mnist` (Debian / Ubuntu: the files land in "
    f"{DEFAULT_ROOT}), or put the four IDX files of https://github.com/zalandoresearch/fashion-mnist "
    "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, "
    "t10k-labels-idx1-ubyte.gz) in a folder and pass it as `root` (data.init_args.root) or set FASHION_MNIST_DIR"
)
_DTYPES: dict[int, Any] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """Read one IDX file (``.gz`` or plain): the array with the shape its header declares.

    Raises:
        ValueError: not an IDX file (bad magic number, unknown type code, or a size that does not match).
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise SettingError(f"{path} is not an IDX file (magic {data[:4]!r})")
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[data[2]])
    body = data[4 + 4 * ndim :]
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(body) != expected:
        raise SettingError(f"{path}: the header declares {dims} ({expected} bytes) but {len(body)} bytes follow")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def _file(root: Path, name: str) -> Optional[Path]:
    for candidate in (root / (name + ".gz"), root / name):
        if candidate.is_file():
            return candidate
    return None


def find_fashion_mnist(root: Union[str, Path, None] = None) -> Path:
    """The folder that holds the four IDX files: ``root``, else ``$FASHION_MNIST_DIR``, else :data:`DEFAULT_ROOT`.

    Raises:
        FileNotFoundError: the files are not there, with how to install them.
    """
    folder = Path(root or os.environ.get("FASHION_MNIST_DIR") or DEFAULT_ROOT)
    missing = [n for pair in FILES.values() for n in pair if _file(folder, n) is None]
    if missing:
        raise MissingFileError(f"Fashion-MNIST not found in {folder} (missing {', '.join(missing)}): {INSTALL}.")
    return folder


def load_split(root: Union[str, Path], split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images N x 1 x 28 x 28 float32 normalised, labels N int64)`` of ``"train"`` or ``"test"``."""
    folder = Path(root)
    images_name, labels_name = FILES[split]
    images = read_idx(_file(folder, images_name) or folder / images_name)
    labels = read_idx(_file(folder, labels_name) or folder / labels_name)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise SettingError(f"{folder}: {split} images {images.shape} and labels {labels.shape} do not match")
    x = torch.from_numpy(images.astype(np.float32)).div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    return x.contiguous(), torch.from_numpy(labels.astype(np.int64))


class FashionMNISTDataModule(pl.LightningDataModule):
    """Fashion-MNIST: the 60,000 training images, and the 10,000 test images as the validation split.

    Args:
        root: folder with the IDX files (default: ``$FASHION_MNIST_DIR``, else :data:`DEFAULT_ROOT`).
        batch_size: training batch (``speedups.largest_batch`` may change it).
        eval_batch_size: validation / test batch.
        num_workers: loader workers (``speedups.loaders`` may change it); the data is in memory.
        train_subset: train on the first N training images only (``None``: all 60,000).
        val_subset: validate on the first N test images only (``None``: all 10,000).

    Raises:
        FileNotFoundError: in ``setup`` when the files are absent, saying how to install them.
    """

    def __init__(
        self,
        root: Optional[str] = None,
        batch_size: int = 128,
        eval_batch_size: int = 1000,
        num_workers: int = 0,
        train_subset: Optional[int] = None,
        val_subset: Optional[int] = None,
    ) -> None:
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise SettingError(
                f"`batch_size` and `eval_batch_size` must be positive; got {batch_size}, {eval_batch_size}."
            )
        self.root = root
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.train_subset = train_subset
        self.val_subset = val_subset
        self._train: Optional[TensorDataset] = None
        self._test: Optional[TensorDataset] = None

    def setup(self, stage: Optional[str] = None) -> None:
        if self._train is not None:
            return
        folder = find_fashion_mnist(self.root)
        x, y = load_split(folder, "train")
        xt, yt = load_split(folder, "test")
        if self.train_subset is not None:
            x, y = x[: self.train_subset], y[: self.train_subset]
        if self.val_subset is not None:
            xt, yt = xt[: self.val_subset], yt[: self.val_subset]
        self._train = TensorDataset(x, y)
        self._test = TensorDataset(xt, yt)

    def train_dataloader(self) -> DataLoader:
        assert self._train is not None  # None only before setup(), which Lightning runs first
        return DataLoader(
            self._train,
            batch_size=self.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=self.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        assert self._test is not None  # None only before setup(), which Lightning runs first
        return DataLoader(self._test, batch_size=self.eval_batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
