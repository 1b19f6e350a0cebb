"""Zero-copy collate (T13) and on-device normalisation (T18)."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from datatest_utils import LoaderModel, trainer
from torch.utils.data import DataLoader, Dataset

from lightning_speedups.callbacks.device_normalize import DeviceNormalize
from lightning_speedups.data.collate import (
    CollateTypeError,
    as_tensor_no_copy,
    zero_copy_collate,
    zero_copy_convert,
)
from lightning_speedups.data.normalize import DeviceNormalizer, normalize_uint8

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- zero copy
def test_convert_shares_memory_with_the_arrays():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(3)
    out = zero_copy_convert({"x": a, "y": [b, "name"]})
    assert out["x"].data_ptr() == a.ctypes.data and out["y"][0].data_ptr() == b.ctypes.data
    assert np.shares_memory(out["x"].numpy(), a)
    a[0, 0] = 42.0  # the same memory: the tensor sees the change
    assert out["x"][0, 0].item() == 42.0
    assert out["y"][1] == "name"


def test_as_tensor_no_copy_only_copies_what_cannot_be_shared():
    a = np.arange(6.0)
    assert as_tensor_no_copy(a).data_ptr() == a.ctypes.data
    ro = np.arange(4.0)
    ro.flags.writeable = False
    assert as_tensor_no_copy(ro).data_ptr() == ro.ctypes.data
    rev = a[::-1]  # negative strides: torch cannot view them, one copy
    t = as_tensor_no_copy(rev)
    assert t.tolist() == rev.tolist() and not np.shares_memory(t.numpy(), a)
    with pytest.raises(CollateTypeError, match="dtype"):
        as_tensor_no_copy(np.array(["a"]))


def test_collate_makes_exactly_one_copy(monkeypatch):
    samples = [(np.full((2, 3), i, np.float32), np.array([i, -i])) for i in range(4)]
    reference = torch.utils.data.default_collate([tuple(torch.from_numpy(a) for a in s) for s in samples])

    # every intermediate copy path (torch.tensor, as_tensor, np.array / ascontiguousarray) is forbidden:
    # the only copy left is np.stack writing straight into the batch tensor, once per field
    def forbidden(*a, **k):
        raise AssertionError("extra copy")

    monkeypatch.setattr(torch, "tensor", forbidden)
    monkeypatch.setattr(torch, "as_tensor", forbidden)
    monkeypatch.setattr(np, "ascontiguousarray", forbidden)
    monkeypatch.setattr(np, "array", forbidden)
    stacks = []
    real_stack = np.stack

    def counting_stack(arrays, axis=0, out=None, **kw):
        stacks.append(out)
        return real_stack(arrays, axis=axis, out=out, **kw)

    monkeypatch.setattr(np, "stack", counting_stack)
    batch = zero_copy_collate(samples)
    monkeypatch.undo()
    assert len(stacks) == 2 and all(o is not None for o in stacks)  # one copy per field, into the batch
    assert np.shares_memory(stacks[0], batch[0].numpy()) and np.shares_memory(stacks[1], batch[1].numpy())
    assert torch.equal(batch[0], reference[0]) and torch.equal(batch[1], reference[1])
    assert not any(np.shares_memory(batch[0].numpy(), x) for x, _ in samples)
    # numbers and strings are batched as default_collate does
    mixed = zero_copy_collate([(np.zeros(2), 1, "a"), (np.ones(2), 2, "b")])
    assert mixed[1].tolist() == [1, 2] and mixed[2] == ["a", "b"]


class NumpyImages(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return np.full((3, 4, 4), i, dtype=np.uint8), np.int64(i % 2)


@pytest.mark.timeout(60)
def test_collate_in_a_worker_writes_to_shared_memory():
    dl = DataLoader(NumpyImages(), batch_size=4, num_workers=1, collate_fn=zero_copy_collate)
    batches = list(dl)
    # a batch built in shared memory reaches the main process without another copy
    assert all(b[0].is_shared() for b in batches)
    assert batches[1][0][:, 0, 0, 0].tolist() == [4, 5, 6, 7] and batches[0][0].dtype == torch.uint8
    assert batches[0][1].tolist() == [0, 1, 0, 1]


def test_collate_errors_are_clear():
    with pytest.raises(CollateTypeError, match="one shape"):
        zero_copy_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(CollateTypeError, match="one shape"):
        zero_copy_collate([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(CollateTypeError, match="object"):
        zero_copy_collate([object(), object()])
    with pytest.raises(CollateTypeError, match="non-empty"):
        zero_copy_collate([])
    out = zero_copy_collate([{"a": torch.ones(2), "b": 1.5}, {"a": torch.zeros(2), "b": 2.5}])
    assert out["a"].shape == (2, 2) and out["b"].dtype == torch.float64


# --------------------------------------------------------------------------- device normalisation
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cpu_reference(img_uint8: torch.Tensor) -> torch.Tensor:
    """What a dataset's usual ToTensor + Normalize gives, per sample on the CPU."""
    x = img_uint8.float() / 255.0
    return (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def test_normalize_uint8_equals_cpu_normalisation_and_moves_4x_fewer_bytes():
    g = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (6, 3, 8, 8), generator=g, dtype=torch.uint8)
    on_device = normalize_uint8(imgs, MEAN, STD)
    per_sample = torch.stack([cpu_reference(i) for i in imgs])
    torch.testing.assert_close(on_device, per_sample, rtol=1e-6, atol=1e-6)
    # the same function per sample in the dataset (CPU) and per batch after the transfer: bit for bit equal
    assert torch.equal(
        on_device,
        torch.stack([normalize_uint8(i, MEAN, STD, channel_dim=0) for i in imgs]),
    )
    assert imgs.nbytes * 4 == per_sample.nbytes
    nhwc = normalize_uint8(imgs.permute(0, 2, 3, 1), MEAN, STD, channel_dim=-1)
    torch.testing.assert_close(nhwc.permute(0, 3, 1, 2), per_sample, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="3 channels"):
        normalize_uint8(imgs, (0.5, 0.5), (0.5, 0.5))


def test_normalizer_leaves_labels_and_validates():
    batch = (torch.zeros(2, 3, 2, 2, dtype=torch.uint8), torch.tensor([1, 2]))
    out = DeviceNormalizer(MEAN, STD)(batch)
    assert isinstance(out, tuple) and out[0].dtype == torch.float32 and out[1] is batch[1]
    with pytest.raises(ValueError, match="std"):
        DeviceNormalizer(0.5, 0.0)
    with pytest.raises(TypeError, match="dtype"):
        DeviceNormalizer(0.5, 0.5, dtype=torch.int32)


class UInt8Images(Dataset):
    def __init__(self, n=16):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, 4, 4), generator=g, dtype=torch.uint8)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class ImageModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(48, 2)
        self.train_seen, self.val_seen = [], []

    def training_step(self, batch, batch_idx):
        self.train_seen.append(batch[0].detach().clone())
        return torch.nn.functional.cross_entropy(self.layer(batch[0].flatten(1)), batch[1])

    def validation_step(self, batch, batch_idx):
        self.val_seen.append(batch[0].clone())

    def train_dataloader(self):
        return DataLoader(UInt8Images(), batch_size=4)

    def val_dataloader(self):
        return DataLoader(UInt8Images(8), batch_size=4)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_device_normalize_in_fit_equals_cpu_normalisation_in_every_stage():
    model = ImageModel()
    cb = DeviceNormalize(MEAN, STD)
    trainer(max_steps=2, limit_val_batches=1, val_check_interval=2, callbacks=[cb]).fit(model)
    ds = UInt8Images()
    expected = torch.stack([cpu_reference(ds.x[i]) for i in range(4)])
    assert model.train_seen[0].dtype == torch.float32
    torch.testing.assert_close(model.train_seen[0], expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model.val_seen[0], expected, rtol=1e-6, atol=1e-6)  # same first 4 samples
    assert cb.active and "batch[0]" in cb.status[1]
    assert "on_after_batch_transfer" not in vars(model)  # restored


class DMWithHook(pl.LightningDataModule):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def train_dataloader(self):
        return DataLoader(UInt8Images(), batch_size=4)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.calls += 1
        return batch


def test_device_normalize_wraps_the_datamodule_hook_when_it_has_one():
    model, dm = ImageModel(), DMWithHook()
    trainer(max_steps=1, callbacks=[DeviceNormalize(MEAN, STD)]).fit(model, datamodule=dm)
    assert dm.calls == 1 and model.train_seen[0].dtype == torch.float32
    assert "on_after_batch_transfer" not in vars(dm)


def test_device_normalize_says_when_nothing_was_converted():
    with pytest.warns(UserWarning, match="no uint8 image"):
        trainer(max_steps=1, limit_val_batches=0, callbacks=[DeviceNormalize(0.5, 0.5)]).fit(LoaderModel())
