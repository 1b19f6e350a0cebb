"""The CUDA-only paths, checked on the CPU with faked device facts (issue 14's suspected defects).

Each test names the defect it would have caught. Where the logic needs a real GPU, tests/gpu/ has
the twin test (marked ``gpu``), run by benchmarks/gpu_check.sh.
"""

from __future__ import annotations

import os
import types
import warnings
import weakref
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning_speedups.callbacks.float8 as float8_mod
import lightning_speedups.callbacks.largest_batch as largest_batch_mod
import lightning_speedups.functional.precision as precision_mod
from lightning_speedups.callbacks import DataWaitMonitor, DebugMode, DeviceNormalize, FusedOptimizer
from lightning_speedups.callbacks.float8 import Float8Training, float8_eligible, float8_skip_reason
from lightning_speedups.callbacks.fused_optimizer import place_step_tensors
from lightning_speedups.callbacks.largest_batch import LargestBatch
from lightning_speedups.config import Speedups
from lightning_speedups.data.loaders import LoaderSettings, dataset_device, resolve_loader_settings
from lightning_speedups.data.normalize import DeviceNormalizer
from lightning_speedups.functional.compile import CompileFallbackWarning, compile_modules, compile_status, eager_while
from lightning_speedups.functional.memory import MemoryBudgetExceeded, release_device_memory


def _trainer(**kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    defaults.update(kwargs)
    return Trainer(**defaults)


class Lin(LightningModule):
    def __init__(self, fused: bool | None = None, n: int = 16) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, 1))
        self.fused = fused
        self.n = n

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x).float().pow(2).mean() * 1e-3

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3, fused=self.fused)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(32, self.n)), batch_size=8)


# ------------------------------------------------------------------ T06: FusedOptimizer's flag and step tensors
def test_user_fused_switched_to_foreach_under_fp16_clipping_trains() -> None:
    """Defect: the user's fused=True optimizer switched to foreach kept `_step_supports_amp_scaling`."""
    model = Lin(fused=True)
    trainer = _trainer(plugins=[MixedPrecision("16-mixed", "cpu")], gradient_clip_val=1.0, callbacks=[FusedOptimizer()])
    with pytest.warns(UserWarning, match="foreach implementation instead"):
        trainer.fit(model)
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["foreach"] and not opt.param_groups[0]["fused"]
    assert opt._step_supports_amp_scaling is False
    assert trainer.global_step == 2


def test_lightning_refuses_to_clip_a_fused_optimizer_under_bf16_mixed() -> None:
    """Confirms Lightning 2.6's side of issue 21435: bf16-mixed + fused + clipping raises without the fix."""
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        _trainer(precision="bf16-mixed", gradient_clip_val=1.0).fit(Lin(fused=True))


def test_fused_optimizer_clears_the_flag_under_bf16_mixed_so_clipping_works() -> None:
    trainer = _trainer(precision="bf16-mixed", gradient_clip_val=1.0, callbacks=[FusedOptimizer()])
    trainer.fit(Lin(fused=True))
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["fused"] and opt._step_supports_amp_scaling is False
    assert trainer.global_step == 2


def test_fused_under_a_scaler_without_clipping_keeps_the_flag() -> None:
    trainer = _trainer(plugins=[MixedPrecision("16-mixed", "cpu")], callbacks=[FusedOptimizer()])
    trainer.fit(Lin(fused=None))
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["fused"] and opt._step_supports_amp_scaling is True


def _adam_with_steps(step_device: str, fused: bool) -> torch.optim.Adam:
    p = nn.Parameter(torch.zeros(4, device="meta"))
    opt = torch.optim.Adam([p], lr=0.1, foreach=not fused)
    opt.param_groups[0]["fused"] = fused
    opt.param_groups[0]["foreach"] = not fused
    opt.state[p] = {"step": torch.tensor(3.0, device=step_device), "exp_avg": torch.zeros(4, device="meta")}
    return opt


def test_switch_to_fused_after_a_restore_moves_the_step_tensors_to_the_device() -> None:
    """Defect: steps restored on the CPU stayed there under a fused (device-pointer) kernel."""
    opt = _adam_with_steps("cpu", fused=True)  # a "meta" parameter stands in for a CUDA one
    assert place_step_tensors(opt) == 1
    step = next(iter(opt.state.values()))["step"]
    assert step.device.type == "meta" and step.dtype == torch.float32
    assert place_step_tensors(opt) == 0  # idempotent


def test_switch_away_from_fused_moves_the_step_tensors_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: device steps under foreach cost one device-to-host sync per parameter per step."""
    opt = _adam_with_steps("meta", fused=False)
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):  # a meta tensor has no data to copy: stand in for the device-to-host copy
        if self.device.type == "meta" and torch.device(kwargs.get("device", "meta")).type == "cpu":
            return torch.zeros((), dtype=self.dtype)
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    assert place_step_tensors(opt) == 1
    assert next(iter(opt.state.values()))["step"].device.type == "cpu"


# ------------------------------------------------------------------ T18: DeviceNormalize
def test_device_normalizer_builds_mean_and_std_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: mean/std were built from host values on every batch (two blocking copies per batch)."""
    norm = DeviceNormalizer(mean=(0.5, 0.4, 0.3), std=(0.2, 0.2, 0.2))
    made: list[Any] = []
    real = torch.as_tensor

    def spy(data, *args, **kwargs):
        if not isinstance(data, torch.Tensor):
            made.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(torch, "as_tensor", spy)
    batch = torch.randint(0, 255, (2, 3, 4, 4), dtype=torch.uint8)
    first = norm(batch)
    for _ in range(4):
        torch.testing.assert_close(norm(batch), first)
    assert len(made) == 2  # mean and std, once for (cpu, float32)
    assert norm.constants(batch.device, torch.float32)[0] is norm.constants(batch.device, torch.float32)[0]


class ImageModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 2))
        self.dtypes: list[torch.dtype] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.dtypes.append(x.dtype)
        return nn.functional.cross_entropy(self.net(x).float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randint(0, 255, (16, 3, 4, 4), dtype=torch.uint8)
        return DataLoader(TensorDataset(x, torch.randint(0, 2, (16,))), batch_size=8)


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("32-true", torch.float32)])
def test_device_normalize_hands_a_true_precision_model_its_dtype(precision: str, dtype: torch.dtype) -> None:
    """Defect: under 16-bit-true precisions DeviceNormalize handed float32 to a 16-bit model."""
    model = ImageModel()
    _trainer(precision=precision, callbacks=[DeviceNormalize(0.5, 0.25)]).fit(model)
    assert model.dtypes == [dtype, dtype]


# ------------------------------------------------------------------ T03: pin_memory auto
def _loader(dataset) -> DataLoader:
    return DataLoader(dataset, batch_size=2)


def test_pin_memory_auto_does_not_pin_a_device_resident_data_set() -> None:
    """Defect: pin_memory auto pinned data sets whose tensors already live on the GPU (the pin thread raises)."""
    resident = TensorDataset(torch.zeros(4, 2, device="meta"))  # "meta" stands in for "cuda"
    assert dataset_device(resident) == "meta"
    r = resolve_loader_settings(LoaderSettings(num_workers=0), _loader(resident), accelerator="cuda")
    assert r.kwargs["pin_memory"] is False and "already live on meta" in " ".join(r.reasons)
    r = resolve_loader_settings(LoaderSettings(num_workers=0, pin_memory=True), _loader(resident), accelerator="cuda")
    assert r.kwargs["pin_memory"] is False and any("only CPU tensors" in w for w in r.warnings)
    cpu = TensorDataset(torch.zeros(4, 2))
    assert resolve_loader_settings(LoaderSettings(num_workers=0), _loader(cpu), accelerator="cuda").kwargs["pin_memory"]


def test_pin_memory_auto_under_true_precisions() -> None:
    """Defect: under *-true precisions Lightning casts the batch on the host, replacing the pinned batch."""
    cpu = _loader(TensorDataset(torch.zeros(4, 2)))
    r = resolve_loader_settings(LoaderSettings(num_workers=0), cpu, accelerator="cuda", precision="bf16-true")
    assert r.kwargs["pin_memory"] is False and "casts floating batches on the host" in " ".join(r.reasons)
    r = resolve_loader_settings(
        LoaderSettings(num_workers=0), cpu, accelerator="cuda", precision="bf16-true", integer_batches=True
    )
    assert r.kwargs["pin_memory"] is True  # uint8 batches (DeviceNormalize) are not cast on the host
    r = resolve_loader_settings(LoaderSettings(num_workers=0), cpu, accelerator="cuda", precision="bf16-mixed")
    assert r.kwargs["pin_memory"] is True


def test_machine_from_trainer_says_when_batches_stay_integer() -> None:
    from lightning_speedups.data.loaders import machine_from_trainer

    machine = machine_from_trainer(_trainer(precision="bf16-true", callbacks=[DeviceNormalize(0.5, 0.5)]))
    assert machine["precision"] == "bf16-true" and machine["integer_batches"] is True


# ------------------------------------------------------------------ T02: DataWaitMonitor on CUDA
class FakeTimeline:
    """A host clock and a device clock; events read the device clock when recorded."""

    def __init__(self) -> None:
        self.host = 0.0
        self.device = 0.0

    def event(self) -> Any:
        timeline = self

        class Event:
            t = 0.0

            def record(self) -> None:
                self.t = timeline.device

            def query(self) -> bool:
                return True

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Any) -> float:
                return (other.t - self.t) * 1000.0

        return Event()


class GpuBound(Lin):
    def __init__(self, timeline: FakeTimeline) -> None:
        super().__init__()
        self.timeline = timeline

    def training_step(self, batch, batch_idx):
        self.timeline.device += 1.0  # the device computes for a second; the host only queued it
        return super().training_step(batch, batch_idx)


class Drain(Callback):
    """A later callback's `.item()` (the progress bar's): the host blocks until the device is done."""

    def __init__(self, timeline: FakeTimeline) -> None:
        self.timeline = timeline

    def on_train_batch_end(self, *args: Any) -> None:
        self.timeline.host += 1.0


@pytest.mark.parametrize(("timer", "fraction"), [("host", 1.0), ("auto", 0.0)])
def test_data_wait_on_cuda_times_the_device_not_the_host(
    monkeypatch: pytest.MonkeyPatch, timer: str, fraction: float
) -> None:
    """Defect: host-only timing counted a GPU-bound step drained by `.item()` as data wait."""
    monkeypatch.setattr(DataWaitMonitor, "_device_type", staticmethod(lambda pl_module: "cuda"))
    tl = FakeTimeline()
    monitor = DataWaitMonitor(log=False, warmup_steps=0, timer=timer, clock=lambda: tl.host, event_factory=tl.event)  # type: ignore[arg-type]
    _trainer(max_steps=4, callbacks=[monitor, Drain(tl)]).fit(GpuBound(tl))
    assert monitor.timed_with == ("cuda events" if timer == "auto" else "host")
    assert monitor.data_wait_fraction == pytest.approx(fraction)
    assert monitor.input_bound is (timer == "host")


def test_data_wait_events_measure_a_real_device_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DataWaitMonitor, "_device_type", staticmethod(lambda pl_module: "cuda"))
    tl = FakeTimeline()

    class SlowLoader(Callback):  # the device idles 3 s before each step: waiting for the batch
        def on_train_batch_start(self, *args: Any) -> None:
            pass

    class Idle(Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            tl.device += 3.0

    monitor = DataWaitMonitor(log=False, warmup_steps=1, event_factory=tl.event)
    _trainer(max_steps=4, callbacks=[monitor, Idle(), SlowLoader()]).fit(GpuBound(tl))
    assert monitor.steps == 3 and monitor.data_wait_fraction == pytest.approx(0.75)


# ------------------------------------------------------------------ T22: compile fallback and out of memory
class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        return self.body(x)


def _oom() -> BaseException:
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_compiled_out_of_memory_is_raised_not_a_fallback() -> None:
    """Defect: the compile fallback caught out-of-memory and kept the module eager for the rest of the run."""

    def backend(gm, example_inputs):
        def run(*args):
            raise _oom()

        return run

    model = Two()
    compile_modules(model, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)
        with pytest.raises(torch.OutOfMemoryError):
            model(torch.randn(2, 4))
    assert compile_status(model) == {"body": "compiled"}


def test_out_of_memory_while_compiling_is_raised_unwrapped() -> None:
    def backend(gm, example_inputs):
        raise _oom()

    model = Two()
    compile_modules(model, backend=backend)
    with pytest.raises(torch.OutOfMemoryError):
        model(torch.randn(2, 4))
    assert compile_status(model) == {"body": "compiled"}


def test_other_compiler_errors_still_fall_back() -> None:
    def backend(gm, example_inputs):
        raise NotImplementedError("no kernel for this")

    model = Two()
    compile_modules(model, backend=backend)
    with pytest.warns(CompileFallbackWarning, match="no kernel"):
        model(torch.randn(2, 4))
    assert compile_status(model)["body"].startswith("eager")


def test_eager_while_suspends_and_restores_compiled_modules() -> None:
    model = Two()
    compile_modules(model, backend="eager")
    with eager_while(model) as names:
        assert names == ["body"] and compile_status(model) == {}
    assert compile_status(model) == {"body": "compiled"}


# ------------------------------------------------------------------ T04: the largest-batch search
class SizedModel(Lin):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0].shape[0])
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(256, self.n)), batch_size=self.batch_size)


def test_search_frees_memory_only_once_the_traceback_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: memory was freed inside `except`, while the traceback still held the trial's tensors."""
    refs: list[weakref.ref] = []
    alive_at_release: list[bool] = []

    class OomAbove32(LargestBatch):
        def measure_peak(self, trainer, pl_module, batch_size, accumulate_grad_batches, limit):
            activations = torch.empty(1000)  # held by this frame, so by the traceback of the error below
            refs.append(weakref.ref(activations))
            if batch_size > 32:
                raise MemoryBudgetExceeded("DefaultCPUAllocator: can't allocate memory: simulated")
            return 1

    def spy(device=None, **kwargs):
        alive_at_release.append(any(r() is not None for r in refs))

    monkeypatch.setattr(largest_batch_mod, "release_device_memory", spy)
    model = SizedModel()
    _trainer(callbacks=[OomAbove32(memory_budget=2_000_000, margin=0.0)]).fit(model)
    assert model.batch_size == 32
    assert alive_at_release and not any(alive_at_release)  # one call per out-of-memory trial and one at the end
    assert len(alive_at_release) >= 2


def test_release_device_memory_resets_the_peak_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: the search never reset the peak-memory statistics, so the run reported the largest trial's peak."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: calls.append(_n))
    release_device_memory("cuda:0")
    assert calls == ["synchronize", "empty_cache", "reset_peak_memory_stats"]
    calls.clear()
    release_device_memory("cpu")
    assert calls == []


def test_search_trials_run_eager_and_the_run_compiles_once() -> None:
    """Defect: compiled modules recompiled at every trial size (and learnt a dynamic batch dimension)."""
    graphs: list[tuple[int, ...]] = []

    def backend(gm, example_inputs):
        graphs.append(tuple(example_inputs[0].shape) if example_inputs else ())
        return gm.forward

    tried: list[int] = []

    class Linear(LargestBatch):  # real trial steps, memory faked as proportional to the batch
        def measure_peak(self, trainer, pl_module, batch_size, accumulate_grad_batches, limit):
            from lightning_speedups.trainer.batch_trials import measure_trial_peak

            measure_trial_peak(trainer, pl_module, self.batch_arg_name, batch_size, accumulate_grad_batches, None)
            tried.extend(pl_module.seen)  # what the trial's steps saw (trial_steps puts model.seen back after)
            return batch_size * 1000

    model = SizedModel()
    compile_modules(model, backend=backend)
    _trainer(callbacks=[Linear(memory_budget=64_000, margin=0.0, max_trials=6)]).fit(model)
    assert model.batch_size == 64
    assert 16 in tried  # trial steps ran
    assert model.seen == [64, 64]  # and left nothing behind: the model saw only the run's own steps
    assert len(graphs) == 1, graphs  # compiled once, for the size the run trains at
    assert compile_status(model) == {"net": "compiled"}


# ------------------------------------------------------------------ T14: DebugMode(deterministic=True)
def test_debug_mode_deterministic_sets_the_cublas_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: deterministic algorithms without CUBLAS_WORKSPACE_CONFIG: the first cuBLAS matmul raises."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen: list[str | None] = []

    class Look(Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            seen.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))

    _trainer(max_steps=1, callbacks=[DebugMode(anomaly=False, sync_guard=None, deterministic=True), Look()]).fit(Lin())
    assert seen == [":4096:8"]
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # restored


def test_debug_mode_keeps_a_workspace_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    _trainer(max_steps=1, callbacks=[DebugMode(anomaly=False, sync_guard=None, deterministic=True)]).fit(Lin())
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


# ------------------------------------------------------------------ T05: precision auto, fp8
@pytest.fixture
def fake_h200(monkeypatch: pytest.MonkeyPatch):
    """A CUDA machine as the config sees it: available, not initialised; torch's own queries would initialise it."""

    def initialises(*args, **kwargs):
        raise AssertionError("this call would initialise CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", initialises)
    monkeypatch.setattr(torch.cuda, "get_device_name", initialises)
    monkeypatch.setattr(torch.cuda, "get_device_properties", initialises)
    facts = {"value": ("NVIDIA H200", (9, 0))}
    monkeypatch.setattr(precision_mod, "_nvml_facts", lambda: facts["value"])
    precision_mod._uninitialised_facts.cache_clear()
    yield facts
    precision_mod._uninitialised_facts.cache_clear()


def test_precision_auto_does_not_initialise_cuda(fake_h200) -> None:
    """Defect: `precision: auto` initialised CUDA while the config was read (fork launchers then refuse)."""
    value, why = precision_mod.resolve_precision("auto", "auto")
    assert value == "bf16-mixed" and "NVIDIA H200" in why
    assert precision_mod.resolve_matmul_precision("auto", "cuda")[0] == "high"
    kwargs, notes = Speedups(precision="auto").trainer_kwargs(accelerator="gpu")
    assert kwargs["precision"] == "bf16-mixed"


def test_precision_auto_on_an_old_gpu_picks_fp16(fake_h200) -> None:
    fake_h200["value"] = ("Tesla V100", (7, 0))
    assert precision_mod.resolve_precision("auto", "cuda")[0] == "16-mixed"


def test_fp8_resolves_on_hopper_with_torchao(fake_h200, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_mod, "torchao_float8_available", lambda: True)
    ok, why = precision_mod.resolve_float8("cuda")
    assert ok and "9.0" in why
    value, why = precision_mod.resolve_precision("fp8", "cuda")
    assert value == "bf16-mixed" and why.startswith("fp8:")
    cbs = Speedups(precision="fp8").callbacks(accelerator="cuda")
    assert any(isinstance(cb, Float8Training) for cb in cbs)


@pytest.mark.parametrize(
    ("cap", "torchao", "reason"),
    [((8, 0), True, "compute capability 8.0"), ((9, 0), False, "torchao is not installed")],
)
def test_fp8_skips_with_one_line_reason(fake_h200, monkeypatch: pytest.MonkeyPatch, cap, torchao, reason) -> None:
    fake_h200["value"] = ("NVIDIA GPU", cap)
    monkeypatch.setattr(precision_mod, "torchao_float8_available", lambda: torchao)
    ok, why = precision_mod.resolve_float8("cuda")
    assert not ok and reason in why and "\n" not in why
    value, why = precision_mod.resolve_precision("fp8", "cuda")
    assert value == "bf16-mixed" and why.startswith("fp8 skipped") and reason in why
    assert not any(isinstance(cb, Float8Training) for cb in Speedups(precision="fp8").callbacks(accelerator="cuda"))


def test_fp8_on_cpu_is_a_one_line_skip() -> None:
    ok, why = precision_mod.resolve_float8("cpu")
    assert not ok and "CUDA GPU" in why
    kwargs, notes = Speedups(precision="fp8").trainer_kwargs(accelerator="cpu")
    line = next(reason for name, _, reason in notes if name == "precision (T05)")
    assert "fp8 skipped" in line and "\n" not in line
    assert kwargs["precision"] in ("32-true", "bf16-mixed")  # what auto picks on this CPU


def test_float8_callback_skips_on_cpu_and_changes_nothing() -> None:
    model = Lin()
    cb = Float8Training()
    _trainer(max_steps=1, callbacks=[cb]).fit(model)
    assert cb.status == ("skipped", "skipped, float8 needs a CUDA GPU of compute capability 8.9+")
    assert all(type(m) is nn.Linear for m in model.net if isinstance(m, nn.Linear))


def test_float8_skip_reason_with_faked_device_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(float8_mod, "on_cuda", lambda trainer: True)
    monkeypatch.setattr(float8_mod, "cuda_device_facts", lambda index=None: ("NVIDIA H200", (9, 0)))
    monkeypatch.setattr(float8_mod, "torchao_float8_available", lambda: True)
    trainer = types.SimpleNamespace(
        strategy=types.SimpleNamespace(root_device=torch.device("cuda", 0)), precision="bf16-mixed"
    )
    assert float8_skip_reason(trainer) is None  # type: ignore[arg-type]
    trainer.precision = "32-true"
    assert "bf16" in (float8_skip_reason(trainer) or "")  # type: ignore[arg-type]
    monkeypatch.setattr(float8_mod, "cuda_device_facts", lambda index=None: ("NVIDIA A100", (8, 0)))
    trainer.precision = "bf16-mixed"
    assert "8.0" in (float8_skip_reason(trainer) or "")  # type: ignore[arg-type]


def test_float8_eligible_layers() -> None:
    assert float8_eligible(nn.Linear(32, 64), "a") and not float8_eligible(nn.Linear(30, 64), "b")
    assert not float8_eligible(nn.Conv2d(16, 16, 3), "c")
    with pytest.raises(ValueError, match="recipe"):
        Float8Training(recipe="fast")  # type: ignore[arg-type]


# ------------------------------------------------------------------ MFU: Lightning's FLOPs table
def test_lightning_flops_table_has_no_plain_h200(monkeypatch: pytest.MonkeyPatch) -> None:
    """Confirms: a plain 'NVIDIA H200' name matches no entry, so ThroughputMonitor would log no MFU."""
    from lightning.fabric.utilities.throughput import get_available_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert get_available_flops(torch.device("cuda"), torch.bfloat16) is None


def test_doctor_t06_says_lightning_refuses_to_clip_fused_under_bf16_mixed():
    """Lightning issue 21435: bf16-mixed + a fused optimizer + clipping fails; the doctor says so with the fix."""
    from lightning_speedups.inspection import Facts
    from lightning_speedups.tips import get_tip

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    facts = Facts(collected=True, optimizers=[opt], precision="bf16-mixed", gradient_clip_val=1.0)
    finding = get_tip("T06").check(facts)
    assert finding.status == "finding" and finding.severity == "high", finding.evidence
    assert "21435" in finding.evidence
    plain = get_tip("T06").check(Facts(collected=True, optimizers=[opt], precision="32-true", gradient_clip_val=1.0))
    assert plain.status == "ok", plain.evidence


def test_bench_probe_times_cuda_windows_with_events_and_one_sync(monkeypatch):
    """bench's probe must not synchronise at every batch boundary on CUDA (that hides the overlap
    pinned memory and non_blocking copies buy): it records events and synchronises once per window."""
    from lightning_speedups.bench.measure import BenchProbe

    clock = {"t": 0.0}
    syncs: list[str] = []

    class FakeEvent:
        def __init__(self) -> None:
            self.t = clock["t"]

        def elapsed_time(self, other: FakeEvent) -> float:
            assert syncs, "an event was read before the window's synchronisation"
            return (other.t - self.t) * 1000.0

    from lightning_speedups.functional.timing import Timeline

    probe = BenchProbe(warmup=1, steps=3, memory_step=False)
    probe._cuda = True
    probe._timeline = Timeline(torch.device("cuda"))  # what on_fit_start sets for a model on CUDA
    monkeypatch.setattr(probe, "_mark", lambda: FakeEvent())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)

    class T:
        should_stop = False

    trainer = T()
    probe.on_train_start(trainer, None)
    for n in range(4):
        clock["t"] += 0.5  # waiting for the batch
        probe.on_train_batch_start(trainer, None, torch.zeros(2, 1), n)
        clock["t"] += 1.0  # the step
        probe.on_train_batch_end(trainer, None, None, torch.zeros(2, 1), n)
        if n == 0:
            assert syncs == ["sync"]  # the peak-memory reset, before the timed window
    assert syncs == ["sync", "sync"]  # one more for the whole window, none per batch
    assert probe.step_times == pytest.approx([1.5, 1.5, 1.5])
    assert probe.wait_times == pytest.approx([0.5, 0.5, 0.5])
    assert probe.done and trainer.should_stop
