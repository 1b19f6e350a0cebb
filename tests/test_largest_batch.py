"""Tests of T04: the largest batch that fits within a budget, learning-rate scaling, resume."""

from __future__ import annotations

import math
from typing import Any, Optional

import pytest
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from lightning.pytorch.loggers.logger import Logger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks.largest_batch import LargestBatch
from lightning_speedups.functional.batch_size import (
    find_largest_batch_size,
    largest_divisor_batch,
    lr_scale_factor,
    scale_lr_scheduler,
    scale_optimizer_lrs,
)
from lightning_speedups.functional.memory import (
    LiveTensorMemory,
    MemoryBudgetExceeded,
    parse_memory_budget,
    total_memory_bytes,
)

GiB = 2**30


# ---------------------------------------------------------------------------- functional
def test_parse_memory_budget_forms() -> None:
    total = 8 * GiB
    assert parse_memory_budget(123456, total) == 123456
    assert parse_memory_budget("2GiB", total) == 2 * GiB
    assert parse_memory_budget("2G", total) == 2 * GiB
    assert parse_memory_budget("512MB", total) == 512 * 10**6
    assert parse_memory_budget(0.25, total) == 2 * GiB
    assert parse_memory_budget("0.25", total) == 2 * GiB
    assert parse_memory_budget("25%", total) == 2 * GiB
    assert parse_memory_budget("1000", total) == 1000


@pytest.mark.parametrize(
    ("budget", "why"),
    [
        (-1, "negative"),
        ("-2GiB", "negative"),
        (0, "zero"),
        (1.5, "float above 1"),
        ("150%", "fraction in \\(0, 1\\]"),
        ("lots", "cannot be read"),
        ("1.5", "not a whole number"),
        (16 * GiB, "larger than the memory"),
        ("9GiB", "larger than the memory"),
    ],
)
def test_parse_memory_budget_errors_name_the_argument_and_fix(budget: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        parse_memory_budget(budget, total=8 * GiB)
    assert "`memory_budget=" in str(info.value) and "Pass a positive number of bytes" in str(info.value)
    with pytest.raises(TypeError, match="memory_budget"):
        parse_memory_budget([1], total=8 * GiB)  # type: ignore[arg-type]


def test_find_largest_batch_size_grid_and_trials() -> None:
    found, trials = find_largest_batch_size(lambda b: b <= 100, multiple=8)
    assert found == 96
    assert trials == [
        (8, True),
        (16, True),
        (32, True),
        (64, True),
        (128, False),
        (96, True),
        (112, False),
        (104, False),
    ]
    assert find_largest_batch_size(lambda b: b <= 100, multiple=8, max_batch_size=50)[0] == 48
    assert find_largest_batch_size(lambda b: b <= 100, multiple=1)[0] == 100
    assert find_largest_batch_size(lambda b: False, multiple=8) == (0, [(8, False)])

    def oom_above_40(b: int) -> bool:
        if b > 40:
            raise MemoryBudgetExceeded("DefaultCPUAllocator: can't allocate memory: simulated")
        return True

    assert find_largest_batch_size(oom_above_40, multiple=8)[0] == 40

    def broken(b: int) -> bool:
        raise RuntimeError("a real bug")

    with pytest.raises(RuntimeError, match="a real bug"):
        find_largest_batch_size(broken)


def test_largest_divisor_and_lr_factor() -> None:
    assert largest_divisor_batch(96, 256, 8) == 64
    assert largest_divisor_batch(96, 96, 8) == 96
    assert largest_divisor_batch(64, 100, 8) == 0
    assert lr_scale_factor(96, 32) == 3.0
    assert lr_scale_factor(128, 32, "sqrt") == 2.0
    assert lr_scale_factor(128, 32, None) == 1.0
    with pytest.raises(ValueError, match="lr_rule"):
        lr_scale_factor(1, 1, "cubic")


def test_live_tensor_memory_counts_views_once_and_not_preexisting_data() -> None:
    data = torch.zeros(1000, 10)  # 40 kB made before: not counted, nor are its views
    w = torch.zeros(10, 10)
    with LiveTensorMemory(seed=[w]) as mem:
        rows = [data[i] for i in range(4)]  # views of the data set
        batch = torch.stack(rows)  # 160 B, new
        out = batch @ w  # 160 B
        v = out.view(-1)  # a view: no new bytes
        del rows
    assert mem.peak == w.nbytes + batch.nbytes + out.nbytes
    assert v.untyped_storage().nbytes() == out.nbytes
    with pytest.raises(MemoryBudgetExceeded, match="DefaultCPUAllocator"):
        with LiveTensorMemory(limit=1000):
            torch.ones(1000)


def _run_schedule(scheduler: Any, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_scaled_one_cycle_equals_one_built_with_scaled_settings() -> None:
    def make(max_lr: float, total: int):
        opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=max_lr, momentum=0.9)
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total)

    opt, sched = make(0.1, 300)
    scale_optimizer_lrs(opt, 3.0)
    scale_lr_scheduler(sched, 3.0, length_factor=1 / 3)  # batch x3: a third of the steps
    ref_opt, ref_sched = make(0.3, 100)
    assert sched.total_steps == 100
    ours, ref = _run_schedule(sched, opt, 100), _run_schedule(ref_sched, ref_opt, 100)
    assert ours == pytest.approx(ref, rel=1e-9)
    assert max(ours) == pytest.approx(0.3)


def test_scaled_warmup_and_cyclic_schedules() -> None:
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=40)
    scale_optimizer_lrs(opt, 2.0)
    scale_lr_scheduler(warm, 2.0, length_factor=0.5)
    assert warm.total_iters == 20
    lrs = _run_schedule(warm, opt, 25)
    assert lrs[0] == pytest.approx(0.02) and lrs[20] == pytest.approx(0.2) and lrs[24] == pytest.approx(0.2)

    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.01, momentum=0.9)
    cyc = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=10)
    scale_optimizer_lrs(opt, 2.0)
    scale_lr_scheduler(cyc, 2.0, length_factor=0.5)
    lrs = _run_schedule(cyc, opt, 11)
    assert lrs[0] == pytest.approx(0.02) and lrs[5] == pytest.approx(0.2) and lrs[10] == pytest.approx(0.02)


# ---------------------------------------------------------------------------- the callback
class Model(LightningModule):
    def __init__(self, batch_size: int = 32, lr: float = 0.1, schedule: Optional[str] = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(x.shape[0])
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g))
        return DataLoader(data, batch_size=self.hparams.batch_size, shuffle=True)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        if self.hparams.schedule == "onecycle":
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr, total_steps=300)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        return opt


class LinearMemory(LargestBatch):
    """A deterministic memory model: ``fixed + per_sample * batch`` bytes; records its calls."""

    def __init__(self, *args: Any, fixed: int = 1_000_000, per_sample: int = 10_000, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fixed, self.per_sample = fixed, per_sample
        self.calls: list[tuple[int, int]] = []

    def measure_peak(self, trainer, pl_module, batch_size, accumulate_grad_batches, limit):
        self.calls.append((batch_size, accumulate_grad_batches))
        return self.fixed + self.per_sample * batch_size


class NoSearch(LargestBatch):
    def measure_peak(self, *args: Any, **kwargs: Any) -> int:
        raise AssertionError("a resumed run must not search")


class MemoryLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, float] = {}

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        self.metrics.update(metrics)


def _trainer(callbacks: list, tmp_path, **kwargs: Any) -> Trainer:
    defaults: dict[str, Any] = dict(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    defaults.update(kwargs)
    return Trainer(callbacks=callbacks, **defaults)


@pytest.mark.parametrize(("rule", "lr"), [("linear", 0.3), ("sqrt", 0.1 * math.sqrt(3)), (None, 0.1)])
def test_budget_picks_multiple_of_8_and_scales_lr_exactly(tmp_path, rule: Optional[str], lr: float) -> None:
    # 1 MB fixed + 10 kB per sample within 2 MB: at most 100 samples -> 96, the largest multiple of 8
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0, lr_rule=rule)
    logger = MemoryLogger()
    model = Model(batch_size=32, lr=0.1)
    trainer = _trainer([cb], tmp_path, logger=logger)
    trainer.fit(model)
    assert [b for b, _ in cb.calls] == [8, 16, 32, 64, 128, 96, 112, 104]
    assert model.hparams.batch_size == 96 and model.seen == [96, 96]
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(lr, rel=1e-12)
    assert cb.state_dict()["batch_size"] == 96 and cb.state_dict()["lrs"] == [[pytest.approx(lr)]]
    assert logger.metrics["largest_batch/batch_size"] == 96
    assert logger.metrics["largest_batch/lr_opt0_group0"] == pytest.approx(lr)
    assert cb.status is not None and cb.status[0] == "active" and "batch 32 -> 96" in cb.status[1]


def test_margin_and_max_batch_size_and_base_batch(tmp_path) -> None:
    # margin 0.1: limit 1.8 MB -> at most 80 samples; base batch 256 declared for lr 0.1
    cb = LinearMemory(memory_budget=2_000_000, margin=0.1, base_batch_size=256)
    model = Model(batch_size=32, lr=0.1)
    trainer = _trainer([cb], tmp_path)
    trainer.fit(model)
    assert model.hparams.batch_size == 80
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 80 / 256)
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0, max_batch_size=40)
    model = Model(batch_size=32)
    _trainer([cb], tmp_path).fit(model)
    assert model.hparams.batch_size == 40


def test_one_cycle_schedule_scaled_in_the_trainer(tmp_path) -> None:
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0)
    trainer = _trainer([cb], tmp_path)
    trainer.fit(Model(batch_size=32, lr=0.1, schedule="onecycle"))
    sched = trainer.lr_scheduler_configs[0].scheduler
    assert sched.total_steps == 100  # 300 steps of 32 samples -> 100 steps of 96
    assert trainer.optimizers[0].param_groups[0]["max_lr"] == pytest.approx(0.3)


def test_real_measure_search_then_training_equals_setting_it_by_hand(tmp_path) -> None:
    budget = 400_000  # bytes of live tensors for this tiny model; the exact batch depends on torch's kernels
    cb = LargestBatch(memory_budget=budget, margin=0.0)
    seed_everything(0)
    model = Model(batch_size=32, lr=0.1)
    _trainer([cb], tmp_path).fit(model)
    found = model.hparams.batch_size
    peaks = [p for _, p in cb.trials if p is not None]
    assert found % 8 == 0 and 8 < found < 512
    assert peaks == sorted(peaks) and max(peaks) <= budget  # monotone, and what fitted is within budget
    assert any(p is None for _, p in cb.trials)  # something went over the budget and was stopped
    assert all(p is None for b, p in cb.trials if b > found)  # every larger size tried went over
    lr = cb.state_dict()["lrs"][0][0]
    assert lr == pytest.approx(0.1 * found / 32)
    # the trials left no trace: same weights as a run with that batch and lr set by hand
    seed_everything(0)
    by_hand = Model(batch_size=found, lr=lr)
    _trainer([], tmp_path).fit(by_hand)
    for a, b in zip(model.parameters(), by_hand.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_resume_keeps_batch_and_lr_without_searching(tmp_path) -> None:
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0)
    trainer = _trainer([cb], tmp_path)
    trainer.fit(Model(batch_size=32, lr=0.1))
    ckpt = tmp_path / "run.ckpt"
    trainer.save_checkpoint(ckpt)

    resumed_cb = NoSearch(memory_budget=2_000_000, margin=0.0)
    model = Model(batch_size=32, lr=0.1)
    trainer = _trainer([resumed_cb], tmp_path, max_steps=4)
    trainer.fit(model, ckpt_path=ckpt)
    assert model.hparams.batch_size == 96 and model.seen == [96, 96]
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.3)  # not scaled twice
    assert resumed_cb.state_dict()["batch_size"] == 96
    assert resumed_cb.status is not None and "restored" in resumed_cb.status[1]


def test_keep_effective_batch_lowers_accumulation(tmp_path) -> None:
    # batch 16 x accumulate 8 = 128 per step; fits up to 100 -> 64 (divides 128) x accumulate 2
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0, keep_effective_batch=True)
    model = Model(batch_size=16, lr=0.1)
    trainer = _trainer([cb], tmp_path, accumulate_grad_batches=8)
    trainer.fit(model)
    assert model.hparams.batch_size == 64 and trainer.accumulate_grad_batches == 2
    assert model.seen == [64] * 4  # 2 optimizer steps x 2 micro-batches
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1)  # same effective batch, same lr
    assert max(b for b, _ in cb.calls) <= 128
    assert all(acc == (2 if b < 128 else 1) for b, acc in cb.calls)


def test_keep_effective_batch_that_cannot_divide_is_a_clear_error(tmp_path) -> None:
    cb = LinearMemory(memory_budget=2_000_000, keep_effective_batch=True)
    with pytest.raises(ValueError, match="not divisible by 8"):
        _trainer([cb], tmp_path, accumulate_grad_batches=3).fit(Model(batch_size=10))


def test_batch_size_on_a_datamodule(tmp_path) -> None:
    class Data(LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 8

        def train_dataloader(self):
            data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
            return DataLoader(data, batch_size=self.batch_size)

    class Plain(Model):
        def __init__(self) -> None:
            LightningModule.__init__(self)
            self.net = nn.Sequential(nn.Linear(16, 4))
            self.seen = []

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data, model = Data(), Plain()
    cb = LinearMemory(memory_budget=2_000_000, margin=0.0)
    _trainer([cb], tmp_path).fit(model, datamodule=data)
    assert data.batch_size == 96 and model.seen == [96, 96]


def test_bad_budgets_give_clear_messages(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"`memory_budget=-1`.*negative"):
        LargestBatch(memory_budget=-1)
    too_big = total_memory_bytes() * 2
    with pytest.raises(ValueError, match=r"`memory_budget=.*larger than the memory available"):
        _trainer([LargestBatch(memory_budget=too_big)], tmp_path).fit(Model())
    with pytest.raises(ValueError, match=r"`memory_budget=4000`.*too small for a batch of 8.*at least memory_budget="):
        _trainer([LargestBatch(memory_budget=4000)], tmp_path).fit(Model())


def test_other_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="`multiple`"):
        LargestBatch(memory_budget="1GiB", multiple=0)
    with pytest.raises(ValueError, match="`lr_rule`"):
        LargestBatch(memory_budget="1GiB", lr_rule="cubic")
    with pytest.raises(ValueError, match="`margin`"):
        LargestBatch(memory_budget="1GiB", margin=1.0)
    with pytest.raises(ValueError, match="`base_batch_size`"):
        LargestBatch(memory_budget="1GiB", base_batch_size=0)


def test_cpu_without_budget_is_skipped_with_a_warning(tmp_path) -> None:
    cb = LargestBatch()
    model = Model(batch_size=32)
    with pytest.warns(UserWarning, match="memory_budget"):
        _trainer([cb], tmp_path).fit(model)
    assert model.seen == [32, 32] and cb.status is not None and cb.status[0] == "skipped"


def test_given_batch_size_applies_and_scales_without_search(tmp_path) -> None:
    cb = NoSearch(batch_size=64)
    model = Model(batch_size=32, lr=0.1)
    trainer = _trainer([cb], tmp_path)
    trainer.fit(model)
    assert model.seen == [64, 64] and trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.2)


def test_multi_process_search_is_refused_before_any_collective(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Trainer, "world_size", property(lambda self: 2))
    with pytest.raises(MisconfigurationException, match="single-process.*LargestBatch\\(batch_size="):
        _trainer([LargestBatch(memory_budget="1GiB")], tmp_path).fit(Model())


def test_out_of_memory_during_a_trial_counts_as_not_fitting(tmp_path) -> None:
    class OomAbove100(LinearMemory):
        def measure_peak(self, trainer, pl_module, batch_size, accumulate_grad_batches, limit):
            self.calls.append((batch_size, accumulate_grad_batches))
            if batch_size > 100:
                raise MemoryBudgetExceeded("DefaultCPUAllocator: can't allocate memory: simulated")
            return 1

    cb = OomAbove100(memory_budget=2_000_000, margin=0.0)
    model = Model(batch_size=32, lr=0.1)
    _trainer([cb], tmp_path).fit(model)
    assert model.hparams.batch_size == 96 and model.seen == [96, 96]
    assert (128, None) in cb.trials and (96, 1) in cb.trials


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_budget_search(tmp_path) -> None:
    cb = LargestBatch(memory_budget="256MiB", margin=0.0)
    model = Model(batch_size=32, lr=0.1)
    trainer = _trainer([cb], tmp_path, accelerator="cuda", devices=1)
    trainer.fit(model)
    found = model.hparams.batch_size
    # the trial steps are real training steps of the model on CUDA: the run's own two come last
    assert found % 8 == 0 and model.seen[-2:] == [found, found] and len(model.seen) > 2
    assert all(p is None or p <= 256 * 2**20 for _, p in cb.trials)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * found / 32)
