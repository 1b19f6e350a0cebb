"""LoaderTuning on the user's own loaders (module, DataModule, loaders passed to fit) and SpeedDataModule."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from datatest_utils import (
    ExtraArgLoaderBase,
    LoaderDataModule,
    LoaderModel,
    Recorder,
    WorkerIdDataset,
    keep_collate,
    tensor_loader,
    trainer,
)
from torch.utils.data import DataLoader

import lightning_speedups.data.loaders as loaders_mod
from lightning_speedups.callbacks.loader_tuning import LoaderTuning
from lightning_speedups.data.datamodule import SpeedDataModule
from lightning_speedups.functional.loaders import CpuCount

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two_cpus(monkeypatch):
    """Make 'auto' see the 2-CPU machine this was measured on, whatever runs the tests."""
    monkeypatch.setattr(
        loaders_mod,
        "available_cpus",
        lambda: CpuCount(2, 2, None, "2 CPUs by affinity"),
    )


def _flat(loaders):
    return list(getattr(loaders, "flattened", None) or (loaders if isinstance(loaders, list) else [loaders]))


def test_arguments_are_validated():
    with pytest.raises(TypeError, match="num_workers"):
        LoaderTuning(num_workers="lots")
    with pytest.raises(ValueError, match="stages"):
        LoaderTuning(stages=("training",))


def test_module_loaders_are_rebuilt_with_auto_settings_and_everything_else_kept(
    two_cpus,
):
    model = LoaderModel(
        loader_kwargs={
            "num_workers": 2,
            "persistent_workers": True,
            "prefetch_factor": 4,
        }
    )
    cb = LoaderTuning()
    t = trainer(max_steps=3, limit_val_batches=2, val_check_interval=2, callbacks=[cb])
    t.fit(model)
    train = t.train_dataloader
    (val,) = _flat(t.val_dataloaders)
    for dl, orig in ((train, model.returned["train"]), (val, model.returned["val"])):
        assert dl is not orig
        # 2 CPUs, CPU training: auto goes to 0 workers and drops the worker-only settings
        assert (
            dl.num_workers,
            dl.persistent_workers,
            dl.prefetch_factor,
            dl.pin_memory,
        ) == (0, False, None, False)
        assert dl.collate_fn is keep_collate and dl.batch_size == orig.batch_size and dl.drop_last == orig.drop_last
        assert type(dl.sampler) is type(orig.sampler)
    assert type(train.sampler).__name__ == "RandomSampler"
    assert set(model.pids) == {os.getpid()}  # loaded in the main process
    assert "train" in cb.choices and "val" in cb.choices and "num_workers=0" in cb.choices["train"]
    assert cb.active
    # hooks restored
    assert "train_dataloader" not in vars(model) and "val_dataloader" not in vars(model)


def test_workers_really_load_the_batches():
    model = LoaderModel()
    t = trainer(
        max_steps=2,
        limit_val_batches=0,
        callbacks=[LoaderTuning(num_workers=1, stages=("train",))],
    )
    t.fit(model)
    assert t.train_dataloader.num_workers == 1 and t.train_dataloader.persistent_workers is True
    assert model.pids and os.getpid() not in set(model.pids)


def test_datamodule_loaders_are_tuned(two_cpus):
    dm = LoaderDataModule(loader_kwargs={"num_workers": 2})
    t = trainer(
        max_steps=2,
        limit_val_batches=1,
        callbacks=[LoaderTuning(num_workers=0, stages=("train", "val"))],
    )
    t.fit(Recorder(), datamodule=dm)
    assert t.train_dataloader.num_workers == 0 and dm.returned["train"].num_workers == 2
    assert _flat(t.val_dataloaders)[0].num_workers == 0
    assert "train_dataloader" not in vars(dm)


def test_stages_limit_what_is_tuned():
    model = LoaderModel(loader_kwargs={"num_workers": 0})
    cb = LoaderTuning(num_workers=0, pin_memory=None, stages="val")
    t = trainer(max_steps=1, limit_val_batches=1, callbacks=[cb])
    t.fit(model)
    assert t.train_dataloader is model.returned["train"]
    assert list(cb.choices) == ["val"]
    # nothing to change: the user's loader is used as it is
    assert _flat(t.val_dataloaders)[0] is model.returned["val"]


def test_loaders_passed_to_fit_are_tuned_and_restored():
    dl = tensor_loader(32, batch_size=8, num_workers=2)
    t = trainer(max_steps=2, callbacks=[LoaderTuning(num_workers=0)])
    t.fit(Recorder(), train_dataloaders=dl)
    assert t.train_dataloader.num_workers == 0
    assert t.fit_loop._data_source.instance is dl


def test_custom_subclass_keeps_its_class_and_arguments():
    model = LoaderModel(loader_cls=ExtraArgLoaderBase)
    t = trainer(
        max_steps=1,
        limit_val_batches=0,
        callbacks=[LoaderTuning(num_workers=0, persistent_workers=False)],
    )
    t.fit(model)
    assert type(t.train_dataloader) is ExtraArgLoaderBase and t.train_dataloader.tag == "user"


class Unpicklable(torch.utils.data.Dataset):
    def __init__(self):
        self.fn = lambda i: i

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.randn(4), torch.tensor(i % 2)


class SpawnModel(Recorder):
    def train_dataloader(self):
        return DataLoader(Unpicklable(), batch_size=4, num_workers=1, multiprocessing_context="spawn")


def test_unpicklable_dataset_falls_back_to_0_workers_and_trains():
    t = trainer(max_steps=2, callbacks=[LoaderTuning(num_workers=2)])
    with pytest.warns(UserWarning, match="cannot be pickled for spawn workers"):
        t.fit(SpawnModel())
    assert t.train_dataloader.num_workers == 0 and t.global_step == 2


def test_pin_memory_without_gpu_is_ignored_once(two_cpus):
    model = LoaderModel()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = trainer(
            max_steps=2,
            limit_val_batches=1,
            callbacks=[LoaderTuning(num_workers=0, pin_memory=True)],
        )
        t.fit(model)
    msgs = [str(w.message) for w in rec if "pin_memory=True ignored" in str(w.message)]
    assert len(msgs) == 1  # once, though both the train and the val loader asked for it
    assert t.train_dataloader.pin_memory is False


def test_workers_above_cpus_warn(two_cpus):
    with pytest.warns(UserWarning, match="more than the 2 CPU"):
        trainer(
            max_steps=1,
            limit_val_batches=0,
            callbacks=[LoaderTuning(num_workers=3, stages="train")],
        ).fit(LoaderModel(loader_kwargs={"num_workers": 0}))


class NumpyCollateModel(Recorder):
    def train_dataloader(self):
        return DataLoader(
            WorkerIdDataset(8),
            batch_size=4,
            collate_fn=lambda b: [
                np.stack([s[0].numpy() for s in b]),
                torch.stack([s[1] for s in b]),
            ],
        )

    def training_step(self, batch, batch_idx):
        x, y = torch.as_tensor(batch[0]), batch[1]
        return torch.nn.functional.cross_entropy(self.layer(x), y)


def test_collate_returning_non_tensors_is_named():
    with pytest.warns(UserWarning, match=r"batch\[0\] is numpy.ndarray"):
        trainer(max_steps=1, callbacks=[LoaderTuning(num_workers=0)]).fit(NumpyCollateModel())


# --------------------------------------------------------------------------- SpeedDataModule
def test_speed_datamodule_wraps_a_dataset_with_a_seeded_split(two_cpus):
    ds = WorkerIdDataset(40)
    dm = SpeedDataModule.wrap(ds, val_fraction=0.25, batch_size=8, collate_fn=keep_collate, seed=1)
    t = trainer(max_steps=2, limit_val_batches=1)
    t.fit(Recorder(), datamodule=dm)
    assert (len(dm.train_dataset), len(dm.val_dataset)) == (30, 10)
    dl = t.train_dataloader
    assert (dl.num_workers, dl.pin_memory, dl.persistent_workers, dl.collate_fn) == (
        0,
        False,
        False,
        keep_collate,
    )
    assert "num_workers=0" in dm.choices["train"]
    again = SpeedDataModule.wrap(ds, val_fraction=0.25)
    again.setup("fit")
    assert again.val_dataset.indices == dm.val_dataset.indices


def test_speed_datamodule_without_val_and_bad_args():
    dm = SpeedDataModule(WorkerIdDataset(16), batch_size=4, num_workers=1, collate_fn=keep_collate)
    t = trainer(max_steps=2)
    t.fit(Recorder(), datamodule=dm)
    assert t.train_dataloader.num_workers == 1 and t.train_dataloader.persistent_workers is True
    assert dm.val_dataloader() == []
    with pytest.raises(ValueError, match="batch_size"):
        SpeedDataModule(batch_size=0)
    with pytest.raises(ValueError, match="val_fraction"):
        SpeedDataModule.wrap(WorkerIdDataset(4), val_fraction=1.0)
