"""T19: where the training data lives and how fast a sample of it reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.storage import StorageReport, find_data_root, storage_report
from lightning_speedups.trainer.attributes import set_at_init


class StorageCheck(SpeedupCallback):
    """Report where the training data lives and how fast a sample of it reads (tip T19).

    Card: tip T19 ``fast-storage``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** When training starts, finds the data root (``root`` or the dataset's /
      DataModule's ``root`` / ``data_dir`` / file-list attributes), reports network, FUSE and
      rotational storage and a measured read rate of ``sample_files`` files (see
      :func:`~lightning_speedups.functional.storage.storage_report`), on local rank 0.
    * **Caveats.** Reads up to ``max_bytes`` once at the start.

    Args:
        root: the data directory; ``None`` finds it from the DataModule or the train dataset.
        sample_files: how many files to time.
        max_bytes: the most bytes to read.
        clock: the seconds counter the read rate is timed with (``time.perf_counter``; tests pass a fake).

    Examples:
        >>> check = StorageCheck(root="/tmp", sample_files=4)
    """

    tip = "T19"
    part = "fast_storage"

    def __init__(
        self,
        root: str | None = None,
        sample_files: int = 32,
        max_bytes: int = 64 * 2**20,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        if isinstance(sample_files, bool) or not isinstance(sample_files, int) or sample_files < 1:
            raise SettingError(f"`sample_files` must be an int >= 1, got {sample_files!r}.")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise SettingError(f"`max_bytes` must be an int >= 1, got {max_bytes!r}.")
        self.root = root
        self.sample_files = sample_files
        self.max_bytes = max_bytes
        self.clock = clock
        self.result: Optional[StorageReport] = None

    def _find_root(self, trainer: Trainer) -> Any:
        if self.root is not None:
            return self.root
        found = find_data_root(set_at_init(trainer).datamodule)
        if found is not None:
            return found
        loaders = trainer.train_dataloader
        flat = getattr(loaders, "flattened", None)
        if flat is None:
            flat = [loaders]
        for dl in flat:
            found = find_data_root(getattr(dl, "dataset", None))
            if found is not None:
                return found
        return None

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.local_rank != 0:
            return
        root = self._find_root(trainer)
        if root is None:
            self.report(
                False,
                "no data root found (in-memory data, or pass StorageCheck(root=...))",
            )
            return
        try:
            self.result = storage_report(
                root, sample_files=self.sample_files, max_bytes=self.max_bytes, clock=self.clock
            )
        except (OSError, ValueError) as ex:
            self.report(False, f"could not inspect {root}: {ex}")
            return
        self.report(True, self.result.summary(), echo=True)
        for p in self.result.problems:
            rank_zero_warn(f"StorageCheck: {p}.", category=PossibleUserWarning)
