"""T02, T03: apply tuned loader settings to the DataLoaders the user's code already returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn
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
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.loaders import non_tensor_leaves
from lightning_speedups.trainer.hooks import HookPatches
from lightning_speedups.trainer.internals import data_source
from lightning_speedups.trainer.namespace import is_lightning, is_overridden

_STAGE_HOOKS = {
    "train": "train_dataloader",
    "val": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}


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
        source = data_source(loop)
        if source is not None and hasattr(source, "instance"):
            out.append((stage, source))
    return out


_PLAIN = (type(None), bool, int, float, complex, str, bytes, type)


def _reachable(root: Any, depth: int) -> dict[int, tuple[str, Any]]:
    """``{id: (path, object)}`` of the mutable objects held in attributes of ``root``, ``depth`` levels down.

    Sub-modules, parameters, buffers, the Trainer and Lightning's own bookkeeping are left out: what is
    looked for is the state a user's code keeps beside them (a replay buffer, a list, a tensor).
    """
    from torch import nn

    out: dict[int, tuple[str, Any]] = {}
    todo: list[tuple[str, Any, int]] = [("", root, 0)]
    while todo:
        path, obj, level = todo.pop()
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, value in attrs.items():
            if (
                name.startswith("_")
                or isinstance(value, (_PLAIN, nn.Module))
                or is_lightning(value, "Trainer", "LightningDataModule")
            ):
                continue
            if callable(value) and not hasattr(value, "__len__"):
                continue
            key = f"{path}.{name}" if path else name
            out.setdefault(id(value), (key, value))
            if level + 1 < depth:
                todo.append((key, value, level + 1))
    return out


def live_state_shared(dataset: Any, pl_module: Any, depth: int = 3) -> str | None:
    """Where an ``IterableDataset`` reads an object the LightningModule also holds (``None``: nowhere).

    A dataset sampling a replay buffer that ``training_step`` fills (a DQN's) must stay in the main
    process: a worker process gets a copy of the buffer as it was when the worker started.
    """
    from torch.utils.data import IterableDataset

    # a map-style dataset is indexed by the sampler: one that shares state with the model is static data
    # far more often than a live buffer; a stream sampling the model's state is the DQN shape
    if not isinstance(dataset, IterableDataset) or pl_module is None:
        return None
    held = _reachable(pl_module, depth)
    for key, (path, _value) in _reachable(dataset, depth).items():
        if key in held:
            return f"the dataset's `{path}` is the LightningModule's `{held[key][0]}`"
    return None


def _warn_once(seen: set[str], message: str, category: type[Warning] = PossibleUserWarning) -> None:
    if message not in seen:
        seen.add(message)
        rank_zero_warn(message, category=category)


class LoaderTuning(SpeedupCallback):
    """Apply loader settings to the DataLoaders the user's code already returns (tips T02, T03, T21).

    Card: tip T02 ``loader-workers``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    * **What it does.** At ``setup`` it wraps the ``*_dataloader`` hooks of the LightningModule and
      DataModule (and tunes loaders passed to ``fit`` directly). Each DataLoader they return is
      re-created with the resolved settings and everything else kept: dataset, sampler or batch
      sampler, ``collate_fn``, batch size, ``drop_last``, shuffling, ``worker_init_fn``, generator,
      custom DataLoader subclasses (as Lightning re-creates them to inject a distributed sampler,
      which it still does afterwards). ``teardown`` restores the hooks. Choices are logged once per
      stage, with the reason.

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

    Examples:
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
            raise SettingError(f"`stages` may hold {sorted(_STAGE_HOOKS)}, got {bad}.")
        self.stages = tuple(stages)
        self.choices: dict[str, str] = {}
        self._patches = HookPatches()
        self._direct: list[tuple[Any, Any]] = []
        self._machine: dict[str, Any] = {}
        self._said: set[str] = set()
        self._batch_checked = False
        self._short: dict[str, str] = {}
        self._changed_any = False
        self._module: Any = None

    # -- the tuning itself -------------------------------------------------------------------
    def tune(self, loader: Any, stage: str) -> Any:
        """Return ``loader`` re-created with the settings (or unchanged when not a DataLoader)."""
        if not isinstance(loader, DataLoader):
            return loader
        settings = self.settings
        shared = live_state_shared(loader.dataset, self._module)
        if shared is not None and settings.num_workers is not None:
            # workers would sample a copy frozen when they start: never add them here
            settings = dataclasses.replace(settings, num_workers=None)
        resolved = resolve_loader_settings(settings, loader, **self._machine)
        if shared is not None and resolved.reasons:
            resolved.reasons[0] = (
                f"num_workers={loader.num_workers} (kept: {shared}, which training fills; worker processes"
                " would sample a stale copy)"
            )
        for w in resolved.warnings:
            _warn_once(self._said, f"LoaderTuning: {w}")  # once per run, not once per loader
        changed = {k: v for k, v in resolved.kwargs.items() if getattr(loader, k, None) != v}
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
            if shared is not None:
                self._short[stage] += (
                    f", no workers added: {shared}, which training fills (a worker would sample a stale copy)"
                )
            self._changed_any = self._changed_any or new is not loader
            if why:  # the status line says the settings; the reasons for them go under it
                self.tell(f"{stage}: {why}")
            grouped: dict[str, list[str]] = {}
            for name, short in self._short.items():
                grouped.setdefault(short, []).append(name)
            self.report(self._changed_any, "; ".join(f"{'/'.join(names)}: {short}" for short, names in grouped.items()))
        return new

    def _tune_collection(self, data: Any, stage: str) -> Any:
        from lightning_utilities.core.apply_func import apply_to_collection

        if is_lightning(data, "CombinedLoader"):  # either Lightning package's
            data.flattened = [self.tune(dl, stage) for dl in data.flattened]
            return data
        return apply_to_collection(data, DataLoader, self.tune, stage)

    # -- hooks ---------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._machine = machine_from_trainer(trainer)
        self._module = pl_module
        wrapped: set[tuple[int, str]] = set()
        for stage_name, source in _data_sources(trainer):
            if stage_name not in self.stages:
                continue
            inst = source.instance
            name = source.name
            if is_lightning(inst, "LightningModule", "LightningDataModule"):
                key = (id(inst), name)
                if key in wrapped or self._patches.is_patched(inst, name) or not is_overridden(name, inst):
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
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
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
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._patches.undo()
        for source, inst in reversed(self._direct):
            source.instance = inst
        self._direct.clear()
        self._batch_checked = False
