"""Data-loading parts: loader settings, zero-copy collate, on-device normalisation, a tuned DataModule."""

from lightning_speedups.data.collate import (
    as_tensor_no_copy,
    zero_copy_collate,
    zero_copy_convert,
)
from lightning_speedups.data.datamodule import SpeedDataModule
from lightning_speedups.data.fashion_mnist import FashionMNISTDataModule, find_fashion_mnist, read_idx
from lightning_speedups.data.loaders import (
    LoaderSettings,
    rebuild_dataloader,
    resolve_loader_settings,
)
from lightning_speedups.data.normalize import (
    DeviceNormalizer,
    input_stats,
    normalize_uint8,
)

__all__ = [
    "FashionMNISTDataModule",
    "find_fashion_mnist",
    "read_idx",
    "DeviceNormalizer",
    "LoaderSettings",
    "SpeedDataModule",
    "as_tensor_no_copy",
    "input_stats",
    "normalize_uint8",
    "rebuild_dataloader",
    "resolve_loader_settings",
    "zero_copy_collate",
    "zero_copy_convert",
]
