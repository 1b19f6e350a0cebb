"""T09 activation checkpointing: equal maths, state-dict keys, target matching, DDP, compile, callback."""

from __future__ import annotations

import copy
import pickle

import lightning.pytorch as pl
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks.checkpointing import ActivationCheckpointing
from lightning_speedups.functional.checkpointing import (
    auto_checkpoint_targets,
    checkpoint_modules,
    is_checkpointed,
    uncheckpoint_modules,
)


class Block(nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return x + self.drop(torch.relu(self.bn(self.conv(x))))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.stage1 = nn.Sequential(Block(), Block())
        self.stage2 = nn.Sequential(Block(), Block(), Block())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))

    def forward(self, x):
        return self.head(self.stage2(self.stage1(self.stem(x))))


class TinyTransformer(nn.Module):
    def __init__(self, d: int = 16, layers: int = 3):
        super().__init__()
        self.embed = nn.Embedding(20, d)
        layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d, 20)

    def forward(self, tokens):
        return self.out(self.encoder(self.embed(tokens)))


def twins(factory):
    torch.manual_seed(0)
    a = factory()
    b = copy.deepcopy(a)
    return a, b


def inputs(factory):
    g = torch.Generator().manual_seed(3)
    if factory is TinyTransformer:
        return torch.randint(0, 20, (4, 7), generator=g)
    return torch.randn(4, 3, 8, 8, generator=g)


def step(model, x, seed=1):
    torch.manual_seed(seed)
    y = model(x)
    y.float().square().mean().backward()
    return y


def assert_same(plain, wrapped, y0, y1):
    torch.testing.assert_close(y1, y0, atol=1e-6, rtol=1e-5)
    for (name, p0), p1 in zip(plain.named_parameters(), wrapped.parameters()):
        assert (p0.grad is None) == (p1.grad is None), name
        if p0.grad is not None:
            torch.testing.assert_close(p1.grad, p0.grad, atol=1e-6, rtol=1e-5, msg=name)
    for (name, b0), b1 in zip(plain.named_buffers(), wrapped.buffers()):  # BN statistics updated once
        torch.testing.assert_close(b1, b0, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("factory", [ResNetish, TinyTransformer])
@pytest.mark.parametrize("train", [True, False])
def test_equal_outputs_gradients_and_buffers(factory, train):
    plain, wrapped = twins(factory)
    names = checkpoint_modules(wrapped, "auto")
    assert names
    plain.train(train)
    wrapped.train(train)
    x = inputs(factory)
    assert_same(plain, wrapped, step(plain, x), step(wrapped, x))


def saved_bytes(model, x):
    """Bytes that autograd keeps for the backward pass (activation memory)."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).square().mean().backward()
    return total


@pytest.mark.parametrize("factory", [ResNetish, TinyTransformer])
def test_activation_memory_drops(factory):
    plain, wrapped = twins(factory)
    checkpoint_modules(wrapped, "auto")
    x = inputs(factory)
    full, ckpt = saved_bytes(plain, x), saved_bytes(wrapped, x)
    assert ckpt < 0.7 * full, (ckpt, full)


def test_auto_picks_repeated_blocks():
    assert [n for n, _ in auto_checkpoint_targets(ResNetish())] == [
        "stage1.0",
        "stage1.1",
        "stage2.0",
        "stage2.1",
        "stage2.2",
    ]
    assert [n for n, _ in auto_checkpoint_targets(TinyTransformer())] == [
        "encoder.layers.0",
        "encoder.layers.1",
        "encoder.layers.2",
    ]
    # a Sequential of plain layers holds no blocks
    assert auto_checkpoint_targets(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) == []


@pytest.mark.parametrize(
    "targets,expected",
    [
        (Block, ["stage1.0", "stage1.1", "stage2.0", "stage2.1", "stage2.2"]),
        ("Block", ["stage1.0", "stage1.1", "stage2.0", "stage2.1", "stage2.2"]),
        (f"{Block.__module__}.Block", ["stage1.0", "stage1.1", "stage2.0", "stage2.1", "stage2.2"]),
        ("stage2.*", ["stage2.0", "stage2.1", "stage2.2"]),  # outermost only: not stage2.0.conv
        ("re:stage[12]\\.0", ["stage1.0", "stage2.0"]),
        (["stage1", nn.Conv2d], ["stem.0", "stage1", "stage2.0.conv", "stage2.1.conv", "stage2.2.conv"]),
    ],
)
def test_targets(targets, expected):
    model = ResNetish()
    assert checkpoint_modules(model, targets) == expected
    wrapped = {n for n, m in model.named_modules() if is_checkpointed(m)}
    assert wrapped == set(expected)


def test_idempotent_and_undo():
    model = ResNetish()
    first = checkpoint_modules(model, "auto")
    fwd = model.stage1[0].forward
    assert checkpoint_modules(model, "auto") == first
    assert model.stage1[0].forward is fwd  # not wrapped twice
    assert type(model.stage1[0]) is Block  # the class is unchanged
    assert sorted(uncheckpoint_modules(model)) == sorted(first)
    assert not any(is_checkpointed(m) for m in model.modules())
    assert "forward" not in model.stage1[0].__dict__


def test_state_dict_keys_and_loading_both_ways(tmp_path):
    plain, wrapped = twins(ResNetish)
    checkpoint_modules(wrapped, "auto")
    assert list(plain.state_dict()) == list(wrapped.state_dict())
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in wrapped.named_parameters()]
    # plain -> wrapped
    torch.manual_seed(5)
    other = ResNetish()
    torch.save(other.state_dict(), tmp_path / "plain.pt")
    wrapped.load_state_dict(torch.load(tmp_path / "plain.pt"))
    # wrapped -> plain
    torch.save(wrapped.state_dict(), tmp_path / "wrapped.pt")
    plain.load_state_dict(torch.load(tmp_path / "wrapped.pt"))
    x = inputs(ResNetish)
    other.eval(), plain.eval(), wrapped.eval()
    torch.testing.assert_close(wrapped(x), other(x))
    torch.testing.assert_close(plain(x), other(x))


def test_copy_and_pickle_keep_the_wrapping():
    model = ResNetish()
    checkpoint_modules(model, "auto")
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert is_checkpointed(clone.stage1[0])
        assert clone.stage1[0].forward.module is clone.stage1[0]


def test_bad_targets():
    model = ResNetish()
    with pytest.raises(ValueError, match=r"`targets` entry 'Attention' matches no sub-module.*Block"):
        checkpoint_modules(model, ["Block", "Attention"])
    assert not any(is_checkpointed(m) for m in model.modules())  # nothing changed
    with pytest.raises(TypeError, match="`targets`"):
        checkpoint_modules(model, [3])
    with pytest.raises(TypeError, match="`targets`.*not an nn.Module"):
        checkpoint_modules(model, int)
    with pytest.raises(ValueError, match="`targets` is empty"):
        checkpoint_modules(model, [])
    with pytest.raises(ValueError, match="regular expression"):
        checkpoint_modules(model, "re:(")


def test_no_grad_runs_plain_forward():
    model = ResNetish().eval()
    checkpoint_modules(model, "auto")
    with torch.no_grad():
        y = model(inputs(ResNetish))
    assert not y.requires_grad


def test_ddp_single_process(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        plain, wrapped = twins(TinyTransformer)
        checkpoint_modules(wrapped, "auto")
        ddp_plain = nn.parallel.DistributedDataParallel(plain)
        ddp_wrapped = nn.parallel.DistributedDataParallel(wrapped)
        x = inputs(TinyTransformer)
        for _ in range(2):  # DDP reducer state over two iterations
            y0, y1 = step(ddp_plain, x), step(ddp_wrapped, x)
        assert_same(plain, wrapped, y0, y1)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("order", ["checkpoint_then_compile", "compile_then_checkpoint"])
def test_with_torch_compile(order):
    torch._dynamo.reset()
    plain, wrapped = twins(ResNetish)
    if order == "checkpoint_then_compile":
        checkpoint_modules(wrapped, "auto")
        runner = torch.compile(wrapped, backend="aot_eager")
    else:
        for block in wrapped.stage2:
            block.compile(backend="aot_eager")
        checkpoint_modules(wrapped, "auto")
        runner = wrapped
    x = inputs(ResNetish)
    assert_same(plain, wrapped, step(plain, x), step(runner, x))


# ------------------------------------------------------------------------------------------------
# the callback
# ------------------------------------------------------------------------------------------------


class LitTransformer(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = TinyTransformer()

    def training_step(self, batch, batch_idx):
        (tokens,) = batch
        logits = self.model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def fit(callbacks, model):
    data = DataLoader(
        TensorDataset(torch.randint(0, 20, (16, 7), generator=torch.Generator().manual_seed(0))), batch_size=4
    )
    torch.manual_seed(7)
    pl.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    ).fit(model, data)
    return model


def test_callback_trains_like_plain():
    torch.manual_seed(0)
    plain = LitTransformer()
    wrapped = copy.deepcopy(plain)
    cb = ActivationCheckpointing()
    fit([], plain)
    fit([cb], wrapped)
    assert cb.active and cb.status[1].startswith("3 modules checkpointed (model.encoder.layers.0")
    assert is_checkpointed(wrapped.model.encoder.layers[0])
    for (name, a), b in zip(plain.state_dict().items(), wrapped.state_dict().values()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=name)


def test_callback_errors_and_skips():
    with pytest.raises(ValueError, match=r"`targets` entry 'Nope'.*TransformerEncoderLayer"):
        fit([ActivationCheckpointing(["Nope"])], LitTransformer())
    with pytest.raises(TypeError, match="`targets`"):
        ActivationCheckpointing(42)

    class Flat(LitTransformer):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 20))

    cb = ActivationCheckpointing("auto")
    fit([cb], Flat())
    assert cb.status[0] == "skipped" and "no repeated blocks" in cb.status[1]
