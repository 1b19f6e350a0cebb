"""Tests of the functional runtime checks: debug tools (T14), sync attribution (T08), eval autograd
watch (T17), shape tracking (T07)."""

from __future__ import annotations

import functools
import os
import sys
import warnings

import lightning
import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger

from lightning_speedups.functional import debug_tools, syncs
from lightning_speedups.functional.debug_tools import DEBUG_TOOL_IDS, find_debug_tools
from lightning_speedups.functional.eval_grads import EvalGradWatch, tensors_requiring_grad
from lightning_speedups.functional.shapes import ShapeTracker, batch_shape_signature
from lightning_speedups.functional.syncs import SYNC_WARNING_PATTERN, SyncError, SyncWatcher, classify_sync_frame

ENV_VARS = ("CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING", "TORCH_DISTRIBUTED_DEBUG")


@pytest.fixture
def clean_env(monkeypatch):
    """No debugging environment variables and no Python tracer (coverage, debugger) seen."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(debug_tools, "_python_tracers", lambda: [])
    assert not torch.is_anomaly_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic


def ids(trainer=None):
    return [t.id for t in find_debug_tools(trainer)]


def quiet_trainer(**kwargs):
    defaults = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    defaults.update(kwargs)
    return Trainer(**defaults)


# --------------------------------------------------------------------------------------------------
# find_debug_tools
# --------------------------------------------------------------------------------------------------


def test_nothing_on_by_default(clean_env):
    assert find_debug_tools() == []
    assert find_debug_tools(quiet_trainer()) == []


def test_anomaly_detection_found_with_cost_and_fix(clean_env):
    with torch.autograd.set_detect_anomaly(True, check_nan=True):
        tools = find_debug_tools()
    assert [t.id for t in tools] == ["anomaly_detection"]
    tool = tools[0]
    assert "check_nan=True" in tool.evidence
    assert tool.severity == "high"
    assert tool.tip == "T14" and tool.slug == "debug-off" and tool.fix and tool.cost
    # look-alike: the context manager with mode False does not turn it on
    with torch.autograd.set_detect_anomaly(False):
        assert "anomaly_detection" not in ids()


def test_trainer_detect_anomaly_is_found_before_fit(clean_env):
    from lightning_speedups.trainer.internals import detect_anomaly

    trainer = quiet_trainer(detect_anomaly=True)
    tools = find_debug_tools(trainer, trainer_anomaly=detect_anomaly(trainer))
    assert [t.id for t in tools] == ["anomaly_detection"]
    assert "Trainer(detect_anomaly=True)" in tools[0].evidence
    assert "Trainer(detect_anomaly=True)" in tools[0].fix


def test_torch_profiler_found_only_while_recording(clean_env):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert "autograd_profiler" in ids()
    assert "autograd_profiler" not in ids()
    with torch.autograd.profiler.profile(enabled=False):
        assert "autograd_profiler" not in ids()


def test_itt_ranges_found(clean_env):
    try:
        ctx = torch.autograd.profiler.emit_itt()
        ctx.__enter__()
    except Exception as err:  # pragma: no cover - builds without ITT
        pytest.skip(f"emit_itt unavailable: {err}")
    try:
        tools = find_debug_tools()
    finally:
        ctx.__exit__(None, None, None)
    assert [t.id for t in tools] == ["nvtx_emission"]
    assert "ITT" in tools[0].name


def test_lightning_profiler(clean_env):
    simple = find_debug_tools(quiet_trainer(profiler="simple"))
    assert [(t.id, t.severity) for t in simple] == [("lightning_profiler", "low")]
    advanced = find_debug_tools(quiet_trainer(profiler="advanced"))
    assert [(t.id, t.severity) for t in advanced] == [("lightning_profiler", "high")]


def test_deterministic_flags(clean_env):
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        tools = find_debug_tools()
        assert [t.id for t in tools] == ["deterministic_algorithms"]
        assert "warn_only" in tools[0].evidence
    finally:
        torch.use_deterministic_algorithms(False)
    prev = torch.backends.cudnn.deterministic
    try:
        torch.backends.cudnn.deterministic = True
        assert ids() == ["cudnn_deterministic"]
    finally:
        torch.backends.cudnn.deterministic = prev


@pytest.mark.parametrize(
    ("name", "value", "tool"),
    [
        ("CUDA_LAUNCH_BLOCKING", "1", "cuda_launch_blocking"),
        ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "no_cuda_memory_caching"),
        ("TORCH_DISTRIBUTED_DEBUG", "DETAIL", "distributed_debug"),
    ],
)
def test_environment_variables(clean_env, monkeypatch, name, value, tool):
    monkeypatch.setenv(name, value)
    assert ids() == [tool]
    # look-alikes: explicitly off
    monkeypatch.setenv(name, "OFF" if name == "TORCH_DISTRIBUTED_DEBUG" else "0")
    assert ids() == []


def test_python_tracer(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    previous = sys.gettrace()

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        tools = find_debug_tools()
    finally:
        sys.settrace(previous)
    tool = next(t for t in tools if t.id == "python_tracer")
    assert __name__ in tool.evidence
    if previous is None and sys.getprofile() is None:
        assert "python_tracer" not in ids()


def test_log_every_step_needs_a_logger(clean_env, tmp_path):
    assert ids(quiet_trainer(log_every_n_steps=1, logger=CSVLogger(tmp_path))) == ["log_every_step"]
    assert ids(quiet_trainer(log_every_n_steps=1)) == []  # no logger: nothing is copied
    assert ids(quiet_trainer(log_every_n_steps=50, logger=CSVLogger(tmp_path))) == []


def test_ids_are_declared(clean_env, monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    with torch.autograd.set_detect_anomaly(True):
        for tool in find_debug_tools(quiet_trainer(profiler="simple")):
            assert tool.id in DEBUG_TOOL_IDS
            assert tool.cost and tool.fix and tool.evidence


# --------------------------------------------------------------------------------------------------
# sync attribution
# --------------------------------------------------------------------------------------------------


def _fake_module(path: str, src: str) -> dict:
    namespace: dict = {"warnings": warnings, "sys": sys}
    exec(compile(src, path, "exec"), namespace)
    return namespace


LIGHTNING_DIR = os.path.dirname(lightning.__file__)
TORCH_DIR = os.path.dirname(torch.__file__)
SITE_DIR = os.path.dirname(LIGHTNING_DIR)

FAKE_PROGRESS = _fake_module(
    os.path.join(LIGHTNING_DIR, "pytorch", "callbacks", "progress", "fake_progress.py"),
    "def get_metrics(inner):\n    return inner()\n"
    "def sync():\n    warnings.warn('called a synchronizing CUDA operation', UserWarning)\n",
)
FAKE_STRATEGY = _fake_module(
    os.path.join(LIGHTNING_DIR, "pytorch", "strategies", "fake_ddp.py"),
    "def reduce(inner):\n    return inner()\n",
)
FAKE_LIGHTNING_BACKWARD = _fake_module(
    os.path.join(LIGHTNING_DIR, "pytorch", "core", "fake_module.py"),
    "def backward(tensor_backward, inner):\n    return tensor_backward(inner)\n",
)
FAKE_TORCH_TENSOR = _fake_module(
    os.path.join(TORCH_DIR, "_tensor.py"),
    "def backward(inner):\n    return inner()\n",
)
FAKE_LIBRARY = _fake_module(
    os.path.join(SITE_DIR, "fakemetrics", "metric.py"),
    "def compute(inner):\n    return inner()\ndef sync_here(classify):\n    return classify(sys._getframe(0))\n",
)


def here():
    return sys._getframe(0)


def test_classify_user_frame():
    site = classify_sync_frame(sys._getframe(0))
    assert site.owner == "user"
    assert "test_debug.py" in site.location and "test_classify_user_frame" in site.location
    assert site.code == "site = classify_sync_frame(sys._getframe(0))"


def test_classify_lightning_frames_are_named_not_blamed():
    # a user callback called from Lightning: the innermost non-torch frame is the user's
    assert classify_sync_frame(FAKE_PROGRESS["get_metrics"](here)).owner == "user"
    progress = FAKE_PROGRESS["get_metrics"](lambda: classify_sync_frame(sys._getframe(1)))
    assert progress.owner == "lightning"
    assert "progress bar" in progress.kind
    strategy = FAKE_STRATEGY["reduce"](lambda: classify_sync_frame(sys._getframe(1)))
    assert strategy.owner == "lightning" and "multi-device" in strategy.kind


def test_classify_backward_called_by_lightning_is_the_users_model():
    # user -> lightning (calls loss.backward) -> torch Tensor.backward -> the sync
    site = FAKE_LIGHTNING_BACKWARD["backward"](
        FAKE_TORCH_TENSOR["backward"], lambda: classify_sync_frame(sys._getframe(1))
    )
    assert site.owner == "user"
    assert site.kind == "backward pass of your model"
    # the nearest user frame is this test function
    assert "test_debug.py" in site.location


def test_classify_backward_under_anomaly_nan_check_is_the_debug_tools():
    def classify():
        return FAKE_LIGHTNING_BACKWARD["backward"](
            FAKE_TORCH_TENSOR["backward"], lambda: classify_sync_frame(sys._getframe(1))
        )

    with torch.autograd.set_detect_anomaly(True, check_nan=True):
        assert classify().owner == "debug"
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        assert classify().owner == "user"


def test_classify_library_points_at_the_user_call():
    site = FAKE_LIBRARY["compute"](lambda: classify_sync_frame(sys._getframe(1)))
    assert site.owner == "library" and site.kind == "fakemetrics"
    assert "test_debug.py" in site.location
    # called from Lightning, not from user code: the library's own frame is the location
    site = FAKE_STRATEGY["reduce"](functools.partial(FAKE_LIBRARY["sync_here"], classify_sync_frame))
    assert site.owner == "library" and "metric.py" in site.location and "in sync_here" in site.location


# --------------------------------------------------------------------------------------------------
# SyncWatcher machinery with a fake CUDA sync-debug mode and a fake warning source
# --------------------------------------------------------------------------------------------------

MODES = {"default": 0, "warn": 1, "error": 2}


@pytest.fixture
def fake_mode(monkeypatch):
    state = {"mode": 0, "calls": []}

    def set_mode(mode):
        state["calls"].append(mode)
        state["mode"] = MODES.get(mode, mode)

    monkeypatch.setattr(syncs._HUB, "get_mode", lambda: state["mode"])
    monkeypatch.setattr(syncs._HUB, "set_mode", set_mode)
    yield state
    assert syncs._HUB.installed == [] and syncs._HUB.active == []


def fake_sync():
    """Stands in for a torch op that synchronises under sync-debug mode 'warn'."""
    warnings.warn("called a synchronizing CUDA operation (Triggered internally at fake.cpp:1.)", UserWarning)


def lightning_sync():
    """A sync made inside Lightning's progress bar code."""
    FAKE_PROGRESS["sync"]()


def test_watcher_counts_attributes_and_restores(fake_mode):
    showwarning, filters = warnings.showwarning, list(warnings.filters)
    watcher = SyncWatcher("count")
    watcher.install()
    try:
        for _ in range(3):
            with watcher.window():
                assert fake_mode["mode"] == 1
                fake_sync()
                lightning_sync()
            assert fake_mode["mode"] == 0
        fake_sync_outside = pytest.warns(UserWarning, match=SYNC_WARNING_PATTERN)
        with fake_sync_outside:
            fake_sync()  # outside a window: shown as usual, not counted
    finally:
        watcher.uninstall()
    assert watcher.windows == 3
    assert watcher.user_syncs == 3 and watcher.lightning_syncs == 3 and watcher.library_syncs == 0
    (user_site,) = [s for s in watcher.sites if s.owner == "user"]
    assert "in fake_sync" in user_site.location
    assert "3 in your code" in watcher.summary() and "3 made by Lightning" in watcher.summary()
    assert [f["owner"] for f in watcher.findings()] == ["user"]
    assert warnings.showwarning is showwarning
    assert warnings.filters == filters


def test_watcher_keeps_previous_mode(fake_mode):
    fake_mode["mode"] = 2  # the user had "error" on
    watcher = SyncWatcher("count")
    with watcher.window():
        assert fake_mode["mode"] == 1
    watcher.uninstall()
    assert fake_mode["mode"] == 2


def test_other_warnings_in_a_window_still_reach_the_user(fake_mode):
    watcher = SyncWatcher("count")
    try:
        with pytest.warns(RuntimeWarning, match="unrelated"), watcher.window():
            fake_sync()
            warnings.warn("unrelated", RuntimeWarning)
    finally:
        watcher.uninstall()
    assert watcher.user_syncs == 1


def test_error_mode_raises_for_user_syncs_only(fake_mode):
    watcher = SyncWatcher("error")
    try:
        with watcher.window():
            lightning_sync()  # Lightning's own: counted, allowed
            with pytest.raises(SyncError, match="fake_sync"):
                fake_sync()
    finally:
        watcher.uninstall()
    assert fake_mode["mode"] == 0
    assert watcher.lightning_syncs == 1 and watcher.user_syncs == 1


def test_warn_mode_queues_each_new_user_site_once(fake_mode):
    watcher = SyncWatcher("warn")
    try:
        with watcher.window():
            fake_sync()
            fake_sync()
            lightning_sync()
    finally:
        watcher.uninstall()
    assert len(watcher.new_user_sites) == 1


def test_nested_watchers_torn_down_out_of_order(fake_mode):
    showwarning, filters = warnings.showwarning, list(warnings.filters)
    a, b = SyncWatcher("count"), SyncWatcher("count")
    a.install()
    b.install()
    a.start()
    b.start()
    fake_sync()
    a.stop()  # not LIFO
    assert fake_mode["mode"] == 1  # b still watching
    b.stop()
    assert fake_mode["mode"] == 0
    a.uninstall()
    b.uninstall()
    assert a.user_syncs == b.user_syncs == 1
    assert warnings.showwarning is showwarning
    assert warnings.filters == filters


def test_watch_syncs_is_a_no_op_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    showwarning = warnings.showwarning
    with syncs.watch_syncs() as watcher:
        assert warnings.showwarning is showwarning
    assert watcher.total == 0


def test_watcher_validates_mode():
    with pytest.raises(ValueError, match="mode"):
        SyncWatcher("loud")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_watch_syncs_real_cuda():
    prev = torch.cuda.get_sync_debug_mode()
    x = torch.ones(4, device="cuda")
    with syncs.watch_syncs() as watcher:
        y = (x * 2).sum()
        y.item()  # one sync, here
        z = x * 3  # no sync
    assert watcher.user_syncs >= 1
    assert all("test_debug.py" in s.location for s in watcher.sites if s.owner == "user")
    assert torch.cuda.get_sync_debug_mode() == prev
    del z


# --------------------------------------------------------------------------------------------------
# EvalGradWatch / tensors_requiring_grad
# --------------------------------------------------------------------------------------------------


def test_eval_grad_watch_positive_and_look_alikes():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(2, 3)
    with EvalGradWatch(model) as watch:
        model(x)  # grad mode on, parameters require grad: graph built
    assert [e.module_name for e in watch.events] == ["0", "2"]
    assert watch.events[0].grad_fn == "AddmmBackward0"
    assert not watch.attached and not model[0]._forward_hooks

    with EvalGradWatch(model) as watch, torch.no_grad():
        model(x)
    assert watch.events == []

    frozen = torch.nn.Linear(3, 1).requires_grad_(False)
    with EvalGradWatch(frozen) as watch:
        frozen(x)  # grad mode on, nothing requires grad: no graph, no cost
    assert watch.events == []


def test_tensors_requiring_grad_walks_nested_outputs():
    w = torch.ones(2, requires_grad=True)
    out = {"loss": (w * 2).sum(), "parts": [torch.zeros(1), (w + 1,)]}
    assert [p for p, _ in tensors_requiring_grad(out)] == ["outputs['loss']", "outputs['parts'][1][0]"]
    assert tensors_requiring_grad({"loss": torch.ones(1)}) == []
    assert tensors_requiring_grad(None) == []


def test_eval_grad_watch_rejects_non_modules():
    with pytest.raises(TypeError, match="module"):
        EvalGradWatch("model")


# --------------------------------------------------------------------------------------------------
# ShapeTracker
# --------------------------------------------------------------------------------------------------


def test_batch_shape_signature():
    batch = {"image": torch.zeros(2, 3, 8, 8), "label": torch.zeros(2, dtype=torch.long)}
    assert batch_shape_signature(batch) == (("batch['image']", (2, 3, 8, 8)),)
    # no floating tensor: all tensors count (token ids)
    assert batch_shape_signature([torch.zeros(2, 7, dtype=torch.long)]) == (("batch[0]", (2, 7)),)


def test_shape_tracker_findings():
    tracker = ShapeTracker(max_shapes=2)
    for n in (8, 8, 8, 3):  # full batches and a last smaller one: fine
        tracker.update(torch.zeros(n, 4))
    assert tracker.distinct_shapes == 2 and tracker.steps == 4
    assert tracker.finding(benchmark=True) is None
    tracker.update(torch.zeros(5, 4))
    assert tracker.finding(benchmark=False) is None
    finding = tracker.finding(benchmark=True)
    assert finding["tip"] == "T07"
    assert finding["evidence"].startswith("3 distinct input shapes in 5 steps")


def test_shape_tracker_limit_keeps_counting():
    tracker = ShapeTracker(limit=2)
    for n in range(1, 6):
        tracker.update(torch.zeros(n))
    assert tracker.distinct_shapes == 5 and len(tracker.shape_counts) == 2


def test_shape_tracker_validates():
    with pytest.raises(ValueError, match="max_shapes"):
        ShapeTracker(max_shapes=0)
