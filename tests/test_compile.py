"""T22 compile: inner modules compiled in place, eager fallback on failure, state-dict keys unchanged."""

from __future__ import annotations

import copy
import warnings

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks.compile import CompileModules
from lightning_speedups.functional.compile import (
    CompileFallbackWarning,
    compile_modules,
    compile_status,
    uncompile_modules,
)


def broken_backend(gm, example_inputs):
    raise RuntimeError("no luck today\nsecond line that must not appear")


class Net(nn.Module):
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(dropout), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)
        self.loss = nn.CrossEntropyLoss()  # no parameters: stays eager by default

    def forward(self, x):
        return self.head(self.body(x))


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def twins(dropout: float = 0.1):
    torch.manual_seed(0)
    a = Net(dropout)
    return a, copy.deepcopy(a)


def test_default_targets_and_keys():
    plain, comp = twins()
    assert compile_modules(comp, backend="eager") == ["body", "head"]
    assert compile_status(comp) == {"body": "compiled", "head": "compiled"}
    assert list(comp.state_dict()) == list(plain.state_dict())
    assert not any("_orig_mod" in k for k in comp.state_dict())
    # idempotent
    impl = comp.body._compiled_call_impl
    assert compile_modules(comp, backend="eager") == ["body", "head"]
    assert comp.body._compiled_call_impl is impl
    assert sorted(uncompile_modules(comp)) == ["body", "head"]
    assert comp.body._compiled_call_impl is None


def test_builtin_containers_are_really_compiled():
    """``nn.Module.compile`` silently compiles nothing for an ``nn.Sequential`` of built-in layers;
    a failing backend proves that the Sequential's frames do reach the compiler here."""
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compile_modules(nn.Sequential(seq), modules="0", backend=broken_backend, strict=True)
    with pytest.raises(Exception, match="no luck today"):
        seq(torch.randn(2, 4))


def test_fallback_to_eager_warns_once_with_reason():
    plain, comp = twins()
    compile_modules(comp, backend=broken_backend)
    x = torch.randn(5, 8)
    with pytest.warns(CompileFallbackWarning) as record:
        torch.manual_seed(1)
        y1 = comp(x)
    messages = [str(w.message) for w in record if issubclass(w.category, CompileFallbackWarning)]
    assert len(messages) == 2  # one per module: body and head
    assert all("RuntimeError: no luck today" in m and "second line" not in m for m in messages)
    assert compile_status(comp) == {
        "body": "eager: RuntimeError: no luck today",
        "head": "eager: RuntimeError: no luck today",
    }
    torch.manual_seed(1)
    torch.testing.assert_close(y1, plain(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        comp(x)


def test_strict_raises_compiler_error():
    _, comp = twins()
    compile_modules(comp, backend=broken_backend, strict=True)
    with pytest.raises(Exception, match="no luck today"):
        comp(torch.randn(5, 8))


def test_user_error_is_raised_not_swallowed():
    _, comp = twins()
    compile_modules(comp, backend="eager")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as info:
        comp(torch.randn(5, 7))
    assert "torch._dynamo" not in type(info.value).__module__
    assert compile_status(comp)["body"] == "compiled"  # not switched to eager


@pytest.mark.parametrize("train", [True, False])
def test_equal_outputs_and_gradients_aot_eager(train):
    plain, comp = twins()
    compile_modules(comp, backend="aot_eager")
    plain.train(train), comp.train(train)
    x = torch.randn(6, 8)
    outs = []
    for model in (plain, comp):
        torch.manual_seed(1)
        y = model(x)
        y.square().sum().backward()
        outs.append(y)
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=1e-5)
    for (n, a), b in zip(plain.named_parameters(), comp.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-6, rtol=1e-5, msg=n)


def test_state_dict_round_trip_both_ways(tmp_path):
    plain, comp = twins()
    compile_modules(comp, backend="eager")
    torch.manual_seed(9)
    other = Net()
    torch.save(other.state_dict(), tmp_path / "plain.pt")
    comp.load_state_dict(torch.load(tmp_path / "plain.pt"))  # plain -> compiled
    torch.save(comp.state_dict(), tmp_path / "comp.pt")
    plain.load_state_dict(torch.load(tmp_path / "comp.pt"))  # compiled -> plain
    x = torch.randn(3, 8)
    for m in (other, plain, comp):
        m.eval()
    torch.testing.assert_close(comp(x), other(x))
    torch.testing.assert_close(plain(x), other(x))


def test_bad_arguments():
    with pytest.raises(ValueError, match="`mode`"):
        CompileModules(mode="fastest")
    with pytest.raises(ValueError, match="`backend`"):
        CompileModules(backend="no-such-backend")
    with pytest.raises(TypeError, match="`dynamic`"):
        CompileModules(dynamic="yes")
    with pytest.raises(TypeError, match="`fullgraph`"):
        CompileModules(fullgraph=1)
    with pytest.raises(TypeError, match="`modules`"):
        CompileModules(modules=[3.0])
    with pytest.raises(ValueError, match=r"`modules` entry 'encoder' matches no sub-module.*Linear"):
        compile_modules(Net(), modules="encoder", backend="eager")


@pytest.mark.slow
@pytest.mark.parametrize("train", [True, False])
def test_inductor_on_cpu(train):
    """The real backend: inductor generates C++ on CPU (needs a compiler such as gcc). Inductor
    draws dropout masks with its own generator, so this model has no dropout."""
    plain, comp = twins(dropout=0.0)
    compile_modules(comp)  # inductor
    plain.train(train), comp.train(train)
    x = torch.randn(6, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        outs = []
        for model in (plain, comp):
            torch.manual_seed(1)
            y = model(x)
            y.square().sum().backward()
            outs.append(y)
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-4)
    for (n, a), b in zip(plain.named_parameters(), comp.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=n)
    assert compile_status(comp) == {"body": "compiled", "head": "compiled"}


# ------------------------------------------------------------------------------------------------
# the callback
# ------------------------------------------------------------------------------------------------


class Lit(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.net.loss(self.net(x), y)
        self.log("train_loss", loss)  # self.log keeps working: the LightningModule is not compiled
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", self.net.loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(model, callbacks, **kw):
    g = torch.Generator().manual_seed(0)
    data = DataLoader(
        TensorDataset(torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)), batch_size=4
    )
    torch.manual_seed(3)
    trainer = pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **kw,
    )
    trainer.fit(model, data, data)
    return trainer


def test_callback_fits_like_eager(tmp_path):
    torch.manual_seed(0)
    plain = Lit()
    comp = copy.deepcopy(plain)
    cb = CompileModules(backend="aot_eager")
    fit(plain, [])
    trainer = fit(comp, [cb])
    assert cb.status == ("active", "1 modules compiled lazily (net)")
    assert compile_status(comp) == {"net": "compiled"}
    for (n, a), b in zip(plain.state_dict().items(), comp.state_dict().values()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=n)
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    keys = torch.load(tmp_path / "c.ckpt", weights_only=False)["state_dict"].keys()
    assert list(keys) == list(plain.state_dict()) and not any("_orig_mod" in k for k in keys)
    Lit().load_state_dict(torch.load(tmp_path / "c.ckpt", weights_only=False)["state_dict"])


def test_callback_reports_fallback():
    cb = CompileModules(backend=broken_backend)
    with pytest.warns(CompileFallbackWarning, match="no luck today"):
        fit(Lit(), [cb])
    assert (
        cb.status[0] == "skipped" and "1 fell back to eager (net: eager: RuntimeError: no luck today)" in cb.status[1]
    )


def test_callback_strict_raises():
    with pytest.raises(Exception, match="no luck today"):
        fit(Lit(), [CompileModules(backend=broken_backend, strict=True)])


def test_callback_skips_model_without_parameters():
    class NoParams(Lit):
        def __init__(self):
            super().__init__()
            del self.net
            self.w = nn.Parameter(torch.zeros(8, 3))
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return self.loss(x @ self.w, y)

        def validation_step(self, batch, batch_idx):
            pass

    cb = CompileModules(backend="eager")
    fit(NoParams(), [cb])
    assert cb.status == ("skipped", "skipped, the model has no sub-module with parameters to compile")
