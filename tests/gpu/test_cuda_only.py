"""What only exists on CUDA, run on a real GPU by benchmarks/gpu_check.sh (``pytest -m gpu``).

Every test here is marked ``gpu`` and skips cleanly without a CUDA device, so CI (CPU only) collects
and skips them. Their CPU twins with faked device facts are in tests/test_cuda_paths.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks import (
    CudnnBenchmark,
    DataWaitMonitor,
    DebugMode,
    Float8Training,
    FusedOptimizer,
    LargestBatch,
    MatmulPrecision,
    SyncGuard,
)
from lightning_speedups.data.loaders import LoaderSettings, rebuild_dataloader, resolve_loader_settings
from lightning_speedups.data.normalize import DeviceNormalizer
from lightning_speedups.functional.channels_last import batch_to_channels_last, to_channels_last
from lightning_speedups.functional.compile import compile_modules, compile_status

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _trainer(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = dict(
        accelerator="cuda",
        devices=1,
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    defaults.update(kwargs)
    return Trainer(**defaults)


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


class CNN(LightningModule):
    def __init__(self, fused: bool | None = None, item: bool = False, n: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        self.fused, self.item, self.n = fused, item, n
        self.seen: list[int] = []
        self.losses: list[torch.Tensor] = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(x.shape[0])
        loss = nn.functional.cross_entropy(self(x).float(), y)
        if self.item:
            self.last = loss.item()  # the planted sync
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=self.fused)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(
            TensorDataset(torch.randn(self.n, 3, 32, 32, generator=g), torch.randint(0, 10, (self.n,), generator=g)),
            batch_size=16,
        )


# ------------------------------------------------------------------ T03/T21: pinned + non_blocking really overlap
def test_pinned_non_blocking_copies_overlap_compute() -> None:
    dl = DataLoader(TensorDataset(torch.randn(8, 16, 1024, 1024)), batch_size=8)
    resolved = resolve_loader_settings(LoaderSettings(num_workers=0), dl, accelerator="cuda")
    assert resolved.kwargs["pin_memory"] is True
    (host,) = next(iter(rebuild_dataloader(dl, **resolved.kwargs)))  # 512 MiB
    assert host.is_pinned(), "pin_memory='auto' did not pin a CUDA-bound loader"
    a = torch.randn(4096, 4096, device="cuda")
    copy_stream = torch.cuda.Stream()

    def timed(fn) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    def copy():
        with torch.cuda.stream(copy_stream):
            host.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy_stream)

    copy()
    t_copy = min(timed(copy) for _ in range(3))
    t_one = min(timed(lambda: a @ a) for _ in range(3))
    n = max(1, round(t_copy / t_one))  # about as much compute as copying

    def compute():
        for _ in range(n):
            a @ a

    def both():
        with torch.cuda.stream(copy_stream):
            host.to("cuda", non_blocking=True)  # from pinned memory: returns at once, the copy engine works alone
        compute()
        torch.cuda.current_stream().wait_stream(copy_stream)

    both()
    t_compute, t_both = min(timed(compute) for _ in range(3)), min(timed(both) for _ in range(3))
    saved = t_compute + t_copy - t_both
    assert saved > 0.4 * min(t_compute, t_copy), (t_compute, t_copy, t_both)


# ------------------------------------------------------------------ T08: SyncGuard
@pytest.mark.parametrize("planted", [True, False])
def test_sync_guard_counts_a_planted_item_and_nothing_in_a_clean_step(planted: bool) -> None:
    guard = SyncGuard(mode="count")
    _trainer(callbacks=[guard]).fit(CNN(item=planted))
    if planted:
        assert guard.user_syncs >= 3 and any("loss.item()" in s.code for s in guard.sites if s.owner == "user")
    else:
        assert guard.user_syncs == 0, [s.code for s in guard.sites if s.owner == "user"]


# ------------------------------------------------------------------ T07: cudnn.benchmark
def test_cudnn_benchmark_on_for_static_shapes_and_restored() -> None:
    before = torch.backends.cudnn.benchmark
    seen: list[bool] = []

    class Look(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            seen.append(torch.backends.cudnn.benchmark)

    _trainer(callbacks=[CudnnBenchmark("auto"), Look()]).fit(CNN())
    assert seen and all(seen)
    assert torch.backends.cudnn.benchmark == before


# ------------------------------------------------------------------ T05/T06: fp16 + GradScaler + fused + clipping
def test_fp16_mixed_scaler_fused_optimizer_and_clipping_train() -> None:
    model = CNN(fused=True)
    trainer = _trainer(precision="16-mixed", gradient_clip_val=1.0, callbacks=[FusedOptimizer()], max_steps=4)
    with pytest.warns(UserWarning, match="foreach"):
        trainer.fit(model)
    assert trainer.precision_plugin.scaler is not None and trainer.global_step == 4
    assert all(torch.isfinite(loss) for loss in model.losses)
    assert trainer.optimizers[0]._step_supports_amp_scaling is False


def test_bf16_mixed_fused_optimizer_and_clipping_train() -> None:
    trainer = _trainer(precision="bf16-mixed", gradient_clip_val=1.0, callbacks=[FusedOptimizer()])
    trainer.fit(CNN(fused=True))
    assert trainer.optimizers[0].param_groups[0]["fused"] and trainer.global_step == 3


def test_switch_to_fused_after_a_restore_puts_steps_on_the_device(tmp_path) -> None:
    first = _trainer(max_steps=2, enable_checkpointing=True, default_root_dir=tmp_path)
    first.fit(CNN(fused=False))
    ckpt = tmp_path / "a.ckpt"
    first.save_checkpoint(ckpt)
    trainer = _trainer(max_steps=5, callbacks=[FusedOptimizer()])
    trainer.fit(CNN(fused=False), ckpt_path=str(ckpt))
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["fused"]
    assert all(s["step"].device.type == "cuda" for s in opt.state.values())
    assert trainer.global_step == 5


# ------------------------------------------------------------------ T24: channels_last + AMP
@pytest.mark.parametrize(("dtype", "tol"), [(torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_channels_last_amp_outputs_equal_the_reference(dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(0)
    ref_model = CNN().net.cuda().eval()
    x = torch.randn(16, 3, 32, 32, device="cuda")
    with torch.no_grad():
        ref = ref_model.double()(x.double())
        model = to_channels_last(CNN().net.cuda().eval())
        model.load_state_dict(ref_model.float().state_dict())
        with torch.autocast("cuda", dtype=dtype):
            out = model(batch_to_channels_last(x)).float()
    assert torch.isfinite(out).all() and _rel(out, ref) < tol


# ------------------------------------------------------------------ T22: compile of inner modules on CUDA
@pytest.mark.parametrize("mode", [None, pytest.param("reduce-overhead", id="cuda-graphs")])
def test_inner_module_compile_on_cuda(mode: str | None) -> None:
    if mode == "reduce-overhead" and os.environ.get("GPU_CHECK_CUDA_GRAPHS", "1") == "0":
        pytest.skip("CUDA graphs turned off (GPU_CHECK_CUDA_GRAPHS=0)")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda()
    holder = nn.Module()
    holder.body = model
    x = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        ref = model(x).clone()
    assert compile_modules(holder, mode=mode) == ["body"]
    with torch.no_grad():
        for _ in range(3):  # reduce-overhead records its graph after warm-up calls
            out = holder.body(x).clone()
    assert compile_status(holder) == {"body": "compiled"}
    assert _rel(out, ref) < 1e-4  # TF32 is off here: fp32 within rounding


# ------------------------------------------------------------------ T05: TF32
def test_tf32_on_and_restored() -> None:
    before = torch.get_float32_matmul_precision()
    seen: list[str] = []

    class Look(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            seen.append(torch.get_float32_matmul_precision())

    _trainer(callbacks=[MatmulPrecision("auto"), Look()]).fit(CNN())
    if torch.cuda.get_device_capability()[0] >= 8:
        assert seen and set(seen) == {"high"}
    assert torch.get_float32_matmul_precision() == before


# ------------------------------------------------------------------ T04: largest batch at the out-of-memory edge
class Hungry(LightningModule):
    """About 4 MiB of activations per sample, so the out-of-memory edge of a 3 GiB cap is near 700."""

    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.net = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(4)])
        self.peaks_at_start: list[int] = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x.unsqueeze(1).expand(-1, 128, -1)).float().pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(4096, 1024)), batch_size=self.batch_size)


def test_largest_batch_finds_the_oom_edge_and_leaves_the_device_clean() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, 3 * 2**30 / total))
    try:
        seen: dict[str, int] = {}

        class AtStart(Callback):
            def on_train_start(self, trainer, pl_module):
                seen["peak"] = torch.cuda.max_memory_allocated()
                seen["allocated"] = torch.cuda.memory_allocated()

        cb = LargestBatch(margin=0.1, max_trials=14)
        model = Hungry()
        trainer = _trainer(max_steps=2, callbacks=[cb, AtStart()])
        trainer.fit(model)
        oom = [b for b, peak in cb.trials if peak is None]
        fitted = [b for b, peak in cb.trials if peak is not None]
        assert oom and fitted and max(fitted) < min(oom), cb.trials  # the edge was found, from both sides
        assert model.batch_size % 8 == 0 and model.batch_size <= max(fitted)
        trial_peak = max(p for _, p in cb.trials if p is not None)
        assert seen["peak"] < trial_peak  # the peak statistics were reset after the search
        assert seen["allocated"] < 0.25 * trial_peak  # no trial tensors left behind
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ T18: no host copies per batch
def test_device_normalizer_adds_no_sync_per_batch() -> None:
    norm = DeviceNormalizer(mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.2))
    batch = torch.randint(0, 255, (8, 3, 32, 32), dtype=torch.uint8, device="cuda")
    norm(batch)  # builds the constants once
    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            out = norm(batch)
    finally:
        torch.cuda.set_sync_debug_mode(prev)
    assert out.dtype == torch.float32 and out.device.type == "cuda"


# ------------------------------------------------------------------ T02: data wait of a GPU-bound run
class Heavy(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4096, 4096) / 64)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        y = x
        for _ in range(100):  # about 7 TFLOP a step: the device is the bottleneck
            y = torch.tanh(y @ self.w)
        loss = y.pow(2).mean()
        self.log("loss", loss, prog_bar=True)  # the progress bar's .item() drains the queue
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(2048 * 2, 4096)), batch_size=2048)


def test_data_wait_of_a_gpu_bound_run_is_small_with_events() -> None:
    monitor = DataWaitMonitor(log=False)
    _trainer(max_steps=8, callbacks=[monitor], enable_progress_bar=True).fit(Heavy())
    assert monitor.timed_with == "cuda events"
    assert monitor.data_wait_fraction is not None and monitor.data_wait_fraction < 0.2
    assert monitor.input_bound is False


# ------------------------------------------------------------------ T14: deterministic mode and cuBLAS
def test_debug_mode_deterministic_runs_cublas_matmuls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    _trainer(max_steps=2, callbacks=[DebugMode(anomaly=False, sync_guard=None, deterministic=True)]).fit(Heavy())


# ------------------------------------------------------------------ T05 fp8: torchao float8 linears
def test_float8_training_where_supported() -> None:
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("float8 needs compute capability 8.9+")
    pytest.importorskip("torchao.float8", reason="torchao is not installed")

    class Lm(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))

        def training_step(self, batch, batch_idx):
            (x,) = batch
            return self.body(x).float().pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(256, 256)), batch_size=64)

    cb = Float8Training()
    model = Lm()
    _trainer(precision="bf16-mixed", callbacks=[cb]).fit(model)
    assert cb.active and len(cb.converted) == 2, cb.status
    assert all(type(m).__name__ == "Float8Linear" for m in model.body if not isinstance(m, nn.GELU))
