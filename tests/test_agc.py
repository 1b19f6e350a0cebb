"""Tests of T15 adaptive gradient clipping: the formula, exclusion, mixed precision, accumulation."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_speedups.callbacks.agc as agc_callback_module
from lightning_speedups.callbacks.agc import AdaptiveGradientClipping
from lightning_speedups.functional.agc import adaptive_clip_grad_, agc_parameters, unitwise_norm


def reference_agc(param: torch.Tensor, grad: torch.Tensor, clipping: float, eps: float) -> torch.Tensor:
    """The formula written out unit by unit, in float64, with plain Python control flow."""
    p, g = param.detach().double(), grad.detach().double()
    out = g.clone()
    if p.ndim <= 1:
        units = [(...,)]
    else:
        units = [(i,) for i in range(p.shape[0])]
    for idx in units:
        w_norm = p[idx].norm().item()
        g_norm = g[idx].norm().item()
        max_norm = max(w_norm, eps) * clipping
        if g_norm > max_norm:
            out[idx] = g[idx] * (max_norm / g_norm)
    return out


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.zero = nn.Linear(4, 3)  # zero-initialised: every unit has weight norm 0
        nn.init.zeros_(self.zero.weight)
        nn.init.zeros_(self.zero.bias)
        self.fc = nn.Linear(3, 2)
        self.gain = nn.Parameter(torch.ones(()))  # a 0-D parameter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).mean(dim=(2, 3))
        return self.fc(self.zero(h) * self.gain + h[:, :3])


def _grads(net: nn.Module, scale: float = 100.0) -> None:
    torch.manual_seed(0)
    net.zero_grad()
    (net(torch.randn(5, 2, 6, 6)) * scale).pow(2).sum().backward()


@pytest.mark.parametrize("clipping", [0.01, 0.5])
def test_functional_matches_direct_formula(clipping: float) -> None:
    torch.manual_seed(0)
    net = Net()
    _grads(net)
    before = {n: p.grad.clone() for n, p in net.named_parameters()}
    expected = {n: reference_agc(p, before[n], clipping, 1e-3) for n, p in net.named_parameters()}
    # the zero-norm unit really is at the eps floor and its gradient really is clipped
    assert net.zero.weight.grad.norm() > clipping * 1e-3
    adaptive_clip_grad_(net.parameters(), clipping=clipping, eps=1e-3)
    for n, p in net.named_parameters():
        torch.testing.assert_close(p.grad.double(), expected[n], rtol=1e-5, atol=1e-12, msg=n)
    # zero-norm parameter: every unit's gradient is now at most clipping * eps
    assert (unitwise_norm(net.zero.weight.grad) <= clipping * 1e-3 * (1 + 1e-5)).all()
    assert net.zero.weight.grad.abs().sum() > 0  # eps keeps it from being zeroed
    # something was clipped and something was not (clipping=0.5 leaves some units alone)
    changed = [not torch.equal(p.grad, before[n]) for n, p in net.named_parameters()]
    assert any(changed)


def test_functional_leaves_small_gradients_and_none() -> None:
    lin = nn.Linear(3, 2)
    lin.weight.grad = torch.full_like(lin.weight, 1e-6)
    before = lin.weight.grad.clone()
    adaptive_clip_grad_([lin.weight, lin.bias], clipping=0.01)  # bias has no grad: skipped
    assert torch.equal(lin.weight.grad, before)
    assert lin.bias.grad is None


def test_functional_rejects_bad_arguments() -> None:
    lin = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="clipping"):
        adaptive_clip_grad_(lin.parameters(), clipping=0)
    with pytest.raises(ValueError, match="eps"):
        adaptive_clip_grad_(lin.parameters(), eps=-1.0)


def test_agc_parameters_exclusion_patterns() -> None:
    net = nn.Sequential()
    net.add_module("fc1", nn.Linear(2, 2))
    head = nn.Sequential()
    head.add_module("fc", nn.Linear(2, 2))
    net.add_module("head", head)
    params, excluded = agc_parameters(net, exclude=["fc"])
    assert excluded == ["head.fc.weight", "head.fc.bias"]  # "fc" does not match "fc1"
    assert {id(p) for p in params} == {id(net.fc1.weight), id(net.fc1.bias)}
    assert agc_parameters(net, exclude=["head.*"])[1] == ["head.fc.weight", "head.fc.bias"]
    assert agc_parameters(net, exclude=None)[1] == []


class LitNet(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return (self.net(x) * 100).pow(2).mean()

    def train_dataloader(self):
        torch.manual_seed(1)
        return DataLoader(TensorDataset(torch.randn(16, 2, 6, 6)), batch_size=4)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)  # lr 0: weights stay, formula stays checkable


class Capture(Callback):
    """Records the gradients at ``on_before_optimizer_step``; placed before or after AGC."""

    def __init__(self) -> None:
        self.grads: list[dict[str, torch.Tensor]] = []
        self.params: list[dict[str, torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads.append({n: p.grad.detach().clone() for n, p in pl_module.named_parameters()})
        self.params.append({n: p.detach().clone() for n, p in pl_module.named_parameters()})


def _trainer(callbacks, **kwargs) -> Trainer:
    defaults = dict(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    defaults.update(kwargs)
    return Trainer(callbacks=callbacks, **defaults)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_callback_clips_like_the_formula_and_skips_excluded(precision: str) -> None:
    before, after = Capture(), Capture()
    agc = AdaptiveGradientClipping(clipping=0.02, exclude=["fc"])
    _trainer([before, agc, after], precision=precision).fit(LitNet())
    assert agc.excluded_names == ["net.fc.weight", "net.fc.bias"]
    assert agc.status is not None and agc.status[0] == "active" and "net.fc.weight" in agc.status[1]
    assert len(before.grads) == len(after.grads) == 2
    clipped_something = False
    for g0, g1, params in zip(before.grads, after.grads, before.params):
        for name, g in g0.items():
            if name.startswith("net.fc."):
                assert torch.equal(g1[name], g), name  # excluded: untouched
                continue
            expected = reference_agc(params[name], g, 0.02, 1e-3)
            torch.testing.assert_close(g1[name].double(), expected, rtol=1e-5, atol=1e-12, msg=name)
            clipped_something |= not torch.equal(g1[name], g)
    assert clipped_something


def test_callback_runs_once_per_optimizer_step_with_accumulation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = agc_callback_module.adaptive_clip_grad_

    def counting(params, **kwargs):
        calls.append(len(params))
        return real(params, **kwargs)

    monkeypatch.setattr(agc_callback_module, "adaptive_clip_grad_", counting)
    batches: list[int] = []

    class CountBatches(Callback):
        def on_train_batch_end(self, *args, **kwargs):
            batches.append(1)

    _trainer([AdaptiveGradientClipping(exclude=None), CountBatches()], accumulate_grad_batches=2).fit(LitNet())
    assert len(batches) == 4  # 2 optimizer steps x 2 micro-batches
    assert len(calls) == 2  # clipped once per optimizer step, on the accumulated gradient
    assert calls[0] == len(list(LitNet().parameters()))


def test_callback_warns_when_nothing_is_excluded() -> None:
    with pytest.warns(UserWarning, match="no parameter matches exclude"):
        _trainer([AdaptiveGradientClipping(exclude=["classifier"])], max_steps=1).fit(LitNet())


def test_callback_validates_arguments() -> None:
    with pytest.raises(ValueError, match="`clipping`"):
        AdaptiveGradientClipping(clipping=-0.1)
    with pytest.raises(ValueError, match="`eps`"):
        AdaptiveGradientClipping(eps=-1)
    with pytest.raises(TypeError, match="`exclude`"):
        AdaptiveGradientClipping(exclude=[1, 2])  # type: ignore[list-item]


class SmallLoss(LitNet):
    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x).pow(2).mean() * 1e-3  # small: no fp16 overflow at the GradScaler's first scale


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="16-mixed with a GradScaler needs CUDA")
def test_callback_sees_unscaled_gradients_under_fp16_mixed() -> None:
    before, after = Capture(), Capture()
    model = SmallLoss()
    reference = Net()
    reference.load_state_dict(model.net.state_dict())
    agc = AdaptiveGradientClipping(clipping=1e-4, exclude=["fc"])
    _trainer([before, agc, after], accelerator="cuda", devices=1, precision="16-mixed", max_steps=1).fit(model)
    (x,) = next(iter(SmallLoss().train_dataloader()))
    (reference(x).pow(2).mean() * 1e-3).backward()
    for name, p in reference.named_parameters():
        g = before.grads[0]["net." + name].float().cpu()
        assert torch.isfinite(g).all(), name
        ratio = (g.norm() / p.grad.norm()).item()
        assert 0.5 < ratio < 2.0, (name, ratio)  # unscaled: a still-scaled gradient would be ~65536x larger
    for name, g in before.grads[0].items():
        expected = reference_agc(before.params[0][name], g, 1e-4, 1e-3)
        if name.startswith("net.fc."):
            expected = g.double()
        torch.testing.assert_close(after.grads[0][name].double(), expected, rtol=1e-5, atol=1e-12, msg=name)
