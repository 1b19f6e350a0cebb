"""T24 channels-last: model and batch conversion, equal maths, the callback's hook wrapping."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks.channels_last import ChannelsLast
from lightning_speedups.functional.channels_last import (
    batch_to_channels_last,
    channels_last_candidates,
    to_channels_last,
)

CL, CL3 = torch.channels_last, torch.channels_last_3d


def cnn2d() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=2),
        nn.ConvTranspose2d(8, 4, 2, stride=2),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        # dropout on a 4D channels-last activation draws its mask in memory order (same
        # distribution, different elements): placed after Flatten, masks match exactly
        nn.Dropout(0.3),
        nn.Linear(16, 3),
    )


def cnn3d() -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(2, 6, 3, padding=1),
        nn.BatchNorm3d(6),
        nn.ReLU(),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(6, 2),
    )


def twins(factory):
    torch.manual_seed(0)
    a = factory()
    b = factory()
    b.load_state_dict(a.state_dict())
    return a, b


def test_model_conversion_and_idempotence():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv3d(4, 4, 2), nn.Linear(4, 4))
    assert channels_last_candidates(m) == ["0", "1"]
    assert to_channels_last(m) is m
    assert m[0].weight.is_contiguous(memory_format=CL) and not m[0].weight.is_contiguous()
    assert m[1].weight.is_contiguous(memory_format=CL3) and not m[1].weight.is_contiguous()
    assert m[2].weight.is_contiguous()
    assert isinstance(m[0].weight, nn.Parameter)
    before = m[0].weight
    to_channels_last(m)
    assert m[0].weight is before  # the same Parameter object: optimizers keep working


def test_no_convolution_warns_and_changes_nothing():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.warns(UserWarning, match="no 4D/5D convolution"):
        assert to_channels_last(m) is m
    assert all(torch.equal(sd[k], v) for k, v in m.state_dict().items())
    with pytest.raises(TypeError, match="`model`"):
        to_channels_last("not a model")


@pytest.mark.parametrize("factory,shape,fmt", [(cnn2d, (4, 3, 8, 8), CL), (cnn3d, (2, 2, 4, 6, 6), CL3)])
@pytest.mark.parametrize("train", [True, False])
def test_equal_outputs_and_gradients(factory, shape, fmt, train):
    plain, conv = twins(factory)
    to_channels_last(conv)
    plain.train(train)
    conv.train(train)
    x = torch.randn(*shape)
    xc = batch_to_channels_last(x)
    assert xc.is_contiguous(memory_format=fmt) and torch.equal(xc, x)
    torch.manual_seed(1)
    y0 = plain(x)
    torch.manual_seed(1)
    y1 = conv(xc)
    torch.testing.assert_close(y1, y0, atol=1e-5, rtol=1e-4)
    y0.square().sum().backward()
    y1.square().sum().backward()
    for (name, p0), p1 in zip(plain.named_parameters(), conv.parameters()):
        torch.testing.assert_close(p1.grad, p0.grad, atol=1e-5, rtol=1e-4, msg=name)
    for (name, b0), b1 in zip(plain.named_buffers(), conv.buffers()):
        torch.testing.assert_close(b1, b0, atol=1e-6, rtol=1e-5, msg=name)


Pair = namedtuple("Pair", ["image", "label"])


@dataclasses.dataclass
class Sample:
    video: torch.Tensor
    target_mask: torch.Tensor
    ids: torch.Tensor
    note: str = "x"


def test_nested_batches():
    img = torch.rand(2, 3, 4, 4)
    vid = torch.rand(2, 3, 2, 4, 4)
    label = torch.randint(0, 3, (2, 1, 4, 4))
    fmask = torch.rand(2, 1, 4, 4)
    batch = {
        "image": img,
        "mask": fmask,
        "labels": label,
        "pair": Pair(img, fmask),
        "list": [img, (vid, torch.rand(2, 3))],
        "sample": Sample(vid, fmask, label),
        "flag": torch.ones(2, 1, 4, 4, dtype=torch.bool),
    }
    out = batch_to_channels_last(batch)
    assert out["image"].is_contiguous(memory_format=CL) and not out["image"].is_contiguous()
    assert out["mask"] is fmask and out["labels"] is label and out["flag"] is batch["flag"]
    assert isinstance(out["pair"], Pair) and out["pair"].image.is_contiguous(memory_format=CL)
    assert out["pair"].label is fmask  # field named "label" left alone
    assert out["list"][0].is_contiguous(memory_format=CL)
    assert isinstance(out["list"][1], tuple) and out["list"][1][0].is_contiguous(memory_format=CL3)
    assert isinstance(out["sample"], Sample) and out["sample"].video.is_contiguous(memory_format=CL3)
    assert out["sample"].target_mask is fmask and out["sample"].ids is label
    for a, b in [(out["image"], img), (out["sample"].video, vid)]:
        assert torch.equal(a, b)
    assert batch["image"].is_contiguous() and batch["sample"].video.is_contiguous()  # input not modified
    # an integer 4D tensor alone is left alone; exclude_keys can be changed
    assert batch_to_channels_last(label) is label
    assert batch_to_channels_last({"mask": fmask}, exclude_keys=())["mask"].is_contiguous(memory_format=CL)
    with pytest.raises(TypeError, match="exclude_keys"):
        batch_to_channels_last(batch, exclude_keys="mask")


# ------------------------------------------------------------------------------------------------
# the callback
# ------------------------------------------------------------------------------------------------


class Recorder(pl.LightningModule):
    def __init__(self, net: nn.Module | None = None, user_hook: bool = False):
        super().__init__()
        self.net = net if net is not None else cnn2d()
        self.user_hook = user_hook
        self.formats: list[tuple[str, bool, bool]] = []

    def forward(self, x):
        return self.net(x)

    def _record(self, stage, batch):
        x, y = batch
        self.formats.append((stage, x.is_contiguous(memory_format=CL), y.is_contiguous()))

    def training_step(self, batch, batch_idx):
        self._record("train", batch)
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        self._record("val", batch)

    def predict_step(self, batch, batch_idx):
        self._record("predict", batch)
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class HookedRecorder(Recorder):
    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x * 2.0, y  # the user's hook runs first: a fresh contiguous tensor


def loader(n=8):
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)), batch_size=4
    )


def trainer(**kw):
    args = dict(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    args.update(kw)
    return pl.Trainer(**args)


@pytest.mark.parametrize("cls", [Recorder, HookedRecorder])
def test_callback_converts_model_and_batches(cls):
    model = cls()
    cb = ChannelsLast()
    t = trainer(callbacks=[cb])
    t.fit(model, loader(), loader())
    assert cb.active and "channels_last" in cb.status[1]
    assert model.net[0].weight.is_contiguous(memory_format=CL)
    stages = {s for s, _, _ in model.formats}
    assert {"train", "val"} <= stages
    assert all(is_cl for _, is_cl, _ in model.formats), model.formats
    assert "on_after_batch_transfer" not in model.__dict__  # teardown restored the hook
    model.formats.clear()
    t.predict(model, loader())
    assert model.formats and all(is_cl for _, is_cl, _ in model.formats)


@pytest.mark.parametrize("dm_hook", [True, False])
def test_callback_with_datamodule(dm_hook, recwarn):
    calls = []

    class DM(pl.LightningDataModule):
        def train_dataloader(self):
            return loader()

    if dm_hook:

        def on_after_batch_transfer(self, batch, dataloader_idx):
            calls.append(dataloader_idx)
            return batch

        DM.on_after_batch_transfer = on_after_batch_transfer

    model = Recorder()
    trainer(callbacks=[ChannelsLast()], limit_val_batches=0).fit(model, datamodule=DM())
    assert len(calls) == (2 if dm_hook else 0)  # Lightning still picked the same hook as without the callback
    assert model.formats and all(is_cl for _, is_cl, _ in model.formats)
    # the wrapper must not look like an override of the LightningModule's hook
    assert not [w for w in recwarn if "on_after_batch_transfer" in str(w.message)]


def test_callback_matches_plain_training():
    torch.manual_seed(0)
    plain = Recorder()
    conv = Recorder()
    conv.load_state_dict(plain.state_dict())
    torch.manual_seed(1)
    trainer(limit_val_batches=0).fit(plain, loader())
    torch.manual_seed(1)
    trainer(callbacks=[ChannelsLast()], limit_val_batches=0).fit(conv, loader())
    for (name, a), b in zip(plain.state_dict().items(), conv.state_dict().values()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=name)


def test_callback_skips_model_without_convolutions(caplog):
    class MLP(Recorder):
        def training_step(self, batch, batch_idx):
            x, y = batch
            self._record("train", batch)
            return nn.functional.cross_entropy(self(x.flatten(1)), y)

    model = MLP(nn.Sequential(nn.Linear(3 * 64, 3)))
    cb = ChannelsLast()
    trainer(callbacks=[cb], limit_val_batches=0).fit(model, loader())
    assert cb.status == ("skipped", "skipped, model has no 4D/5D convolutions")
    assert model.formats and not any(is_cl for _, is_cl, _ in model.formats)
    assert "on_after_batch_transfer" not in model.__dict__


def test_callback_argument_validation():
    with pytest.raises(TypeError, match="exclude_keys"):
        ChannelsLast(exclude_keys="mask")
    with pytest.raises(TypeError, match="exclude_keys"):
        ChannelsLast(exclude_keys=[1])
