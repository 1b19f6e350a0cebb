"""Tests of the guard callbacks: SyncGuard (T08), DebugMode / DebugToolsCheck (T14),
NoGradEvalCheck (T17), ShapeWatch (T07)."""

from __future__ import annotations

import os
import warnings

import lightning
import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks import DebugMode, DebugToolsCheck, NoGradEvalCheck, ShapeWatch, SyncGuard
from lightning_speedups.callbacks import shape_watch as shape_watch_mod
from lightning_speedups.callbacks import sync_guard as sync_guard_mod
from lightning_speedups.functional import debug_tools, syncs
from lightning_speedups.functional.syncs import SyncError

SYNC_MESSAGE = "called a synchronizing CUDA operation"


def _fake_lightning_sync():
    path = os.path.join(os.path.dirname(lightning.__file__), "pytorch", "callbacks", "progress", "fake_bar.py")
    namespace = {"warnings": warnings}
    exec(compile(f"def sync():\n    warnings.warn({SYNC_MESSAGE!r}, UserWarning)\n", path, "exec"), namespace)
    return namespace["sync"]


lightning_sync = _fake_lightning_sync()


def user_sync():
    warnings.warn(SYNC_MESSAGE, UserWarning)  # stands in for `loss.item()` under sync-debug mode


class Model(LightningModule):
    def __init__(self, hook=None, val_hook=None):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.hook = hook
        self.val_hook = val_hook
        self.seen = []

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x = batch[0]
        loss = self(x).pow(2).mean()
        if self.hook is not None:
            self.hook(self)
        return loss

    def validation_step(self, batch, batch_idx):
        if self.val_hook is not None:
            return self.val_hook(self, batch[0])
        return self(batch[0]).sum()

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        if self.val_hook is not None:
            return self.val_hook(self, batch[0])
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(n=8, batch_size=4):
    return DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=batch_size)


def make_trainer(callbacks, **kwargs):
    defaults = dict(
        max_steps=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    defaults.update(kwargs)
    return Trainer(callbacks=callbacks, **defaults)


def possible_user_warnings(record):
    """Advice warnings from the guards (Lightning's own PossibleUserWarnings are left out)."""
    ours = ("SyncGuard", "NoGradEvalCheck", "ShapeWatch")
    return [
        str(w.message)
        for w in record
        if issubclass(w.category, PossibleUserWarning)
        and (str(w.message).startswith(ours) or "debugging tool(s) left on" in str(w.message))
    ]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING", "TORCH_DISTRIBUTED_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(debug_tools, "_python_tracers", lambda: [])  # coverage / debugger attached to pytest


@pytest.fixture
def global_state():
    """Snapshot of the global flags the guards may touch; asserts they are back after the test."""
    before = (
        torch.is_anomaly_enabled(),
        torch.is_anomaly_check_nan_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        warnings.showwarning,
        list(warnings.filters),
    )
    yield
    after = (
        torch.is_anomaly_enabled(),
        torch.is_anomaly_check_nan_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        warnings.showwarning,
        list(warnings.filters),
    )
    assert after == before
    assert syncs._HUB.installed == [] and syncs._HUB.active == []


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend the trainer runs on CUDA and emulate the sync-debug mode."""
    state = {"mode": 0}
    modes = {"default": 0, "warn": 1, "error": 2}
    monkeypatch.setattr(sync_guard_mod, "on_cuda", lambda trainer: True)
    monkeypatch.setattr(syncs._HUB, "get_mode", lambda: state["mode"])
    monkeypatch.setattr(syncs._HUB, "set_mode", lambda m: state.__setitem__("mode", modes.get(m, m)))
    return state


# --------------------------------------------------------------------------------------------------
# SyncGuard
# --------------------------------------------------------------------------------------------------


def test_sync_guard_validates_mode():
    with pytest.raises(ValueError, match="mode"):
        SyncGuard(mode="strict")


def test_sync_guard_on_cpu_reports_skipped_and_does_nothing(global_state):
    before = warnings.showwarning
    hooks_in_step = []

    def step(m):
        hooks_in_step.append(warnings.showwarning)
        user_sync()  # not captured: shown as usual

    guard = SyncGuard()
    with pytest.warns(UserWarning, match=SYNC_MESSAGE):
        make_trainer([guard], max_steps=1).fit(Model(hook=step), loader())
    assert guard.status == ("skipped", "skipped, nothing to check on CPU")
    assert guard.steps == 0 and guard.user_syncs == 0
    assert hooks_in_step and all(h is before for h in hooks_in_step)


def test_sync_guard_counts_and_attributes(global_state, fake_cuda):
    modes_in_step = []

    def step(m):
        modes_in_step.append(fake_cuda["mode"])
        user_sync()
        lightning_sync()
        lightning_sync()

    guard = SyncGuard(mode="count")
    make_trainer([guard], max_steps=3).fit(Model(hook=step), loader(n=12))
    assert modes_in_step == [1, 1, 1]  # "warn" inside the step window
    assert fake_cuda["mode"] == 0  # restored after each window and at teardown
    assert guard.steps == 3
    assert guard.user_syncs == 3
    assert guard.lightning_syncs == 6
    user_sites = [s for s in guard.sites if s.owner == "user"]
    assert len(user_sites) == 1 and "test_guards.py" in user_sites[0].location
    assert "in user_sync" in user_sites[0].location
    (lightning_site,) = [s for s in guard.sites if s.owner == "lightning"]
    assert "progress bar" in lightning_site.kind
    assert guard.active and "3 in your code" in guard.status[1]


def test_sync_guard_no_syncs_is_quiet(global_state, fake_cuda):
    guard = SyncGuard(mode="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([guard]).fit(Model(), loader())
    assert possible_user_warnings(record) == []
    assert guard.user_syncs == 0 and guard.steps == 2


def test_sync_guard_warn_mode_warns_once_per_user_site(global_state, fake_cuda):
    def step(m):
        user_sync()
        lightning_sync()

    guard = SyncGuard(mode="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([guard], max_steps=3).fit(Model(hook=step), loader(n=12))
    messages = [m for m in possible_user_warnings(record) if m.startswith("SyncGuard")]
    assert len(messages) == 1
    assert "test_guards.py" in messages[0] and "user_sync" in messages[0]
    assert guard.user_syncs == 3 and guard.lightning_syncs == 3


def test_sync_guard_error_mode_raises_on_user_sync_and_restores(global_state, fake_cuda):
    guard = SyncGuard(mode="error")
    with pytest.raises(SyncError, match="user_sync"):
        make_trainer([guard]).fit(Model(hook=lambda m: (lightning_sync(), user_sync())), loader())
    assert fake_cuda["mode"] == 0
    assert guard.lightning_syncs == 1  # Lightning's own sync is counted, not an error


def test_sync_guard_error_mode_allows_lightning_syncs(global_state, fake_cuda):
    guard = SyncGuard(mode="error")
    make_trainer([guard]).fit(Model(hook=lambda m: lightning_sync()), loader())
    assert guard.lightning_syncs == 2 and guard.user_syncs == 0


class ItemModel(Model):
    def training_step(self, batch, batch_idx):
        loss = self(batch[0]).pow(2).mean()
        self.seen.append(loss.item())  # a real device sync on CUDA
        self.log("loss", loss, prog_bar=True)
        return loss


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sync_guard_real_cuda(global_state):
    prev = torch.cuda.get_sync_debug_mode()
    guard = SyncGuard(mode="count")
    trainer = make_trainer([guard], accelerator="gpu", devices=1, max_steps=3, enable_progress_bar=True)
    trainer.fit(ItemModel(), loader(n=12))
    assert guard.user_syncs >= 3
    assert any("loss.item()" in s.code for s in guard.sites if s.owner == "user")
    # nothing Lightning does is blamed on the user: every user site is in this file
    assert all("test_guards.py" in s.location for s in guard.sites if s.owner == "user")
    assert torch.cuda.get_sync_debug_mode() == prev


# --------------------------------------------------------------------------------------------------
# DebugToolsCheck / DebugMode
# --------------------------------------------------------------------------------------------------


def test_debug_tools_check_fires_on_detect_anomaly(clean_env, global_state):
    check = DebugToolsCheck()
    with pytest.warns(PossibleUserWarning, match="anomaly detection"):
        make_trainer([check], detect_anomaly=True).fit(Model(), loader())
    assert [t.id for t in check.found] == ["anomaly_detection"]
    assert check.active


def test_debug_tools_check_fires_on_lightning_profiler(clean_env, global_state):
    check = DebugToolsCheck()
    with pytest.warns(PossibleUserWarning, match="SimpleProfiler"):
        make_trainer([check], profiler="simple").fit(Model(), loader())
    assert [t.id for t in check.found] == ["lightning_profiler"]


def test_debug_tools_check_quiet_on_a_clean_run(clean_env, global_state):
    check = DebugToolsCheck()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([check]).fit(Model(), loader())
    assert possible_user_warnings(record) == []
    # it checked and found nothing: active (it ran), with no warning
    assert check.found == [] and check.status == ("active", "checked: no debugging tools left on")


def test_debug_tools_check_ignore(clean_env, global_state):
    check = DebugToolsCheck(ignore=["anomaly_detection"])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([check], detect_anomaly=True).fit(Model(), loader())
    assert [m for m in possible_user_warnings(record) if "debugging tool" in m] == []
    with pytest.raises(ValueError, match="ignore"):
        DebugToolsCheck(ignore=["anomaly"])
    with pytest.raises(TypeError, match="ignore"):
        DebugToolsCheck(ignore="anomaly_detection")


@pytest.mark.parametrize("check_first", [True, False])
def test_debug_mode_and_check_stay_quiet_and_restore(clean_env, global_state, check_first):
    in_step = []

    def step(m):
        in_step.append((torch.is_anomaly_enabled(), torch.are_deterministic_algorithms_enabled()))

    mode = DebugMode(anomaly=True, sync_guard="warn", deterministic=True)
    check = DebugToolsCheck()
    callbacks = [check, mode] if check_first else [mode, check]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer(callbacks).fit(Model(hook=step), loader())
    assert in_step == [(True, True), (True, True)]  # the tools really were on
    assert [m for m in possible_user_warnings(record) if "debugging tool" in m] == []
    assert check.found == []
    assert {t.id for t in check.deliberate} >= {"deterministic_algorithms", "cudnn_deterministic"}
    # global_state asserts anomaly / deterministic / cudnn flags are back


def test_debug_mode_covers_trainer_detect_anomaly(clean_env, global_state):
    check = DebugToolsCheck()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([DebugMode(), check], detect_anomaly=True).fit(Model(), loader())
    assert [m for m in possible_user_warnings(record) if "debugging tool" in m] == []


def test_debug_mode_without_anomaly_does_not_excuse_it(clean_env, global_state):
    check = DebugToolsCheck()
    with pytest.warns(PossibleUserWarning, match="anomaly detection"):
        make_trainer([DebugMode(anomaly=False, sync_guard=None), check], detect_anomaly=True).fit(Model(), loader())
    assert [t.id for t in check.found] == ["anomaly_detection"]


def test_debug_mode_sync_guard_counts_and_defers_to_the_trainers_own(global_state, fake_cuda):
    mode = DebugMode(sync_guard="count")
    make_trainer([mode]).fit(Model(hook=lambda m: user_sync()), loader())
    assert mode.sync_guard.user_syncs == 2

    mode, own = DebugMode(sync_guard="warn"), SyncGuard(mode="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([mode, own]).fit(Model(hook=lambda m: user_sync()), loader())
    assert own.user_syncs == 2 and mode.sync_guard.steps == 0
    assert len([m for m in possible_user_warnings(record) if m.startswith("SyncGuard")]) == 1


def test_debug_mode_restores_after_a_failed_fit(global_state):
    def boom(m):
        assert torch.is_anomaly_enabled()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        make_trainer([DebugMode(deterministic="warn")]).fit(Model(hook=boom), loader())


def test_debug_mode_validates():
    with pytest.raises(ValueError, match="sync_guard"):
        DebugMode(sync_guard="loud")
    with pytest.raises(ValueError, match="deterministic"):
        DebugMode(deterministic="yes")
    with pytest.raises(TypeError, match="anomaly"):
        DebugMode(anomaly="on")


# --------------------------------------------------------------------------------------------------
# NoGradEvalCheck
# --------------------------------------------------------------------------------------------------


def eval_trainer(callbacks, **kwargs):
    return make_trainer(callbacks, inference_mode=False, limit_val_batches=2, num_sanity_val_steps=0, **kwargs)


def with_grad(m, x):
    with torch.enable_grad():
        return m(x).sum()


def test_no_grad_eval_fires_on_enable_grad_in_validation(global_state):
    check = NoGradEvalCheck()
    model = Model(val_hook=with_grad)
    with pytest.warns(PossibleUserWarning, match="validation batch 0 ran with gradients"):
        eval_trainer([check]).validate(model, loader())
    (finding,) = check.findings
    assert finding["tip"] == "T17" and finding["stage"] == "validate"
    assert "Linear 'layer' built an autograd graph" in finding["evidence"]
    assert "outputs" in finding["evidence"]
    assert not model.layer._forward_hooks  # hooks removed once the stage is decided


def test_no_grad_eval_quiet_on_normal_validation(global_state):
    check = NoGradEvalCheck()
    model = Model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        eval_trainer([check]).validate(model, loader())
        make_trainer([check], limit_val_batches=2).validate(model, loader())  # inference_mode=True
    assert [m for m in possible_user_warnings(record) if "NoGradEvalCheck" in m] == []
    assert check.findings == []
    assert not model.layer._forward_hooks


def test_no_grad_eval_quiet_on_frozen_model_with_grad_enabled(global_state):
    check = NoGradEvalCheck()
    model = Model(val_hook=with_grad)
    model.requires_grad_(False)  # grad mode on, but nothing builds a graph: no cost
    eval_trainer([check]).validate(model, loader())
    assert check.findings == []


def test_no_grad_eval_catches_grad_mode_leaking_into_the_next_batch(global_state):
    def leak(m, x):
        out = m(x).sum()
        torch.set_grad_enabled(True)  # leaks until Lightning's no_grad context exits
        return out.detach()

    check = NoGradEvalCheck(check_batches=2)
    eval_trainer([check]).validate(Model(val_hook=leak), loader())
    (finding,) = check.findings
    assert "validation batch 1" in finding["evidence"]
    assert "already True when the batch started" in finding["evidence"]


def test_no_grad_eval_prediction_and_stage_filter(global_state):
    check = NoGradEvalCheck()
    with pytest.warns(PossibleUserWarning, match="prediction batch 0"):
        make_trainer([check], inference_mode=False).predict(Model(val_hook=with_grad), loader())
    assert [f["stage"] for f in check.findings] == ["predict"]

    skip = NoGradEvalCheck(stages=["validate"])
    make_trainer([skip], inference_mode=False).predict(Model(val_hook=with_grad), loader())
    assert skip.findings == []


def test_no_grad_eval_validates():
    with pytest.raises(ValueError, match="check_batches"):
        NoGradEvalCheck(check_batches=0)
    with pytest.raises(ValueError, match="stages"):
        NoGradEvalCheck(stages=["train"])


# --------------------------------------------------------------------------------------------------
# ShapeWatch
# --------------------------------------------------------------------------------------------------


def varying_loader(lengths):
    class Ragged(torch.utils.data.Dataset):
        def __len__(self):
            return len(lengths)

        def __getitem__(self, i):
            return i

    def collate(idx):
        return (torch.randn(2, 4) if lengths[idx[0]] == 0 else torch.randn(lengths[idx[0]], 4),)

    return DataLoader(Ragged(), batch_size=1, collate_fn=collate)


@pytest.fixture
def benchmark_on(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)


def test_shape_watch_warns_when_benchmark_retunes(global_state, benchmark_on, monkeypatch):
    monkeypatch.setattr(shape_watch_mod, "on_cuda", lambda trainer: True)
    watch = ShapeWatch()
    with pytest.warns(PossibleUserWarning, match="3 distinct input shapes in 3 steps"):
        make_trainer([watch], max_steps=5).fit(Model(), varying_loader([3, 5, 7, 3, 5]))
    assert watch.distinct_shapes == 3 and watch.steps == 5
    assert watch.warned


def test_shape_watch_quiet_on_fixed_shapes_with_a_last_partial_batch(global_state, benchmark_on, monkeypatch):
    monkeypatch.setattr(shape_watch_mod, "on_cuda", lambda trainer: True)
    watch = ShapeWatch()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([watch], max_steps=3).fit(Model(), loader(n=10, batch_size=4))  # 4, 4, 2
    assert [m for m in possible_user_warnings(record) if "ShapeWatch" in m] == []
    assert watch.distinct_shapes == 2


def test_shape_watch_quiet_without_benchmark_or_cuda(global_state, monkeypatch):
    monkeypatch.setattr(shape_watch_mod, "on_cuda", lambda trainer: True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    watch = ShapeWatch()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make_trainer([watch], max_steps=5).fit(Model(), varying_loader([3, 5, 7, 9, 11]))
    assert watch.distinct_shapes == 5 and not watch.warned
    monkeypatch.undo()

    cpu_watch = ShapeWatch()
    with warnings.catch_warnings(record=True) as record2:
        warnings.simplefilter("always")
        prev = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        try:
            make_trainer([cpu_watch], max_steps=5).fit(Model(), varying_loader([3, 5, 7, 9, 11]))
        finally:
            torch.backends.cudnn.benchmark = prev
    assert cpu_watch.distinct_shapes == 5 and not cpu_watch.warned  # cudnn is not used on CPU
    assert [m for m in possible_user_warnings(record + record2) if "ShapeWatch" in m] == []


def test_shape_watch_validates():
    with pytest.raises(ValueError, match="max_shapes"):
        ShapeWatch(max_shapes=0)
