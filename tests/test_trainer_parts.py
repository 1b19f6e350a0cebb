"""T01 lr-schedule, T05 precision resolution, T06 fused optimizers, T07 cudnn.benchmark, T10 accumulation, T11 ddp."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from helpers import TinyCNN, quiet_trainer

from lightning_speedups.callbacks.cudnn_benchmark import CudnnBenchmark
from lightning_speedups.callbacks.effective_batch import (
    EffectiveBatchSize,
    accumulation_for,
    loader_batch_size,
)
from lightning_speedups.callbacks.fused_optimizer import FusedOptimizer
from lightning_speedups.callbacks.lr_schedule import LRSchedule
from lightning_speedups.callbacks.matmul_precision import MatmulPrecision
from lightning_speedups.functional import precision as prec
from lightning_speedups.strategies import ddp_strategy


# ---------------------------------------------------------------- T01
@pytest.mark.parametrize("accumulate", [1, 2])
def test_onecycle_steps_once_per_optimizer_step_and_ends_the_schedule(accumulate):
    model = TinyCNN(lr=0.1, n=128, batch_size=16)  # 8 batches per epoch
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=accumulate, callbacks=[LRSchedule("onecycle")])
    trainer.fit(model)
    steps = 2 * 8 // accumulate
    lrs = [g[0] for g in model.lrs]
    assert len(lrs) == steps == trainer.global_step
    # a new learning rate at every optimizer step
    assert all(a != b for a, b in zip(lrs, lrs[1:]))
    # warm-up from max_lr / div_factor, peak 0.1, and the last step is the schedule's final lr
    assert lrs[0] == pytest.approx(0.1 / 25)
    assert max(lrs) == pytest.approx(0.1, rel=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), max_lr=0.1, total_steps=steps, pct_start=0.25
    )
    expected = []
    for _ in range(steps):
        expected.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    assert lrs == pytest.approx(expected)
    assert lrs[-1] == pytest.approx(0.1 / 25 / 1e4, rel=1e-3, abs=1e-6)


def test_cyclic_schedule_goes_up_and_down():
    model = TinyCNN(lr=0.1, n=128, batch_size=16)
    trainer = quiet_trainer(max_epochs=2, callbacks=[LRSchedule("cyclic", cycles=2)])
    trainer.fit(model)
    lrs = [g[0] for g in model.lrs]
    assert len(lrs) == 16
    assert lrs[0] == pytest.approx(0.1 / 25)
    assert max(lrs) == pytest.approx(0.1, rel=0.01)
    ups = sum(b > a for a, b in zip(lrs, lrs[1:]))
    downs = sum(b < a for a, b in zip(lrs, lrs[1:]))
    assert ups >= 6 and downs >= 6


def test_onecycle_resume_continues_exactly(tmp_path):
    full = TinyCNN(lr=0.1)
    quiet_trainer(max_epochs=2, callbacks=[LRSchedule()]).fit(full)

    class StopAfterFirstEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            trainer.should_stop = True

    first = TinyCNN(lr=0.1)
    t1 = quiet_trainer(max_epochs=2, callbacks=[LRSchedule(), StopAfterFirstEpoch()], default_root_dir=tmp_path)
    t1.fit(first)
    ckpt = tmp_path / "half.ckpt"
    t1.save_checkpoint(ckpt)
    second = TinyCNN(lr=0.1)
    quiet_trainer(max_epochs=2, callbacks=[LRSchedule()]).fit(second, ckpt_path=ckpt)
    assert len(first.lrs) == 8 and len(second.lrs) == 8
    resumed = [g[0] for g in first.lrs + second.lrs]
    assert resumed == pytest.approx([g[0] for g in full.lrs])


def test_existing_onecycle_stepped_per_epoch_is_warned_about():
    class EpochOneCycle(TinyCNN):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)]

    with pytest.warns(UserWarning, match="stepped once per epoch"):
        quiet_trainer(max_steps=2, callbacks=[LRSchedule()]).fit(EpochOneCycle())


def test_lr_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="`name`"):
        LRSchedule("cosine")
    with pytest.raises(ValueError, match="`pct_start`"):
        LRSchedule(pct_start=1.5)
    with pytest.raises(ValueError, match="`max_lr`"):
        LRSchedule(max_lr=-1.0)


# ---------------------------------------------------------------- T10
def test_effective_batch_size_sets_accumulation():
    model = TinyCNN(batch_size=16)
    cb = EffectiveBatchSize(64)
    trainer = quiet_trainer(max_steps=2, callbacks=[cb])
    trainer.fit(model)
    assert trainer.accumulate_grad_batches == 4
    assert cb.active and "16 per batch x 1 process(es) x 4 = 64" in cb.status[1]
    assert len(model.lrs) == 2  # two optimizer steps = 8 micro-batches


def test_effective_batch_size_that_does_not_divide_names_the_setting():
    with pytest.raises(ValueError, match=r"effective_batch_size=100.*multiple of batch size 16.*Use 96 or 112"):
        quiet_trainer(max_steps=1, callbacks=[EffectiveBatchSize(100)]).fit(TinyCNN(batch_size=16))
    with pytest.raises(ValueError, match="disagree"):
        quiet_trainer(max_steps=1, accumulate_grad_batches=3, callbacks=[EffectiveBatchSize(64)]).fit(
            TinyCNN(batch_size=16)
        )
    with pytest.raises(ValueError, match="positive integer"):
        EffectiveBatchSize(0)


def test_accumulation_counts_world_size():
    assert accumulation_for(256, 32, 2) == 4
    with pytest.raises(ValueError):
        accumulation_for(256, 48, 2)


def test_loader_batch_size_reads_batch_samplers():
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    data = list(range(10))
    assert loader_batch_size(DataLoader(data, batch_size=4)) == 4
    assert loader_batch_size(DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 3, False))) == 3
    assert loader_batch_size({"a": DataLoader(data, batch_size=5)}) == 5
    assert loader_batch_size(None) is None


# ---------------------------------------------------------------- T06
def test_fused_optimizer_switches_adamw_in_place_and_trains_the_same():
    torch.manual_seed(0)
    plain = TinyCNN(optimizer="adamw", lr=1e-2)
    torch.manual_seed(0)
    fused = TinyCNN(optimizer="adamw", lr=1e-2)
    fused.load_state_dict(plain.state_dict())
    quiet_trainer(max_steps=3).fit(plain)
    cb = FusedOptimizer("auto")
    trainer = quiet_trainer(max_steps=3, callbacks=[cb])
    trainer.fit(fused)
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["fused"] is True
    assert not getattr(opt, "_step_supports_amp_scaling", False)  # no GradScaler: Lightning may clip
    assert cb.changed == ["AdamW->fused"]
    for (name, a), b in zip(plain.named_parameters(), fused.parameters()):
        if name in ("features.0.bias", "features.3.bias"):
            continue  # biases before BatchNorm get ~0 gradients: Adam amplifies the rounding noise (see T16)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_fused_optimizer_avoids_fused_under_fp16_with_clipping():
    params = [torch.nn.Parameter(torch.randn(3))]
    opt = torch.optim.AdamW(params)
    trainer = SimpleNamespace(
        optimizers=[opt], precision_plugin=SimpleNamespace(scaler=object()), gradient_clip_val=1.0, callbacks=[]
    )
    cb = FusedOptimizer("auto")
    with pytest.warns(UserWarning, match="fp16 mixed precision with gradient clipping"):
        cb.on_train_start(trainer, None)
    assert opt.param_groups[0]["foreach"] is True and opt.param_groups[0]["fused"] is False
    assert not getattr(opt, "_step_supports_amp_scaling", False)
    # without a scaler (bf16 / fp32) fused is fine with clipping
    opt2 = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))])
    trainer2 = SimpleNamespace(
        optimizers=[opt2], precision_plugin=SimpleNamespace(scaler=None), gradient_clip_val=1.0, callbacks=[]
    )
    FusedOptimizer("auto").on_train_start(trainer2, None)
    assert opt2.param_groups[0]["fused"] is True


def test_fused_optimizer_leaves_custom_optimizers_alone():
    class MyOpt(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

        def step(self, closure=None):
            return None

    MyOpt.__module__ = "user_code"
    opt = MyOpt([torch.nn.Parameter(torch.randn(2))])
    cb = FusedOptimizer()
    cb.on_train_start(
        SimpleNamespace(optimizers=[opt], precision_plugin=None, gradient_clip_val=None, callbacks=[]), None
    )
    assert not cb.active and "fused" not in opt.param_groups[0]


# ---------------------------------------------------------------- T07 / TF32
def test_cudnn_benchmark_is_restored_after_fit():
    torch.backends.cudnn.benchmark = False
    cb = CudnnBenchmark("on")
    seen = []

    class Probe(TinyCNN):
        def training_step(self, batch, batch_idx):
            seen.append(torch.backends.cudnn.benchmark)
            return super().training_step(batch, batch_idx)

    quiet_trainer(max_steps=2, callbacks=[cb]).fit(Probe())
    assert seen == [True, True]
    assert torch.backends.cudnn.benchmark is False


def test_cudnn_benchmark_auto_skips_on_cpu():
    cb = CudnnBenchmark("auto")
    quiet_trainer(max_steps=1, callbacks=[cb]).fit(TinyCNN())
    assert not cb.active and "CUDA" in cb.status[1]


def test_cudnn_benchmark_turns_off_when_shapes_keep_changing():
    from torch.utils.data import DataLoader

    class Ragged(TinyCNN):
        def train_dataloader(self):
            sizes = [8, 10, 12, 14, 16, 18]
            return DataLoader([(torch.randn(1, 1, s, s), torch.tensor([0])) for s in sizes], batch_size=None)

    torch.backends.cudnn.benchmark = False
    cb = CudnnBenchmark("on", max_shapes=3)
    with pytest.warns(UserWarning, match="turned off again"):
        quiet_trainer(max_steps=6, callbacks=[cb]).fit(Ragged())
    assert not cb.active and "distinct input shapes" in cb.status[1]
    assert torch.backends.cudnn.benchmark is False


def test_matmul_precision_rejects_bad_mode():
    with pytest.raises(ValueError, match="speedups.tf32"):
        MatmulPrecision("fastest")


# ---------------------------------------------------------------- T05
def test_precision_auto_on_cpu_depends_on_the_bf16_units(monkeypatch):
    monkeypatch.setattr(prec, "cpu_has_amx_bf16", lambda: False)
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    monkeypatch.setattr(prec, "cpu_vendor", lambda: "GenuineIntel")
    assert prec.resolve_precision("auto", "cpu")[0] == "32-true"  # Xeon without AMX: measured slower
    assert prec.resolve_precision("half", "cpu")[0] == "bf16-mixed"  # the memory preset takes it anyway
    monkeypatch.setattr(prec, "cpu_vendor", lambda: "AuthenticAMD")
    value, reason = prec.resolve_precision("auto", "cpu")
    assert value == "bf16-mixed" and "AMD" in reason  # Zen 4: measured faster
    monkeypatch.setattr(prec, "cpu_flags", lambda: frozenset({"avx2"}))
    assert prec.resolve_precision("auto", "cpu")[0] == "32-true"
    monkeypatch.setattr(prec, "cpu_has_amx_bf16", lambda: True)
    assert prec.resolve_precision("auto", "cpu")[0] == "bf16-mixed"


def test_precision_auto_on_gpus_by_compute_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # torch answers (tests/test_cuda_paths.py: NVML)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert prec.resolve_precision("auto", "gpu")[0] == "bf16-mixed"
    assert prec.resolve_matmul_precision("auto", "gpu")[0] == "high"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 0))
    value, reason = prec.resolve_precision("auto", "cuda")
    assert value == "16-mixed" and "scaler" in reason
    assert prec.resolve_matmul_precision("auto", "gpu")[0] is None


def test_precision_rejects_unknown_values():
    with pytest.raises(ValueError, match="speedups.precision"):
        prec.resolve_precision("fp4", "cpu")
    assert prec.resolve_precision("off", "cpu")[0] is None
    assert prec.resolve_precision("bf16-mixed", "cpu")[0] == "bf16-mixed"


# ---------------------------------------------------------------- T11
def test_ddp_strategy_says_when_the_compression_hook_cannot_apply():
    strategy, reason = ddp_strategy(accelerator="cpu")
    assert strategy._ddp_kwargs["gradient_as_bucket_view"] is True
    assert strategy._ddp_kwargs["static_graph"] is True
    assert strategy._ddp_comm_hook is None
    assert "only run on CUDA" in reason
    with pytest.warns(UserWarning, match="only run on CUDA"):
        ddp_strategy(accelerator="cpu", compression="bf16")


def test_ddp_strategy_picks_a_compression_hook_on_cuda(monkeypatch):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    strategy, reason = ddp_strategy(accelerator="gpu")
    assert strategy._ddp_comm_hook is default_hooks.bf16_compress_hook and "bf16" in reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    assert ddp_strategy(accelerator="gpu")[0]._ddp_comm_hook is default_hooks.fp16_compress_hook
    with pytest.raises(ValueError, match="cannot both be true"):
        ddp_strategy(static_graph=True, find_unused_parameters=True)


def test_fused_optimizer_avoids_fused_under_fp16_with_agc():
    from lightning_speedups.callbacks.agc import AdaptiveGradientClipping

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))])
    trainer = SimpleNamespace(
        optimizers=[opt],
        precision_plugin=SimpleNamespace(scaler=object()),
        gradient_clip_val=None,
        callbacks=[AdaptiveGradientClipping()],
    )
    with pytest.warns(UserWarning, match="fp16"):
        FusedOptimizer("auto").on_train_start(trainer, None)
    assert opt.param_groups[0]["fused"] is False


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_fused_optimizer_with_gradient_clipping_trains(precision):
    # bf16-mixed uses Lightning's MixedPrecision plugin, which refuses to clip an optimizer that
    # claims to unscale internally; the fused switch must not make that claim without a scaler.
    model = TinyCNN(optimizer="adamw", lr=1e-2)
    cb = FusedOptimizer("auto")
    trainer = quiet_trainer(max_steps=2, precision=precision, gradient_clip_val=1.0, callbacks=[cb])
    trainer.fit(model)
    assert trainer.global_step == 2 and trainer.optimizers[0].param_groups[0]["fused"] is True
