"""DataWaitMonitor, InputStatsCheck, NonBlockingCheck and StorageCheck."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
import torch
from datatest_utils import (
    ClockedDataset,
    FakeClock,
    Recorder,
    tensor_loader,
    trainer,
)
from torch.utils.data import DataLoader, Subset, TensorDataset

from lightning_speedups.callbacks.data_wait import DataWaitMonitor
from lightning_speedups.callbacks.input_stats import InputStatsCheck
from lightning_speedups.callbacks.non_blocking import NonBlockingCheck
from lightning_speedups.callbacks.storage_check import StorageCheck
from lightning_speedups.functional.storage import (
    find_data_root,
    find_mount,
    storage_report,
)

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- data wait
class ClockedModel(Recorder):
    """Loading and stepping take fixed times on a fake clock, so the figures are exact.

    Each sample takes ``sample_s`` to load (``batch_size`` per batch), each training step ``step_s``
    and each validation batch ``val_s``; Lightning's own work takes no (fake) time."""

    def __init__(self, clock: FakeClock, sample_s: float, step_s: float, val_s: float = 0.0, batch_size: int = 4):
        super().__init__()
        self.clock, self.sample_s, self.step_s, self.val_s = clock, sample_s, step_s, val_s
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(ClockedDataset(self.clock, self.sample_s), batch_size=self.batch_size)

    def val_dataloader(self):
        return tensor_loader(8, batch_size=4)

    def training_step(self, batch, batch_idx):
        self.clock.advance(self.step_s)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.clock.advance(self.val_s)


class FastData(Recorder):
    """In-memory tensors, a validation loader."""

    def train_dataloader(self):
        return tensor_loader(64, batch_size=4)

    def val_dataloader(self):
        return tensor_loader(8, batch_size=4)


def test_monitor_validates_arguments():
    with pytest.raises(ValueError, match="input_bound_threshold"):
        DataWaitMonitor(input_bound_threshold=1.5)
    with pytest.raises(ValueError, match="warmup_steps"):
        DataWaitMonitor(warmup_steps=-1)
    with pytest.raises(TypeError, match="log"):
        DataWaitMonitor(log="yes")


def test_slow_dataset_is_input_bound():
    clock = FakeClock()
    mon = DataWaitMonitor(clock=clock)
    # 4 samples x 0.75 s of loading against a 1 s step: 3 s of every 4 s wait for data
    t = trainer(max_steps=6, callbacks=[mon])
    with pytest.warns(UserWarning, match="input-bound: 75% of step time waited for data over 5 steps"):
        t.fit(ClockedModel(clock, sample_s=0.75, step_s=1.0))
    assert mon.data_wait_fraction == 0.75
    assert (mon.wait_seconds, mon.step_seconds) == (15.0, 20.0)
    assert mon.input_bound is True and mon.steps == 5  # first step is warm-up
    assert mon.last_fraction == 0.75
    assert float(t.callback_metrics["speedups/data_wait_fraction"]) == 0.75
    assert mon.status[0] == "active" and "input-bound" in mon.status[1]


def test_fast_dataset_is_not_input_bound_and_validation_is_excluded():
    clock = FakeClock()
    mon = DataWaitMonitor(clock=clock)
    # validation after steps 2, 4 and 6 takes 2 x 10 s: far more than the steps, yet not counted as data wait
    t = trainer(max_steps=6, limit_val_batches=2, val_check_interval=2, callbacks=[mon])
    t.fit(ClockedModel(clock, sample_s=0.0625, step_s=0.75, val_s=10.0))
    assert mon.data_wait_fraction == 0.25
    assert (mon.wait_seconds, mon.step_seconds, mon.steps) == (1.25, 5.0, 5)
    assert mon.input_bound is False and "not input-bound: 25% of step time" in mon.status[1]
    # logged once, at the last step, over all six steps (the warm-up one included)
    assert float(t.callback_metrics["speedups/data_wait_fraction"]) == 0.25


def test_monitor_state_survives_a_checkpoint():
    clock = FakeClock()
    mon = DataWaitMonitor(clock=clock)
    with pytest.warns(UserWarning, match="input-bound: 50%"):
        trainer(max_steps=3, callbacks=[mon]).fit(ClockedModel(clock, sample_s=0.25, step_s=1.0))
    restored = DataWaitMonitor(clock=clock)
    restored.load_state_dict(mon.state_dict())
    assert restored.data_wait_fraction == mon.data_wait_fraction == 0.5
    assert restored.steps == mon.steps == 2


# --------------------------------------------------------------------------- input statistics
class PixelData(Recorder):
    def __init__(self, scale: float):
        super().__init__(dim=16)
        self.scale = scale

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        if self.scale == 255:
            x = torch.randint(0, 256, (32, 16), generator=g).float()
        else:
            x = torch.randn(32, 16, generator=g)
        return DataLoader(TensorDataset(x, torch.randint(0, 2, (32,), generator=g)), batch_size=8)


def test_input_stats_flags_raw_pixels_and_names_the_tensor():
    check = InputStatsCheck(batches=2)
    with pytest.warns(
        UserWarning,
        match=r"batch\[0\] looks unnormalised.*0\.\.255 like raw pixels.*mean 1\d\d",
    ):
        trainer(max_steps=3, callbacks=[check]).fit(PixelData(255))
    assert list(check.problems) == ["batch[0]"]
    s = check.stats["batch[0]"]
    assert s.count == 2 * 8 * 16 and 100 < s.mean < 155 and s.max <= 255


def test_input_stats_quiet_on_normalised_inputs():
    check = InputStatsCheck(batches=2)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        trainer(max_steps=3, callbacks=[check]).fit(PixelData(1))
    assert not [w for w in rec if "InputStatsCheck" in str(w.message)]
    assert check.problems == {} and check.active and "look normalised" in check.status[1]


def test_input_stats_validates_arguments():
    with pytest.raises(ValueError, match="batches"):
        InputStatsCheck(batches=0)
    with pytest.raises(ValueError, match="std_range"):
        InputStatsCheck(std_range=(2.0, 3.0))


# --------------------------------------------------------------------------- non-blocking
def test_non_blocking_check_skips_on_cpu_and_names_unpinned_tensors():
    check = NonBlockingCheck()
    trainer(max_steps=1, callbacks=[check]).fit(FastData())
    assert check.status == (
        "skipped",
        "batches stay on cpu: no host-to-device copies to overlap",
    )
    with pytest.warns(UserWarning, match=r"batch\[0\], batch\[1\] from unpinned memory"):
        assert check.check([torch.zeros(2), torch.zeros(2)], "cuda", "train loader 0") == ["batch[0]", "batch[1]"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_non_blocking_check_on_cuda():  # pragma: no cover - GPU only
    from lightning_speedups.callbacks.loader_tuning import LoaderTuning

    check = NonBlockingCheck()
    with pytest.warns(UserWarning, match="unpinned"):
        pl.Trainer(
            accelerator="cuda",
            devices=1,
            max_steps=1,
            logger=False,
            enable_checkpointing=False,
            callbacks=[check],
        ).fit(FastData())
    check = NonBlockingCheck()
    pl.Trainer(
        accelerator="cuda",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        callbacks=[LoaderTuning(num_workers=0), check],
    ).fit(FastData())
    assert check.unpinned == {}


# --------------------------------------------------------------------------- storage
def _files(tmp_path, n=5, size=50_000):
    d = tmp_path / "data" / "class_a"
    d.mkdir(parents=True)
    for i in range(n):
        (d / f"{i}.bin").write_bytes(bytes([i % 251]) * size)
    return tmp_path / "data"


def test_storage_report_reads_a_sample_and_finds_the_mount(tmp_path):
    root = _files(tmp_path)
    clock = FakeClock()
    ticks = iter(range(1000))

    def tick():  # each read of the clock moves it on by 0.5 s: 0.5 s per file
        clock.now = 100.0 + 0.5 * next(ticks)
        return clock()

    r = storage_report(root, sample_files=3, clock=tick)
    assert (r.files_read, r.bytes_read) == (3, 150_000)
    assert r.seconds == 1.5 and r.read_mb_s == 0.1
    assert "0 MB/s over 3 files" in r.summary()
    assert r.mount is not None and str(root).startswith(r.mount.mount_point)
    assert str(root) in r.summary()
    capped = storage_report(root, sample_files=5, max_bytes=60_000)
    assert capped.bytes_read == 60_000
    with pytest.raises(FileNotFoundError, match="does not exist"):
        storage_report(tmp_path / "nope")


@pytest.mark.parametrize(
    ("fs", "network", "fuse"),
    [
        ("nfs4", True, False),
        ("cifs", True, False),
        ("fuse.sshfs", True, True),
        ("fuse.gcsfuse", True, True),
        ("fuse.myfs", False, True),
        ("fuseblk", False, False),
        ("ext4", False, False),
    ],
)
def test_storage_report_classifies_file_systems(tmp_path, fs, network, fuse):
    root = _files(tmp_path, n=1)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nserver:/x {root} {fs} rw 0 0\n")
    r = storage_report(root, mounts_file=mounts)
    assert r.mount.fs_type == fs and (r.is_network, r.is_fuse) == (network, fuse)
    flagged = any(fs in p for p in r.problems)
    assert flagged == (network or fuse)


def test_find_mount_longest_prefix_and_escaped_spaces(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/a / ext4 rw 0 0\n/dev/b /mnt/my\\040data xfs rw 0 0\n/dev/c /mnt ext4 rw 0 0\n")
    assert find_mount("/mnt/my data/x", mounts).fs_type == "xfs"
    assert find_mount("/mnt/other", mounts).device == "/dev/c"
    assert find_mount("/mnt/my datax", mounts).device == "/dev/c"


def test_find_data_root_follows_attributes(tmp_path):
    root = _files(tmp_path)

    class Folder(torch.utils.data.Dataset):
        def __init__(self):
            self.samples = [(str(p), 0) for p in sorted((root / "class_a").iterdir())]

        def __len__(self):
            return len(self.samples)

    assert find_data_root(Subset(Folder(), [0])) == root / "class_a"

    class WithRoot:
        data_dir = str(root)

    assert find_data_root(torch.utils.data.ConcatDataset([TensorDataset(torch.zeros(1))])) is None
    assert find_data_root(WithRoot()) == root


def test_storage_check_callback_reads_the_datamodule_root(tmp_path):
    root = _files(tmp_path)

    class DM(pl.LightningDataModule):
        data_dir = str(root)

        def train_dataloader(self):
            return tensor_loader(8, batch_size=4)

    check = StorageCheck(sample_files=2)
    trainer(max_steps=1, callbacks=[check]).fit(Recorder(), datamodule=DM())
    assert check.active and check.result.files_read == 2 and str(root) in check.status[1]
    none = StorageCheck()
    trainer(max_steps=1, callbacks=[none]).fit(FastData())
    assert none.status[0] == "skipped"
    with pytest.raises(ValueError, match="sample_files"):
        StorageCheck(sample_files=0)
