"""A LightningDataModule with tuned loader settings built in (tips T02, T03, T13).

Card:

* **What it does.** :class:`SpeedDataModule` builds its DataLoaders from datasets you give it,
  with ``num_workers`` / ``pin_memory`` / ``persistent_workers`` / ``prefetch_factor`` resolved
  for the machine and the Trainer it runs under (the same rules as
  :class:`~lightning_speedups.callbacks.loader_tuning.LoaderTuning`), logging each choice once.
  :meth:`SpeedDataModule.wrap` wraps one existing dataset, optionally splitting off a validation
  part with a seeded split.
* **Seed tips.** ``num_workers`` 4 x GPUs, ``pin_memory=True``, no-copy conversion of numpy data.
* **Expected gain.** As for the tuned loaders; nothing to write by hand.
* **When it hurts.** As for the tuned loaders: workers compete with a CPU training step.

Examples:
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> dm = SpeedDataModule.wrap(TensorDataset(torch.randn(10, 3)), val_fraction=0.2, batch_size=4)
    >>> dm.setup("fit")
    >>> len(dm.train_dataset), len(dm.val_dataset)
    (8, 2)
    >>> dm.train_dataloader().num_workers
    0
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any, Literal, cast

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader, Dataset, IterableDataset, random_split

from lightning_speedups.data.loaders import (
    LoaderSettings,
    machine_from_trainer,
    resolve_loader_settings,
)
from lightning_speedups.errors import SettingError

__all__ = ["SpeedDataModule"]


class SpeedDataModule(LightningDataModule):
    """DataModule whose loaders carry tuned settings for the machine they run on.

    Args:
        train_dataset: the training data (may be ``None`` for evaluation-only use).
        val_dataset: validation data, or ``None``.
        test_dataset: test data, or ``None``.
        predict_dataset: prediction data, or ``None``.
        batch_size: training batch size.
        eval_batch_size: batch size of the other loaders (default: ``batch_size``).
        shuffle: shuffle the training data.
        drop_last: drop the last incomplete training batch.
        collate_fn: the collate function, e.g.
            :func:`~lightning_speedups.data.collate.zero_copy_collate` for numpy samples.
        num_workers: ``"auto"`` or a number.
        pin_memory: ``"auto"`` (only for CUDA), ``True`` or ``False``.
        persistent_workers: ``"auto"`` (whenever there are workers), ``True`` or ``False``.
        prefetch_factor: batches per worker loaded ahead, or ``None`` for PyTorch's default.
        seed: seeds the shuffling generator (``None``: the global RNG, as DataLoader does).
        worker_init_fn: passed to every loader.

    Examples:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> dm = SpeedDataModule(TensorDataset(torch.randn(8, 2)), batch_size=4)
        >>> dm.train_dataloader().batch_size
        4
    """

    def __init__(
        self,
        train_dataset: Dataset | None = None,
        val_dataset: Dataset | None = None,
        test_dataset: Dataset | None = None,
        predict_dataset: Dataset | None = None,
        *,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int | Literal["auto"] = "auto",
        pin_memory: bool | Literal["auto"] = "auto",
        persistent_workers: bool | Literal["auto"] = "auto",
        prefetch_factor: int | None = None,
        seed: int | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("batch_size", batch_size),
            ("eval_batch_size", eval_batch_size),
        ):
            if value is None and name == "eval_batch_size":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingError(f"`{name}` must be an int >= 1, got {value!r}.")
        if num_workers is None or pin_memory is None or persistent_workers is None:
            raise SettingError(
                "SpeedDataModule needs a value or 'auto' for num_workers, pin_memory and persistent_workers"
                " (None means 'keep the loader's' and only applies to LoaderTuning)."
            )
        self.settings = LoaderSettings(num_workers, pin_memory, persistent_workers, prefetch_factor)
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.test_dataset = test_dataset
        self.predict_dataset = predict_dataset
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.seed = seed
        self.worker_init_fn = worker_init_fn
        self._source: Dataset | None = None
        self._val_fraction = 0.0
        self._split_seed = 0
        self.choices: dict[str, str] = {}

    @classmethod
    def wrap(
        cls,
        dataset: Dataset,
        *,
        val_fraction: float = 0.0,
        split_seed: int = 0,
        **kwargs: Any,
    ) -> SpeedDataModule:
        """A SpeedDataModule over one existing dataset, with an optional seeded validation split.

        Args:
            dataset: any map-style dataset (or an IterableDataset with ``val_fraction=0``).
            val_fraction: share of the samples held out for validation (0 <= f < 1).
            split_seed: seed of the split, so it is the same on every run and every rank.
            **kwargs: the other :class:`SpeedDataModule` arguments.
        """
        if not 0.0 <= val_fraction < 1.0:
            raise SettingError(f"`val_fraction` must be in [0, 1), got {val_fraction!r}.")
        if val_fraction and isinstance(dataset, IterableDataset):
            raise SettingError("`val_fraction` needs a map-style dataset; an IterableDataset cannot be split.")
        dm = cls(**kwargs)
        dm._source = dataset
        dm._val_fraction = float(val_fraction)
        dm._split_seed = split_seed
        if not val_fraction:
            dm.train_dataset = dataset
        return dm

    def setup(self, stage: str) -> None:
        if self._source is not None and self._val_fraction and self.train_dataset is None:
            # a map-style dataset (wrap() refuses an IterableDataset with a split): random_split needs its
            # length too, which torch's Dataset does not declare
            n = len(cast(Sized, self._source))
            n_val = max(1, round(n * self._val_fraction))
            gen = torch.Generator().manual_seed(self._split_seed)
            self.train_dataset, self.val_dataset = random_split(self._source, [n - n_val, n_val], generator=gen)

    def _loader(self, dataset: Dataset | None, stage: str) -> DataLoader:
        if dataset is None:
            raise SettingError(f"SpeedDataModule has no {stage} dataset; pass `{stage}_dataset=`.")
        train = stage == "train"
        iterable = isinstance(dataset, IterableDataset)
        gen = None
        if train and self.shuffle and not iterable and self.seed is not None:
            gen = torch.Generator().manual_seed(self.seed)
        base = DataLoader(
            dataset,
            batch_size=self.batch_size if train else self.eval_batch_size,
            shuffle=bool(train and self.shuffle and not iterable),
            drop_last=bool(train and self.drop_last),
            collate_fn=self.collate_fn,
            worker_init_fn=self.worker_init_fn,
            generator=gen,
        )
        resolved = resolve_loader_settings(self.settings, base, **machine_from_trainer(self.trainer))
        if stage not in self.choices:
            self.choices[stage] = f"{resolved.summary()} [{'; '.join(resolved.reasons)}]"
            rank_zero_info(f"SpeedDataModule {stage}: {self.choices[stage]}")
            for w in resolved.warnings:
                rank_zero_warn(f"SpeedDataModule ({stage}): {w}", category=PossibleUserWarning)
        return DataLoader(
            dataset,
            batch_size=base.batch_size,
            shuffle=bool(train and self.shuffle and not iterable),
            drop_last=base.drop_last,
            collate_fn=self.collate_fn,
            worker_init_fn=self.worker_init_fn,
            generator=gen,
            **resolved.kwargs,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_dataset, "train")

    def val_dataloader(self) -> Any:
        # no dataset: an empty list, which Lightning reads as "no val batches"
        return [] if self.val_dataset is None else self._loader(self.val_dataset, "val")

    def test_dataloader(self) -> Any:
        # no dataset: an empty list, which Lightning reads as "no test batches"
        return [] if self.test_dataset is None else self._loader(self.test_dataset, "test")

    def predict_dataloader(self) -> Any:
        # no dataset: an empty list, which Lightning reads as "no predict batches"
        return [] if self.predict_dataset is None else self._loader(self.predict_dataset, "predict")
