"""Tests of T16 conv-bias: functional surgery, checkpoints and the ConvBiasRemoval callback."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.nn import functional as F

from lightning_speedups.callbacks.conv_bias import ConvBiasRemoval
from lightning_speedups.functional.conv_bias import (
    apply_conv_bias_plan,
    fold_conv_bias_state_dict,
    plan_conv_bias_removal,
    remove_conv_bias,
    unfold_conv_bias_state_dict,
)

# ------------------------------------------------------------------------------------------ models


def plain_stack() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=4, padding_mode="reflect"),  # grouped
        nn.BatchNorm2d(8, momentum=None),  # cumulative average
        nn.ReLU(),
        nn.ConvTranspose2d(8, 6, 2, stride=2),
        nn.BatchNorm2d(6, affine=False),
        nn.ReLU(),
        nn.Conv2d(6, 6, 1),
        nn.BatchNorm2d(6, track_running_stats=False),  # batch statistics in eval too
        nn.Conv2d(6, 4, 1),  # head: no BatchNorm, keeps its bias
    )


def conv1d_stack() -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(2, 6, 3), nn.BatchNorm1d(6), nn.ReLU(), nn.ConvTranspose1d(6, 4, 3), nn.SyncBatchNorm(4)
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential(nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))  # BN output feeds the add: fine


class LeakyBlock(nn.Module):
    """A conv whose OUTPUT feeds both a BatchNorm and the residual add: must keep its bias."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.conv(x)
        return F.relu(self.bn(y)) + y


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.layer = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16), LeakyBlock(16))
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(self.layer(self.stem(x)).mean((2, 3)))


class SEBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.reduce = nn.Conv2d(c, c // 4, 1)  # biased, feeds ReLU
        self.expand = nn.Conv2d(c // 4, c, 1)  # biased, feeds sigmoid

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        s = torch.sigmoid(self.expand(F.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        return y * s


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, 4 * growth, 1)  # feeds bn2 only: removable
        self.bn2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1)  # feeds the concat: keeps

    def forward(self, x):
        y = self.conv1(F.relu(self.bn1(x)))
        return self.conv2(F.relu(self.bn2(y)))


class DenseBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)  # output is concatenated, then BN'd: keeps
        self.layers = nn.ModuleList([DenseLayer(8, 4), DenseLayer(12, 4)])
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        feats = [self.stem(x)]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, 1)))
        return self.bn(torch.cat(feats, 1))


class Inception(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
        self.b2 = nn.Sequential(
            nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6)
        )
        self.b3 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2))
        self.b4 = nn.Conv2d(3, 2, 1)  # plain branch: keeps

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class Video3D(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.spatial = nn.Conv3d(3, 6, (1, 3, 3), padding=(0, 1, 1))
        self.bn_s = nn.BatchNorm3d(6)
        self.temporal = nn.Conv3d(6, 8, (3, 1, 1), padding=(1, 0, 0), groups=2)
        self.bn_t = nn.BatchNorm3d(8)
        self.up = nn.ConvTranspose3d(8, 4, 2, stride=2)
        self.bn_u = nn.BatchNorm3d(4)

    def forward(self, x):
        x = F.relu(self.bn_s(self.spatial(x)))
        x = F.relu(self.bn_t(self.temporal(x)))
        return self.bn_u(self.up(x))


class ConvTwice(nn.Module):
    """The same conv on two inputs; one output skips the BatchNorm: keeps its bias."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)) + self.conv(x.flip(-1))


class ConvTwiceSameBN(nn.Module):
    """The same conv->BN pair applied twice: every conv output goes straight into the BN (removable)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(F.relu(self.bn(self.conv(x)))))


class BNElsewhere(nn.Module):
    """The BatchNorm also normalises the raw input: the conv keeps its bias."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(x)) + self.bn(x)


class RegistrationOrderTrap(nn.Module):
    """conv registered right before bn, but the data flow puts a ReLU between them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(F.relu(self.conv(x)))


class DataDependentBlock(nn.Module):
    """Untraceable forward (data-dependent branch) with the safe source patterns and an unsafe one."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)
        self.conv3 = nn.Conv2d(c, c, 1)
        self.bn3 = nn.BatchNorm2d(c)
        self.inner = nn.Sequential(nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU())  # traceable unit

    def forward(self, x):
        out = self.conv1(x)
        out = self.bn1(out)
        if out.abs().mean() > 0.1:  # data-dependent (and numerically stable): fx cannot trace it
            out = F.relu(self.bn2(self.conv2(out)))
        y = self.conv3(out)
        out = self.bn3(y) + y  # unsafe: conv3's output also feeds the add
        return self.inner(out)


class DataDependentNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.side = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4))  # reached into below
        self.block = DataDependentBlock(4)

    def forward(self, x):
        x0 = self.stem(x)
        if x0.sum() > 0:
            x0 = x0 * 2
        side = self.side[0](x)  # reaches into `side`: its conv must keep its bias
        return self.block(x0) + self.side[1](side) + side


def _all_models():
    return {
        "plain": (plain_stack, (4, 3, 8, 8), ["0", "3", "6", "9"], ["11"]),
        "conv1d": (conv1d_stack, (4, 2, 10), ["0", "3"], []),
        "resnet": (
            ResNet,
            (4, 3, 8, 8),
            ["stem.0"] + [f"layer.{i}.{n}" for i in (0, 1) for n in ("conv1", "conv2", "short.0")],
            ["layer.2.conv"],
        ),
        "se": (lambda: SEBlock(8), (4, 8, 6, 6), ["conv"], ["reduce", "expand"]),
        "dense": (
            DenseBlock,
            (4, 3, 6, 6),
            ["layers.0.conv1", "layers.1.conv1"],
            ["stem", "layers.0.conv2", "layers.1.conv2"],
        ),
        "inception": (Inception, (4, 3, 6, 6), ["b1.0", "b2.0", "b2.3", "b3.1"], ["b4"]),
        "video": (Video3D, (2, 3, 4, 6, 6), ["spatial", "temporal", "up"], []),
        "conv_twice": (ConvTwice, (4, 3, 6, 6), [], ["conv"]),
        "conv_twice_same_bn": (ConvTwiceSameBN, (4, 3, 6, 6), ["conv"], []),
        "bn_elsewhere": (BNElsewhere, (4, 3, 6, 6), [], ["conv"]),
        "order_trap": (RegistrationOrderTrap, (4, 3, 6, 6), [], ["conv"]),
        "data_dependent": (
            DataDependentNet,
            (4, 3, 6, 6),
            ["stem.0", "block.conv1", "block.conv2", "block.inner.0"],
            ["side.0", "block.conv3"],
        ),
    }


# ------------------------------------------------------------------------------------------ helpers


def _warm(model: nn.Module, shape, steps: int = 2) -> None:
    """Give the model non-trivial running statistics and non-zero biases."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.conv._ConvNd) and m.bias is not None:
                m.bias.uniform_(-1.0, 1.0)
        model.train()
        for _ in range(steps):
            model(torch.randn(shape) + 0.5)


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _fwd_bwd(model: nn.Module, x: torch.Tensor, proj: torch.Tensor | None = None):
    model.zero_grad(set_to_none=True)
    out = model(x)
    if proj is None:
        proj = torch.randn_like(out)
    (out * proj).sum().backward()
    return out.detach(), _grads(model), proj


def _assert_equal_maths(ref: nn.Module, new: nn.Module, shape, removed: list[str]) -> None:
    x = torch.randn(shape)
    for mode in (True, False):
        ref.train(mode)
        new.train(mode)
        out_r, g_r, proj = _fwd_bwd(ref, x)
        out_n, g_n, _ = _fwd_bwd(new, x, proj)
        torch.testing.assert_close(out_n, out_r, rtol=1e-4, atol=1e-4)
        assert set(g_n) == set(g_r) - {f"{c}.bias" for c in removed}
        for name, g in g_n.items():
            torch.testing.assert_close(g, g_r[name], rtol=1e-3, atol=1e-4, msg=f"grad of {name} (train={mode})")
        if mode:  # the removed bias is dead weight in train mode
            for c in removed:
                if f"{c}.bias" in g_r:  # (absent when a data-dependent branch skipped the conv)
                    assert g_r[f"{c}.bias"].abs().max() < 1e-3


def _assert_stats_track(ref: nn.Module, new: nn.Module, pairs: dict[str, str]) -> None:
    sd_r, sd_n = ref.state_dict(), new.state_dict()
    for key, val in sd_n.items():
        if key.endswith("running_mean"):
            bn = key[: -len(".running_mean")]
            shift = sum((sd_r[f"{c}.bias"] for c, b in pairs.items() if b == bn), torch.zeros_like(val))
            torch.testing.assert_close(val, sd_r[key] - shift, rtol=1e-4, atol=1e-4)
        else:
            torch.testing.assert_close(val, sd_r[key], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------ functional


@pytest.mark.parametrize("name", list(_all_models()))
def test_equal_outputs_and_grads(name):
    make, shape, expect_removed, expect_kept = _all_models()[name]
    torch.manual_seed(0)
    ref = make()
    _warm(ref, shape)
    new = copy.deepcopy(ref)
    n_before = sum(p.numel() for p in new.parameters())
    plan = plan_conv_bias_removal(new)
    removed = remove_conv_bias(new)
    assert sorted(removed) == sorted(expect_removed), plan.skipped
    for kept in expect_kept:
        assert new.get_submodule(kept).bias is not None
        assert kept in plan.skipped and plan.skipped[kept]
    n_removed = sum(new.get_submodule(c).out_channels for c in removed)
    assert sum(p.numel() for p in new.parameters()) == n_before - n_removed
    _assert_equal_maths(ref, new, shape, removed)
    # several SGD steps in train mode: running statistics keep tracking, eval outputs stay equal
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt_n = torch.optim.SGD(new.parameters(), lr=0.05)
    for _ in range(3):
        x = torch.randn(shape)
        for model, opt in ((ref, opt_r), (new, opt_n)):
            model.train()
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    _assert_stats_track(ref, new, plan.pairs)
    _assert_equal_maths(ref, new, shape, removed)
    # idempotent
    again = copy.deepcopy(new.state_dict())
    assert remove_conv_bias(new) == []
    for k, v in new.state_dict().items():
        assert torch.equal(v, again[k])


def test_plan_reasons_and_notes():
    plan = plan_conv_bias_removal(DataDependentNet())
    assert "untraceable forward of 'block'" in plan.skipped["block.conv3"]
    assert "directly" in plan.skipped["side.0"]
    assert any("cannot be traced" in n for n in plan.notes)
    plan = plan_conv_bias_removal(SEBlock(8))
    assert "sigmoid" in plan.skipped["expand"] and "relu" in plan.skipped["reduce"]
    assert "only a BatchNorm" in plan_conv_bias_removal(ConvTwice()).skipped["conv"]
    assert "other inputs" in plan_conv_bias_removal(BNElsewhere()).skipped["conv"]


def test_nothing_to_do_and_bad_input():
    net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    assert remove_conv_bias(net) == []
    assert plan_conv_bias_removal(net).summary() == "no convolution with a bias"
    no_bias = nn.Sequential(nn.Conv2d(3, 3, 1, bias=False), nn.BatchNorm2d(3))
    assert remove_conv_bias(no_bias) == []
    with pytest.raises(TypeError, match="model"):
        remove_conv_bias("resnet")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="example_input"):
        remove_conv_bias(plain_stack(), example_input=3)
    with pytest.raises(TypeError, match="pairs"):
        fold_conv_bias_state_dict({}, ["0"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="example_input"):
        ConvBiasRemoval(example_input="x")


def test_forward_hooks_and_shared_modules_are_left_alone():
    net = plain_stack()
    net[0].register_forward_hook(lambda *a: None)
    assert "0" not in remove_conv_bias(net)
    conv, bn = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(conv, bn)
            self.b = conv  # the same conv under a second name, used outside `a`

        def forward(self, x):
            if x.sum() > 0:  # untraceable root: decisions are local to `a`
                x = x + 1
            return self.a(x) + self.b(x)

    plan = plan_conv_bias_removal(Shared())
    assert plan.pairs == {} and "several names" in plan.skipped["a.0"]


def test_lazy_modules_need_example_input():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.ReLU())

    net = make()
    plan = plan_conv_bias_removal(net)
    assert "lazy" in plan.skipped["0"]
    x = torch.randn(2, 3, 6, 6)
    ref = make()
    with torch.no_grad():
        ref.eval()(x)  # materialise the reference the same way (eval: no statistics update)
    new = make()
    rng = torch.get_rng_state()
    assert remove_conv_bias(new, example_input=x) == ["0"]
    assert torch.equal(rng, torch.get_rng_state())  # the probe restores the RNG
    ref.train(), new.train()
    _assert_equal_maths(ref, new, (2, 3, 6, 6), ["0"])


def test_example_input_probe_leaves_state_alone_and_can_veto():
    net = plain_stack()
    _warm(net, (4, 3, 8, 8))
    before = copy.deepcopy(net.state_dict())
    net.train()
    plan = plan_conv_bias_removal(net, example_input=torch.randn(4, 3, 8, 8))
    assert set(plan.pairs) == {"0", "3", "6", "9"}
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert net.training
    with pytest.warns(UserWarning, match="example_input failed"):
        bad = plan_conv_bias_removal(net, example_input=torch.randn(4, 5, 8, 8))
    assert bad.pairs == plan.pairs and any("failed" in n for n in bad.notes)


def test_example_input_vetoes_what_the_real_forward_refutes():
    class Sneaky(nn.Module):
        """At run time (not while fx traces) the BN also normalises the raw input."""

        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3))

        def forward(self, x):
            if torch.fx._symbolic_trace.is_fx_tracing():
                return self.body(x)
            return self.body(x) + self.body[1](x)

    net = Sneaky()
    assert plan_conv_bias_removal(net).pairs == {"body.0": "body.1"}  # invisible to fx
    vetoed = plan_conv_bias_removal(net, example_input=torch.randn(2, 3, 4, 4))
    assert vetoed.pairs == {} and "differ" in vetoed.skipped["body.0"]


def test_state_dict_fold_and_unfold():
    torch.manual_seed(0)
    ref = ResNet()
    _warm(ref, (4, 3, 8, 8))
    old_sd = copy.deepcopy(ref.state_dict())
    new = ResNet()  # fresh weights, changed
    plan = plan_conv_bias_removal(new)
    apply_conv_bias_plan(new, plan)
    folded = fold_conv_bias_state_dict(old_sd, plan)
    assert set(folded) == set(new.state_dict())
    assert "stem.0.bias" in old_sd  # input untouched
    new.load_state_dict(folded)
    _assert_equal_maths(ref, new, (4, 3, 8, 8), list(plan.pairs))
    # the load pre-hook does the same fold when the unchanged model's state dict is loaded directly
    new2 = ResNet()
    remove_conv_bias(new2)
    with pytest.warns(UserWarning, match="folded the bias"):
        new2.load_state_dict(old_sd)
    for k, v in new2.state_dict().items():
        torch.testing.assert_close(v, folded[k])
    # and back into an unchanged model
    plain = ResNet()
    plain.load_state_dict(unfold_conv_bias_state_dict(new.state_dict(), plan))
    _assert_equal_maths(plain, new, (4, 3, 8, 8), list(plan.pairs))


# ------------------------------------------------------------------------------------------ Trainer


class LitNet(LightningModule):
    def __init__(self, wrap: bool = False) -> None:
        super().__init__()
        self.net = ResNet()
        self.wrap = wrap

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):  # one batch per epoch: a resumed run sees the same batches
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(
            torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)
        )
        return torch.utils.data.DataLoader(data, batch_size=8)


class _OptimizerSpy(Callback):
    def on_train_start(self, trainer, pl_module):
        self.opt_params = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
        self.model_params = {id(p) for p in pl_module.parameters()}


def _trainer(tmp_path=None, max_steps=2, callbacks=()):
    return Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=list(callbacks),
    )


def test_callback_runs_before_optimizer_and_is_idempotent():
    torch.manual_seed(0)
    model = LitNet()
    biases = {c: model.get_submodule(c).bias for c in ("net.stem.0", "net.layer.0.conv1")}
    cb, spy = ConvBiasRemoval(), _OptimizerSpy()
    trainer = _trainer(callbacks=[cb, spy])
    trainer.fit(model)
    assert cb.active and "removed 7 conv bias" in cb.status[1]
    assert spy.opt_params == spy.model_params
    assert not any(id(b) in spy.opt_params for b in biases.values())
    assert set(cb.removed) == {"net.stem.0"} | {
        f"net.layer.{i}.{n}" for i in (0, 1) for n in ("conv1", "conv2", "short.0")
    }
    assert "net.layer.2.conv" in cb.plan.skipped
    # a second fit with the same callback changes nothing more
    trainer2 = _trainer(max_steps=4, callbacks=[cb])
    trainer2.fit(model)
    assert cb.active and len(cb.removed) == 7


def test_callback_nothing_to_do_reports_once():
    class NoConv(LitNet):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(192, 5))

    cb = ConvBiasRemoval()
    _trainer(callbacks=[cb]).fit(NoConv())
    assert not cb.active and "no convolution" in cb.status[1]


def test_checkpoint_resume_exact(tmp_path):
    torch.manual_seed(0)
    full = LitNet()
    init = copy.deepcopy(full.state_dict())
    _trainer(max_steps=4, callbacks=[ConvBiasRemoval()]).fit(full)

    first = LitNet()
    first.load_state_dict(init)
    t1 = _trainer(max_steps=2, callbacks=[ConvBiasRemoval()])
    t1.fit(first)
    ckpt = tmp_path / "changed.ckpt"
    t1.save_checkpoint(ckpt)
    saved = torch.load(ckpt, weights_only=False)
    assert "net.stem.0.bias" not in saved["state_dict"]

    resumed = LitNet()
    cb = ConvBiasRemoval()
    _trainer(max_steps=4, callbacks=[cb]).fit(resumed, ckpt_path=ckpt)
    for k, v in resumed.state_dict().items():
        torch.testing.assert_close(v, full.state_dict()[k], rtol=1e-5, atol=1e-6, msg=k)


def test_resume_from_unchanged_checkpoint(tmp_path):
    torch.manual_seed(0)
    plain = LitNet()
    t = _trainer(max_steps=2)
    t.fit(plain)
    ckpt = tmp_path / "plain.ckpt"
    t.save_checkpoint(ckpt)
    # the unchanged run continued for reference
    cont = LitNet()
    _trainer(max_steps=4).fit(cont, ckpt_path=ckpt)

    changed = LitNet()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _trainer(max_steps=4, callbacks=[ConvBiasRemoval()]).fit(changed, ckpt_path=ckpt)
    assert any("unchanged model" in str(w.message) for w in rec)
    # equal maths: same weights (the bias grad is ~0 in train mode) and shifted running means
    sd_c, sd_p = changed.state_dict(), cont.state_dict()
    for k, v in sd_c.items():
        if not k.endswith("running_mean"):
            torch.testing.assert_close(v, sd_p[k], rtol=1e-4, atol=1e-5, msg=k)
    changed.eval(), cont.eval()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(changed(x), cont(x), rtol=1e-4, atol=1e-4)


def test_resume_from_unchanged_checkpoint_with_unmappable_optimizer(tmp_path):
    class TwoGroups(LitNet):
        def configure_optimizers(self):
            params = list(self.parameters())
            return torch.optim.SGD([{"params": params[::2]}, {"params": params[1::2]}], lr=0.1, momentum=0.9)

    t = _trainer(max_steps=1)
    t.fit(TwoGroups())
    ckpt = tmp_path / "plain.ckpt"
    t.save_checkpoint(ckpt)
    with pytest.raises(RuntimeError, match="without conv-bias removal.*weights only"):
        _trainer(max_steps=2, callbacks=[ConvBiasRemoval()]).fit(TwoGroups(), ckpt_path=ckpt)


def test_lightning_module_with_direct_children_and_untraceable_forward():
    class Direct(LitNet):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.bn = nn.BatchNorm2d(3)

        def forward(self, x):
            x = self.bn(self.conv(x))
            if x.mean() > 100:
                x = x * 0
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self(x), y) + self.net.stem[0](x).mean()  # reaches into net.stem

    plan = plan_conv_bias_removal(Direct())
    assert "conv" in plan.pairs
    assert "net.stem.0" in plan.skipped and "directly" in plan.skipped["net.stem.0"]
    assert "net.layer.0.conv1" in plan.pairs
