"""Data-pipeline callbacks: tuned loaders, data-wait monitor, input checks, on-device normalisation.

Parts (tips):

* :class:`LoaderTuning` (T02, T03): applies ``num_workers`` / ``pin_memory`` /
  ``persistent_workers`` / ``prefetch_factor`` to the DataLoaders the user's LightningModule or
  DataModule returns (or that were passed to ``fit``), keeping everything else.
* :class:`DataWaitMonitor` (T02, T19): per step, the share of time spent waiting for the next batch.
* :class:`InputStatsCheck` (T18): warns when floating-point inputs are far from normalised.
* :class:`DeviceNormalize` (T18): uint8 images cross the bus; conversion and normalisation happen
  on the device.
* :class:`NonBlockingCheck` (T21): says when batches reach a CUDA device from unpinned memory, so
  Lightning's ``non_blocking`` copies cannot overlap compute.
* :class:`StorageCheck` (T19): where the training data lives and how fast it reads.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.data.loaders import (
    LoaderRebuildError,
    LoaderSettings,
    machine_from_trainer,
    rebuild_dataloader,
    resolve_loader_settings,
)
from lightning_speedups.data.normalize import (
    DeviceNormalizer,
    InputStats,
    input_stats,
    merge_stats,
    normalisation_problems,
)
from lightning_speedups.functional.loaders import (
    named_tensors,
    non_tensor_leaves,
    unpinned_tensors,
)
from lightning_speedups.functional.storage import find_data_root, storage_report

__all__ = [
    "DataWaitMonitor",
    "DeviceNormalize",
    "InputStatsCheck",
    "LoaderTuning",
    "NonBlockingCheck",
    "StorageCheck",
]

_STAGE_HOOKS = {
    "train": "train_dataloader",
    "val": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}


class _Patches:
    """Instance-attribute patches of hook methods, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, bool, Any]] = []

    def wrap(self, obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
        had = name in vars(obj)
        old = vars(obj).get(name)
        original = getattr(obj, name)
        wrapper = functools.wraps(original)(make(original))
        wrapper.__speedups_patch__ = True  # type: ignore[attr-defined]
        setattr(obj, name, wrapper)
        self._undo.append((obj, name, had, old))

    def is_patched(self, obj: Any, name: str) -> bool:
        return getattr(vars(obj).get(name), "__speedups_patch__", False)

    def undo(self) -> None:
        while self._undo:
            obj, name, had, old = self._undo.pop()
            if had:
                setattr(obj, name, old)
            else:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass


def _data_sources(trainer: Trainer) -> list[tuple[str, Any]]:
    """(stage, _DataLoaderSource) pairs of the trainer's loops, when this Lightning has them."""
    loops = [
        ("train", getattr(trainer, "fit_loop", None)),
        (
            "val",
            getattr(
                getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None),
                "val_loop",
                None,
            ),
        ),
        ("val", getattr(trainer, "validate_loop", None)),
        ("test", getattr(trainer, "test_loop", None)),
        ("predict", getattr(trainer, "predict_loop", None)),
    ]
    out = []
    for stage, loop in loops:
        source = getattr(loop, "_data_source", None)
        if source is not None and hasattr(source, "instance"):
            out.append((stage, source))
    return out


def _warn_once(
    seen: set[str], message: str, category: type[Warning] = PossibleUserWarning
) -> None:
    if message not in seen:
        seen.add(message)
        rank_zero_warn(message, category=category)


class LoaderTuning(SpeedupCallback):
    """Apply loader settings to the DataLoaders the user's code already returns (tips T02, T03, T21).

    Card:

    * **What it does.** At ``setup`` it wraps the ``*_dataloader`` hooks of the LightningModule and
      DataModule (and tunes loaders passed to ``fit`` directly). Each DataLoader they return is
      re-created with the resolved settings and everything else kept: dataset, sampler or batch
      sampler, ``collate_fn``, batch size, ``drop_last``, shuffling, ``worker_init_fn``, generator,
      custom DataLoader subclasses (as Lightning re-creates them to inject a distributed sampler,
      which it still does afterwards). ``teardown`` restores the hooks. Choices are logged once per
      stage, with the reason.
    * **Seed tips.** ``num_workers`` = 4 x GPUs (A#2, B#2), ``pin_memory=True`` (A#2, B#3),
      ``non_blocking`` copies from pinned memory only (B#7).
    * **Expected gain.** Up to 2x per epoch when a GPU waits for data (seed claim); on a CPU-only
      machine ``auto`` keeps 0 workers where workers would slow the step down.
    * **When it hurts.** More workers cost CPU memory (each holds a dataset copy after writes) and
      start-up time; persistent workers keep that memory for the whole run.

    Bad input is handled without stopping training: a dataset that cannot be pickled for
    ``spawn`` / ``forkserver`` workers falls back to 0 workers with a warning naming the reason;
    ``num_workers`` above the usable CPUs warns; ``pin_memory=True`` without CUDA is ignored with
    a warning; a loader that cannot be re-created is left as it was, with a warning; a collate
    function that returns non-tensors is named on the first batch.

    Args:
        num_workers: ``"auto"``, a number, or ``None`` to keep each loader's own.
        pin_memory: ``"auto"`` (only when batches go to CUDA), ``True``, ``False`` or ``None``.
        persistent_workers: ``"auto"`` (whenever there are workers), ``True``, ``False`` or ``None``.
        prefetch_factor: batches loaded ahead per worker, or ``None`` for PyTorch's default.
        stages: which loaders to tune, among ``"train"``, ``"val"``, ``"test"``, ``"predict"``.

    Example:
        >>> from lightning.pytorch import Trainer
        >>> trainer = Trainer(callbacks=[LoaderTuning(num_workers="auto")], logger=False)
    """

    tip = "T02"
    part = "loaders"

    def __init__(
        self,
        num_workers: int | Literal["auto"] | None = "auto",
        pin_memory: bool | Literal["auto"] | None = "auto",
        persistent_workers: bool | Literal["auto"] | None = "auto",
        prefetch_factor: int | None = None,
        stages: Sequence[str] = ("train", "val", "test", "predict"),
    ) -> None:
        super().__init__()
        self.settings = LoaderSettings(
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers,
            prefetch_factor=prefetch_factor,
        )
        if isinstance(stages, str):
            stages = (stages,)
        bad = [s for s in stages if s not in _STAGE_HOOKS]
        if bad:
            raise ValueError(f"`stages` may hold {sorted(_STAGE_HOOKS)}, got {bad}.")
        self.stages = tuple(stages)
        self.choices: dict[str, str] = {}
        self._patches = _Patches()
        self._direct: list[tuple[Any, Any]] = []
        self._machine: dict[str, Any] = {}
        self._said: set[str] = set()
        self._batch_checked = False
        self._short: dict[str, str] = {}
        self._changed_any = False

    # -- the tuning itself -------------------------------------------------------------------
    def tune(self, loader: Any, stage: str) -> Any:
        """Return ``loader`` re-created with the settings (or unchanged when not a DataLoader)."""
        if not isinstance(loader, DataLoader):
            return loader
        resolved = resolve_loader_settings(self.settings, loader, **self._machine)
        for w in resolved.warnings:
            _warn_once(
                self._said, f"LoaderTuning: {w}"
            )  # once per run, not once per loader
        changed = {
            k: v for k, v in resolved.kwargs.items() if getattr(loader, k, None) != v
        }
        text = resolved.summary()
        why = "; ".join(resolved.reasons)
        line = f"{stage}: {text}" + (f" [{why}]" if why else "")
        if changed:
            try:
                new = rebuild_dataloader(loader, **resolved.kwargs)
            except LoaderRebuildError as ex:
                _warn_once(
                    self._said,
                    f"LoaderTuning ({stage}): left `{type(loader).__name__}` as it was: {ex}",
                )
                line = f"{stage}: unchanged ({ex})"
                new = loader
        else:
            new = loader
        if stage not in self.choices:
            self.choices[stage] = line
            self._short[stage] = text if new is not loader else f"{text} (as they were)"
            self._changed_any = self._changed_any or new is not loader
            rank_zero_info(f"LoaderTuning: {line}")
            grouped: dict[str, list[str]] = {}
            for name, short in self._short.items():
                grouped.setdefault(short, []).append(name)
            self.report(self._changed_any, "; ".join(f"{'/'.join(names)}: {short}" for short, names in grouped.items()))
        return new

    def _tune_collection(self, data: Any, stage: str) -> Any:
        from lightning.pytorch.utilities import CombinedLoader
        from lightning_utilities.core.apply_func import apply_to_collection

        if isinstance(data, CombinedLoader):
            data.flattened = [self.tune(dl, stage) for dl in data.flattened]
            return data
        return apply_to_collection(data, DataLoader, self.tune, stage)

    # -- hooks ---------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._machine = machine_from_trainer(trainer)
        wrapped: set[tuple[int, str]] = set()
        for stage_name, source in _data_sources(trainer):
            if stage_name not in self.stages:
                continue
            inst = source.instance
            name = source.name
            if isinstance(inst, (LightningModule, LightningDataModule)):
                key = (id(inst), name)
                if (
                    key in wrapped
                    or self._patches.is_patched(inst, name)
                    or not is_overridden(name, inst)
                ):
                    continue
                wrapped.add(key)

                def make(orig: Callable, _stage: str = stage_name) -> Callable:
                    def hook(*args: Any, **kwargs: Any) -> Any:
                        return self._tune_collection(orig(*args, **kwargs), _stage)

                    return hook

                self._patches.wrap(inst, name, make)
            elif inst is not None:
                self._direct.append((source, inst))
                source.instance = self._tune_collection(inst, stage_name)
        if not self.choices:
            self.report(True, "loaders are tuned when Lightning requests them")

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._batch_checked:
            return
        self._batch_checked = True
        leaves = non_tensor_leaves(batch)
        if leaves:
            names = ", ".join(f"{n} is {t}" for n, t in leaves[:4])
            _warn_once(
                self._said,
                f"The train batch holds non-tensors ({names}): pin_memory and the device transfer skip them, and the"
                " model receives them as they are. Return tensors from the dataset or collate_fn, e.g."
                " `collate_fn=lightning_speedups.data.zero_copy_collate` for numpy samples.",
            )

    @override
    def teardown(
        self, trainer: Trainer, pl_module: LightningModule, stage: str
    ) -> None:
        self._patches.undo()
        for source, inst in reversed(self._direct):
            source.instance = inst
        self._direct.clear()
        self._batch_checked = False


class DataWaitMonitor(SpeedupCallback):
    """Measure how much of each training step waits for the next batch (tips T02, T19).

    Card:

    * **What it does.** Per step, the time from the end of the previous step (or the start of the
      epoch) to the start of this one — fetching the batch from the loader, moving it to the
      device — against the whole step (wait plus compute). Validation that runs in between is
      excluded. Logs ``speedups/data_wait_fraction`` per step, keeps the running figure in
      :attr:`data_wait_fraction`, and at the end of fit says whether the run was input-bound.
    * **Seed tips.** Spend as little time as possible on I/O; ``num_workers`` (A#2, B#2); fast
      storage (B#1).
    * **Expected gain.** None by itself: it says whether the loader tips can help at all.
    * **When it hurts.** Costs two clock reads per step. On CUDA the figure is host time: work the
      GPU still has queued overlaps the wait; ``sync_cuda=True`` makes it exact at the cost of a
      synchronisation per step.

    The wait also includes Lightning's per-step bookkeeping after ``on_train_batch_end``
    (logging, checkpoint callbacks that run later in the list), which is small next to a fetch.

    Args:
        log: log ``speedups/data_wait_fraction`` every step.
        warmup_steps: steps left out of the running figure (the first one pays one-off costs).
        input_bound_threshold: the running fraction above which the run counts as input-bound.
        sync_cuda: synchronise CUDA at the step boundaries for exact figures.
        prog_bar: also show the fraction in the progress bar.

    Example:
        >>> monitor = DataWaitMonitor(log=True)
        >>> monitor.data_wait_fraction is None
        True
    """

    tip = "T02"
    part = "data_wait"

    def __init__(
        self,
        log: bool = True,
        warmup_steps: int = 1,
        input_bound_threshold: float = 0.3,
        sync_cuda: bool = False,
        prog_bar: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(log, bool):
            raise TypeError(f"`log` must be True or False, got {log!r}.")
        if (
            isinstance(warmup_steps, bool)
            or not isinstance(warmup_steps, int)
            or warmup_steps < 0
        ):
            raise ValueError(
                f"`warmup_steps` must be an int >= 0, got {warmup_steps!r}."
            )
        if not 0.0 < float(input_bound_threshold) < 1.0:
            raise ValueError(
                f"`input_bound_threshold` must be between 0 and 1, got {input_bound_threshold!r}."
            )
        self.log = log
        self.warmup_steps = warmup_steps
        self.input_bound_threshold = float(input_bound_threshold)
        self.sync_cuda = sync_cuda
        self.prog_bar = prog_bar
        self.wait_seconds = 0.0
        self.step_seconds = 0.0
        self.steps = 0
        self.last_fraction: float | None = None
        self._seen = 0
        self._mark: float | None = None
        self._start: float | None = None
        self._wait: float = 0.0
        self._excluded = 0.0
        self._val_start: float | None = None
        self._cuda = False
        self._interval_wait = self._interval_step = 0.0

    @property
    def data_wait_fraction(self) -> float | None:
        """Share of step time spent waiting for data over the steps after warm-up (``None`` before)."""
        if self.step_seconds <= 0:
            return None
        return self.wait_seconds / self.step_seconds

    @property
    def input_bound(self) -> bool | None:
        """Whether :attr:`data_wait_fraction` is above ``input_bound_threshold``."""
        f = self.data_wait_fraction
        return None if f is None else f > self.input_bound_threshold

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._cuda = self.sync_cuda and pl_module.device.type == "cuda"
        self.wait_seconds = self.step_seconds = 0.0
        self._interval_wait = self._interval_step = 0.0
        self.steps = self._seen = 0
        self.last_fraction = None

    @override
    def on_train_epoch_start(
        self, trainer: Trainer, pl_module: LightningModule
    ) -> None:
        self._mark = self._now()
        self._excluded = 0.0

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = self._now()
        self._start = now
        self._wait = (
            max(0.0, now - self._mark - self._excluded)
            if self._mark is not None
            else 0.0
        )
        self._excluded = 0.0

    @override
    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = self._now()
        if self._start is None:
            return
        step = self._wait + (now - self._start)
        self._mark = now
        self._start = None
        self._seen += 1
        if step <= 0:
            return
        self.last_fraction = self._wait / step
        if self._seen > self.warmup_steps:
            self.wait_seconds += self._wait
            self.step_seconds += step
            self.steps += 1
        self._interval_wait += self._wait
        self._interval_step += step
        # self.log costs ~0.5 ms a call: log where Lightning writes logs (every log_every_n_steps), at
        # the end of each epoch, or every step for the progress bar, with the fraction since the last call.
        last = getattr(getattr(trainer.fit_loop.epoch_loop, "batch_progress", None), "is_last_batch", False)
        last = last or (trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps)
        if self.log and (self.prog_bar or last or self._seen % max(trainer.log_every_n_steps, 1) == 0):
            pl_module.log(
                "speedups/data_wait_fraction",
                self._interval_wait / self._interval_step,
                on_step=True,
                on_epoch=False,
                prog_bar=self.prog_bar,
                batch_size=1,
            )
            self._interval_wait = self._interval_step = 0.0

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._val_start = time.perf_counter()

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._val_start is not None:
            self._excluded += time.perf_counter() - self._val_start
            self._val_start = None

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        f = self.data_wait_fraction
        if f is None:
            self.report(False, "no steps measured")
            return
        verdict = (
            f"input-bound: {f:.0%} of step time waited for data over {self.steps} steps (threshold "
            f"{self.input_bound_threshold:.0%}); try LoaderTuning(num_workers='auto'), cheaper per-sample work,"
            " or faster storage"
            if f > self.input_bound_threshold
            else f"not input-bound: {f:.0%} of step time waited for data over {self.steps} steps"
        )
        self.report(True, verdict)
        if f > self.input_bound_threshold:
            rank_zero_warn(f"DataWaitMonitor: {verdict}.", category=PossibleUserWarning)
        else:
            rank_zero_info(f"DataWaitMonitor: {verdict}.")

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_seconds": self.wait_seconds,
            "step_seconds": self.step_seconds,
            "steps": self.steps,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_seconds = float(state_dict.get("wait_seconds", 0.0))
        self.step_seconds = float(state_dict.get("step_seconds", 0.0))
        self.steps = int(state_dict.get("steps", 0))


class InputStatsCheck(SpeedupCallback):
    """Warn when floating-point inputs are far from normalised (tip T18).

    Card:

    * **What it does.** Over the first ``batches`` training batches (as the model receives them,
      after the transfer and any :class:`DeviceNormalize`), pools mean, std, min and max of each
      floating-point tensor with at least ``min_dims`` dimensions, and warns once per tensor that
      looks like raw 0..255 pixels, has a mean far from 0 or a standard deviation far from 1,
      naming the tensor (``batch[0]``, ``batch['image']``) and its statistics.
    * **Seed tip.** Normalised inputs, batch norm in the model (A#17).
    * **Expected gain.** Faster, steadier convergence when it finds something; no speed cost after
      the first batches.
    * **When it hurts.** Inputs that are meant to be unnormalised (counts, coordinates) warn once.

    Args:
        batches: how many training batches to look at.
        mean_tol: the largest ``|mean|`` that counts as centred.
        std_range: the standard deviations that count as unit scale.
        min_dims: tensors with fewer dimensions (targets, scalars) are skipped.

    Example:
        >>> check = InputStatsCheck(batches=2)
        >>> check.problems
        {}
    """

    tip = "T18"
    part = "input_stats"

    def __init__(
        self,
        batches: int = 3,
        mean_tol: float = 1.0,
        std_range: tuple[float, float] = (0.2, 5.0),
        min_dims: int = 2,
    ) -> None:
        super().__init__()
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"`batches` must be an int >= 1, got {batches!r}.")
        if mean_tol <= 0:
            raise ValueError(f"`mean_tol` must be > 0, got {mean_tol!r}.")
        lo, hi = std_range
        if not 0 < lo < 1 < hi:
            raise ValueError(
                f"`std_range` must be (low, high) with 0 < low < 1 < high, got {std_range!r}."
            )
        self.batches = batches
        self.mean_tol = float(mean_tol)
        self.std_range = (float(lo), float(hi))
        self.min_dims = min_dims
        self.stats: dict[str, InputStats] = {}
        self.problems: dict[str, list[str]] = {}
        self._seen = 0
        self._done = False

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._done:
            return
        for name, t in named_tensors(batch):
            if t.is_floating_point() and t.ndim >= self.min_dims and t.numel() > 0:
                self.stats[name] = merge_stats(self.stats.get(name), input_stats(t))
        self._seen += 1
        if self._seen >= self.batches:
            self._judge()

    def _judge(self) -> None:
        if self._done:
            return
        self._done = True
        for name, s in self.stats.items():
            found = normalisation_problems(
                s, mean_tol=self.mean_tol, std_range=self.std_range
            )
            if found:
                self.problems[name] = found
                rank_zero_warn(
                    f"InputStatsCheck: input {name} looks unnormalised over {self._seen} batch(es): "
                    f"{'; '.join(found)} (mean {s.mean:.3g}, std {s.std:.3g}, min {s.min:.3g}, max {s.max:.3g})."
                    " Normalise it in the dataset or with lightning_speedups DeviceNormalize.",
                    category=PossibleUserWarning,
                )
        if not self.stats:
            self.report(False, "no floating-point inputs to check")
        elif self.problems:
            self.report(
                True,
                f"{len(self.problems)} of {len(self.stats)} inputs far from normalised",
            )
        else:
            self.report(
                True, f"{len(self.stats)} floating-point input(s) look normalised"
            )

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._judge()


def _batch_hook_owner(trainer: Trainer, pl_module: LightningModule, hook: str) -> Any:
    """The object whose batch hook Lightning calls: the DataModule when it overrides it, else the model."""
    dm = trainer.datamodule
    if dm is not None and is_overridden(hook, dm):
        return dm
    return pl_module


class DeviceNormalize(SpeedupCallback):
    """Let the dataset hand over uint8 images; convert and normalise them on the device (tip T18).

    Card:

    * **What it does.** Wraps ``on_after_batch_transfer`` (of the DataModule when it overrides it,
      else of the LightningModule) so that, after the batch reached the device, its uint8 images
      become ``(x / 255 - mean) / std`` in ``dtype``, in every stage (fit, validate, test,
      predict). Labels and other tensors pass unchanged.
    * **Seed tip.** Normalised inputs (A#17); transfer fewer bytes (B#7).
    * **Expected gain.** 4x fewer bytes per image transfer than float32; the per-sample
      ``ToTensor`` / ``Normalize`` work leaves the loader.
    * **When it hurts.** Never on the maths: results equal normalising on the CPU (tested). The
      dataset must then return uint8, not already normalised floats.

    Args:
        mean: per-channel means in 0..1 (e.g. ``(0.485, 0.456, 0.406)``).
        std: per-channel standard deviations in 0..1, all > 0.
        scale: multiplies raw values first (``1/255``).
        channel_dim: channel dimension of the images (1 for NCHW).
        dtype: floating dtype handed to the model.
        keys: dict keys or positions to convert; ``None`` converts every uint8 tensor with at least
            ``min_dims`` dimensions.
        min_dims: see ``keys``.

    Example:
        >>> norm = DeviceNormalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    """

    tip = "T18"
    part = "device_normalize"

    def __init__(
        self,
        mean: float | Sequence[float],
        std: float | Sequence[float],
        *,
        scale: float = 1.0 / 255.0,
        channel_dim: int = 1,
        dtype: torch.dtype = torch.float32,
        keys: Sequence[str | int] | None = None,
        min_dims: int = 3,
    ) -> None:
        super().__init__()
        self.normalizer = DeviceNormalizer(
            mean,
            std,
            scale=scale,
            channel_dim=channel_dim,
            dtype=dtype,
            keys=keys,
            min_dims=min_dims,
        )
        self._patches = _Patches()
        self.batches_converted = 0

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        owner = _batch_hook_owner(trainer, pl_module, "on_after_batch_transfer")
        if self._patches.is_patched(owner, "on_after_batch_transfer"):
            return

        def make(orig: Callable) -> Callable:
            def hook(batch: Any, *args: Any, **kwargs: Any) -> Any:
                out = self.normalizer(orig(batch, *args, **kwargs))
                if self.normalizer.converted:
                    self.batches_converted += 1
                    if not self.active:
                        self.report(
                            True,
                            f"normalising {', '.join(self.normalizer.converted)} on the device",
                        )
                return out

            return hook

        self._patches.wrap(owner, "on_after_batch_transfer", make)
        self.report(False, "waiting for the first uint8 batch")

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == 0 and self.batches_converted == 0:
            rank_zero_warn(
                "DeviceNormalize found no uint8 image tensor in the first training batch: nothing was normalised."
                " Return uint8 images from the dataset, or name them with `keys=`.",
                category=PossibleUserWarning,
            )

    @override
    def teardown(
        self, trainer: Trainer, pl_module: LightningModule, stage: str
    ) -> None:
        self._patches.undo()


class NonBlockingCheck(SpeedupCallback):
    """Say when batch copies to CUDA cannot overlap compute because they come from unpinned memory (T21).

    Card:

    * **What it does.** Lightning moves batches with ``non_blocking=True``; a host-to-CUDA copy is
      asynchronous only from pinned memory. This looks at the first batch of each stage before its
      transfer (``on_before_batch_transfer``) and warns, naming the tensors, when they are not
      pinned. :class:`LoaderTuning` pins when batches go to CUDA, which avoids it.
    * **Seed tip.** ``tensor.to(non_blocking=True)`` so copies overlap (B#7).
    * **Expected gain.** The copy time of each batch, when the step is short.
    * **When it hurts.** Never; it only reads ``is_pinned()`` on one batch per stage.

    Example:
        >>> check = NonBlockingCheck()
        >>> check.unpinned
        {}
    """

    tip = "T21"
    part = "non_blocking"

    def __init__(self) -> None:
        super().__init__()
        self.unpinned: dict[str, list[str]] = {}
        self._patches = _Patches()
        self._checked: set[tuple[str, int]] = set()

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        device = machine_from_trainer(trainer).get("accelerator", "cpu")
        if device != "cuda":
            self.report(
                False, f"batches stay on {device}: no host-to-device copies to overlap"
            )
            return
        owner = _batch_hook_owner(trainer, pl_module, "on_before_batch_transfer")
        if self._patches.is_patched(owner, "on_before_batch_transfer"):
            return

        def make(orig: Callable) -> Callable:
            def hook(batch: Any, *args: Any, **kwargs: Any) -> Any:
                batch = orig(batch, *args, **kwargs)
                idx = args[0] if args else kwargs.get("dataloader_idx", 0)
                key = (str(trainer.state.stage), int(idx))
                if key not in self._checked:
                    self._checked.add(key)
                    self.check(batch, "cuda", f"{key[0]} loader {idx}")
                return batch

            return hook

        self._patches.wrap(owner, "on_before_batch_transfer", make)
        self.report(True, "checking that batches come from pinned memory")

    def check(
        self, batch: Any, device: str | torch.device, where: str = "batch"
    ) -> list[str]:
        """Warn and return the names of ``batch``'s tensors whose copy to ``device`` cannot overlap."""
        names = unpinned_tensors(batch, device)
        if names:
            self.unpinned[where] = names
            self.report(
                True, f"{where}: {len(names)} unpinned tensor(s), copies cannot overlap"
            )
            rank_zero_warn(
                f"NonBlockingCheck: {where} hands over {', '.join(names[:4])} from unpinned memory: the"
                f" non_blocking copies to {device} cannot overlap compute. Set pin_memory=True on the DataLoader"
                " (LoaderTuning(pin_memory='auto') does it for CUDA).",
                category=PossibleUserWarning,
            )
        return names

    @override
    def teardown(
        self, trainer: Trainer, pl_module: LightningModule, stage: str
    ) -> None:
        self._patches.undo()
        self._checked.clear()


class StorageCheck(SpeedupCallback):
    """Report where the training data lives and how fast a sample of it reads (tip T19).

    Card:

    * **What it does.** When training starts, finds the data root (``root`` or the dataset's /
      DataModule's ``root`` / ``data_dir`` / file-list attributes), reports network, FUSE and
      rotational storage and a measured read rate of ``sample_files`` files (see
      :func:`~lightning_speedups.functional.storage.storage_report`), on local rank 0.
    * **Seed tip.** Keep the data on an SSD (B#1).
    * **Expected gain.** None by itself; it says when I/O is the first thing to fix.
    * **When it hurts.** Reads up to ``max_bytes`` once at the start.

    Args:
        root: the data directory; ``None`` finds it from the DataModule or the train dataset.
        sample_files: how many files to time.
        max_bytes: the most bytes to read.

    Example:
        >>> check = StorageCheck(root="/tmp", sample_files=4)
    """

    tip = "T19"
    part = "fast_storage"

    def __init__(
        self,
        root: str | None = None,
        sample_files: int = 32,
        max_bytes: int = 64 * 2**20,
    ) -> None:
        super().__init__()
        if (
            isinstance(sample_files, bool)
            or not isinstance(sample_files, int)
            or sample_files < 1
        ):
            raise ValueError(
                f"`sample_files` must be an int >= 1, got {sample_files!r}."
            )
        if (
            isinstance(max_bytes, bool)
            or not isinstance(max_bytes, int)
            or max_bytes < 1
        ):
            raise ValueError(f"`max_bytes` must be an int >= 1, got {max_bytes!r}.")
        self.root = root
        self.sample_files = sample_files
        self.max_bytes = max_bytes
        self.result = None

    def _find_root(self, trainer: Trainer) -> Any:
        if self.root is not None:
            return self.root
        found = find_data_root(trainer.datamodule)
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
                root, sample_files=self.sample_files, max_bytes=self.max_bytes
            )
        except (OSError, ValueError) as ex:
            self.report(False, f"could not inspect {root}: {ex}")
            return
        self.report(True, self.result.summary())
        rank_zero_info(f"StorageCheck: {self.result.summary()}")
        for p in self.result.problems:
            rank_zero_warn(f"StorageCheck: {p}.", category=PossibleUserWarning)
