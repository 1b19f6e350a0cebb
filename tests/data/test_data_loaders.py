"""Usable CPUs, num_workers='auto', loader settings and loader re-creation (T02, T03)."""

from __future__ import annotations

import pytest
import torch
from datatest_utils import WorkerIdDataset, keep_collate, tensor_loader
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
)

import lightning_speedups.data.loaders as loaders_mod
import lightning_speedups.functional.loaders as fl
from lightning_speedups.data.loaders import (
    LoaderRebuildError,
    LoaderSettings,
    rebuild_dataloader,
    resolve_loader_settings,
)
from lightning_speedups.functional.loaders import (
    CpuCount,
    auto_num_workers,
    cgroup_cpu_quota,
)


# --------------------------------------------------------------------------- usable CPUs
def test_cgroup_v2_quota_takes_the_smallest_limit_up_the_tree(tmp_path):
    root = tmp_path / "cg"
    (root / "a" / "b").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io")
    (root / "a" / "cpu.max").write_text("150000 100000\n")
    (root / "a" / "b" / "cpu.max").write_text("max 100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a/b\n")
    assert cgroup_cpu_quota(proc, root) == pytest.approx(1.5)
    (root / "a" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(proc, root) is None


def test_cgroup_v1_quota(tmp_path):
    root = tmp_path / "cg"
    d = root / "cpu,cpuacct" / "docker" / "x"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("200000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("5:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n")
    assert cgroup_cpu_quota(proc, root) == pytest.approx(2.0)
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(proc, root) is None


def test_available_cpus_is_capped_by_the_quota(monkeypatch):
    monkeypatch.setattr(fl.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(fl, "cgroup_cpu_quota", lambda: 1.5)
    c = fl.available_cpus()
    assert (c.count, c.affinity) == (1, 8)
    assert "quota 1.5" in c.reason
    monkeypatch.setattr(fl, "cgroup_cpu_quota", lambda: None)
    assert fl.available_cpus().count == 8


# --------------------------------------------------------------------------- auto workers
@pytest.mark.parametrize(
    ("accelerator", "devices", "cpus", "expected"),
    [
        ("cpu", 1, 1, 0),
        ("cpu", 1, 2, 0),  # measured: workers slow a 2-core CPU step down
        ("cpu", 1, 4, 1),
        ("cpu", 1, 16, 4),
        ("cuda", 1, 16, 4),  # the seeds' 4 x devices
        ("cuda", 1, 3, 2),  # capped by CPUs minus the main process
        ("cuda", 1, 1, 0),
        ("cuda", 8, 32, 3),  # 8 processes share 32 CPUs: 4 each, minus the main one
        ("cuda", 2, 64, 4),
    ],
)
def test_auto_num_workers_table(accelerator, devices, cpus, expected):
    choice = auto_num_workers(accelerator=accelerator, devices=devices, cpus=cpus)
    assert choice.num_workers == expected
    assert choice.reason


def test_auto_num_workers_keeps_0_for_streams_and_in_memory_tensors():
    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(3)

    assert auto_num_workers(accelerator="cuda", cpus=16, dataset=Stream()).num_workers == 0
    tds = TensorDataset(torch.zeros(4))
    choice = auto_num_workers(accelerator="cuda", cpus=16, dataset=torch.utils.data.Subset(tds, [0, 1]))
    assert choice.num_workers == 0 and "TensorDataset" in choice.reason
    assert auto_num_workers(accelerator="cuda", cpus=16, dataset=WorkerIdDataset()).num_workers == 4


def test_auto_num_workers_rejects_bad_input():
    with pytest.raises(ValueError, match="devices"):
        auto_num_workers(devices=0)
    with pytest.raises(ValueError, match="cpus"):
        auto_num_workers(cpus=0)


# --------------------------------------------------------------------------- settings
def test_settings_validation_names_the_argument():
    with pytest.raises(TypeError, match="num_workers"):
        LoaderSettings(num_workers="many")
    with pytest.raises(ValueError, match="num_workers"):
        LoaderSettings(num_workers=-1)
    with pytest.raises(TypeError, match="pin_memory"):
        LoaderSettings(pin_memory="yes")
    with pytest.raises(ValueError, match="prefetch_factor"):
        LoaderSettings(prefetch_factor=0)


def test_resolve_pins_only_for_cuda_and_says_so():
    dl = DataLoader(WorkerIdDataset(), batch_size=4)
    r = resolve_loader_settings(LoaderSettings(num_workers=0), dl, accelerator="cpu", cpus=2)
    assert r.kwargs == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "prefetch_factor": None,
    }
    r = resolve_loader_settings(LoaderSettings(), dl, accelerator="cuda", cpus=16)
    assert r.kwargs == {
        "num_workers": 4,
        "pin_memory": True,
        "persistent_workers": True,
        "prefetch_factor": None,
    }
    r = resolve_loader_settings(LoaderSettings(pin_memory=True), dl, accelerator="cpu", cpus=2)
    assert r.kwargs["pin_memory"] is False
    assert any("pin_memory=True ignored" in w for w in r.warnings)


def test_resolve_drops_worker_only_settings_without_workers():
    dl = DataLoader(
        WorkerIdDataset(),
        batch_size=4,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
    )
    r = resolve_loader_settings(LoaderSettings(num_workers=0, persistent_workers=True, prefetch_factor=8), dl)
    assert r.kwargs["persistent_workers"] is False and r.kwargs["prefetch_factor"] is None
    # None keeps the loader's own values
    r = resolve_loader_settings(LoaderSettings(None, None, None, None), dl, cpus=8)
    assert r.kwargs == {
        "num_workers": 2,
        "pin_memory": False,
        "persistent_workers": True,
        "prefetch_factor": 4,
    }
    # persistent + pinned + reloading loaders is unstable in PyTorch: auto turns persistence off
    r = resolve_loader_settings(
        LoaderSettings(num_workers=2),
        dl,
        accelerator="cuda",
        cpus=8,
        reload_every_n_epochs=1,
    )
    assert r.kwargs["pin_memory"] is True and r.kwargs["persistent_workers"] is False


def test_resolve_warns_when_workers_exceed_cpus():
    dl = DataLoader(WorkerIdDataset(), batch_size=4)
    r = resolve_loader_settings(LoaderSettings(num_workers=8), dl, cpus=2)
    assert r.kwargs["num_workers"] == 8
    assert any("more than the 2 CPU" in w for w in r.warnings)


class Unpicklable(torch.utils.data.Dataset):
    def __init__(self):
        self.fn = lambda i: i  # lambdas cannot be pickled

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor(float(self.fn(i)))


def test_unpicklable_dataset_with_spawn_falls_back_to_0_workers():
    dl = DataLoader(Unpicklable(), batch_size=4, num_workers=1, multiprocessing_context="spawn")
    r = resolve_loader_settings(LoaderSettings(num_workers=2), dl, cpus=8)
    assert r.kwargs["num_workers"] == 0 and r.kwargs["persistent_workers"] is False
    assert any("cannot be pickled" in w and "dataset" in w for w in r.warnings)
    new = rebuild_dataloader(dl, **r.kwargs)  # the context goes with the workers
    assert new.num_workers == 0 and new.multiprocessing_context is None
    assert [b.tolist() for b in new] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    # fork workers inherit the dataset: nothing to fall back from
    dl = DataLoader(Unpicklable(), batch_size=4, num_workers=1, multiprocessing_context="fork")
    assert resolve_loader_settings(LoaderSettings(num_workers=2), dl, cpus=8).kwargs["num_workers"] == 2


# --------------------------------------------------------------------------- rebuilding
def _batches(dl):
    return [tuple(t.clone() for t in b) for b in dl]


def test_rebuild_keeps_sampler_collate_batch_size_drop_last_and_generator():
    init = lambda wid: None
    g = torch.Generator().manual_seed(3)
    dl = DataLoader(
        WorkerIdDataset(30),
        batch_size=7,
        shuffle=True,
        drop_last=True,
        collate_fn=keep_collate,
        worker_init_fn=init,
        generator=g,
        timeout=5,
    )
    new = rebuild_dataloader(dl, num_workers=0, pin_memory=False, prefetch_factor=None)
    assert type(new) is DataLoader
    assert new.sampler is dl.sampler and new.generator is g
    assert (new.batch_size, new.drop_last, new.collate_fn, new.worker_init_fn) == (
        7,
        True,
        keep_collate,
        init,
    )
    assert new.timeout == 0  # a timeout only works with workers
    assert rebuild_dataloader(dl, num_workers=1).timeout == 5
    assert len(new) == 4
    # same order as the original loader from the same seed
    ref = DataLoader(
        WorkerIdDataset(30),
        batch_size=7,
        shuffle=True,
        drop_last=True,
        collate_fn=keep_collate,
        generator=torch.Generator().manual_seed(3),
    )
    for a, b in zip(_batches(ref), _batches(new)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_rebuild_keeps_a_custom_batch_sampler():
    bs = BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False)

    class MyBatchSampler(BatchSampler):
        pass

    mine = MyBatchSampler(SequentialSampler(range(10)), 3, False)
    for sampler in (bs, mine):
        dl = DataLoader(WorkerIdDataset(10), batch_sampler=sampler, collate_fn=keep_collate)
        new = rebuild_dataloader(dl, num_workers=0, persistent_workers=False)
        assert new.batch_sampler is sampler
        assert [len(b[0]) for b in new] == [3, 3, 3, 1]


class ExtraArgLoader(DataLoader):
    def __init__(self, dataset, tag, **kwargs):
        self.tag = tag
        super().__init__(dataset, **kwargs)


class HardCodedLoader(DataLoader):
    def __init__(self, dataset, batch_size=1, **kwargs):
        kwargs.pop("num_workers", None)
        super().__init__(dataset, batch_size=batch_size, num_workers=0, **kwargs)


class HiddenArgLoader(DataLoader):
    def __init__(self, dataset, secret):
        super().__init__(dataset, batch_size=2)


def test_rebuild_custom_subclasses():
    dl = ExtraArgLoader(WorkerIdDataset(8), "hello", batch_size=2)
    new = rebuild_dataloader(dl, num_workers=1)
    assert type(new) is ExtraArgLoader and new.tag == "hello" and new.num_workers == 1 and new.batch_size == 2

    with pytest.raises(LoaderRebuildError, match="ignored `num_workers=2`"):
        rebuild_dataloader(HardCodedLoader(WorkerIdDataset(8)), num_workers=2)
    with pytest.raises(LoaderRebuildError, match="secret"):
        rebuild_dataloader(HiddenArgLoader(WorkerIdDataset(8), 1), num_workers=2)
    with pytest.raises(TypeError, match="not_an_arg"):
        rebuild_dataloader(dl, not_an_arg=1)


def test_rebuild_from_lightning_saved_args_keeps_positional_args_and_subclass():
    from lightning.fabric.utilities.data import _replace_dunder_methods
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import DistributedSampler

    ds = WorkerIdDataset(8)
    with (
        _replace_dunder_methods(DataLoader, "dataset"),
        _replace_dunder_methods(BatchSampler),
    ):
        dl = ExtraArgLoader(ds, "t", batch_size=4, shuffle=True, collate_fn=keep_collate)
        new = rebuild_dataloader(
            dl,
            num_workers=1,
            persistent_workers=True,
            pin_memory=False,
            prefetch_factor=3,
        )
    assert hasattr(new, "__pl_saved_args")
    assert type(new) is ExtraArgLoader and new.tag == "t" and new.collate_fn is keep_collate
    assert (new.num_workers, new.persistent_workers, new.prefetch_factor) == (
        1,
        True,
        3,
    )
    # Lightning can still inject its distributed sampler into the tuned loader, keeping the settings
    ddp = _update_dataloader(new, DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True))
    assert isinstance(ddp.sampler, DistributedSampler)
    assert (ddp.num_workers, ddp.persistent_workers, ddp.prefetch_factor, ddp.tag) == (
        1,
        True,
        3,
        "t",
    )


def test_machine_cpus_come_from_available_cpus(monkeypatch):
    monkeypatch.setattr(loaders_mod, "available_cpus", lambda: CpuCount(2, 2, None, "2 CPUs"))
    r = resolve_loader_settings(LoaderSettings(), DataLoader(WorkerIdDataset(), batch_size=4))
    assert r.kwargs["num_workers"] == 0
    monkeypatch.setattr(loaders_mod, "available_cpus", lambda: CpuCount(16, 16, None, "16 CPUs"))
    r = resolve_loader_settings(
        LoaderSettings(),
        DataLoader(WorkerIdDataset(), batch_size=4),
        accelerator="cuda",
    )
    assert r.kwargs["num_workers"] == 4


def test_non_tensor_leaves_and_unpinned_names():
    import numpy as np

    batch = {"x": np.zeros(2), "y": torch.zeros(2), "names": ["a", "b"]}
    assert fl.non_tensor_leaves(batch) == [("batch['x']", "numpy.ndarray")]
    assert fl.unpinned_tensors([torch.zeros(1), {"m": torch.zeros(1)}], "cuda") == [
        "batch[0]",
        "batch[1]['m']",
    ]
    assert fl.unpinned_tensors([torch.zeros(1)], "cpu") == []
    assert tensor_loader(4).num_workers == 0
