"""The checks on collected facts, without a doctor run: coverage of the registry, not-checked with a
reason, degradation when a part is missing, and single checks on hand-made facts."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from helpers import TinyCNN, TinyTransformer, quiet_trainer

from lightning_speedups.doctor import checks, runner
from lightning_speedups.doctor.facts import Facts, collect_static
from lightning_speedups.doctor.findings import Finding, Item
from lightning_speedups.tips import TIPS


def collected(model, batch=None, **trainer_kwargs):
    trainer = quiet_trainer(**trainer_kwargs)
    return collect_static(Facts(), trainer, model, batch)


def test_every_registry_tip_has_a_check():
    assert list(checks.CHECKS) == [t.id for t in TIPS]
    for tip, fn in checks.CHECKS.items():
        assert fn.__name__ == f"check_{tip.lower()}"


def test_empty_facts_never_crash_and_say_why():
    results = runner.run_checks(Facts())
    assert [r.tip for r in results] == [t.id for t in TIPS]
    for r in results:
        assert r.status in ("ok", "not-checked", "finding")
        assert r.evidence, r.tip


def test_a_failing_check_becomes_not_checked(monkeypatch):
    def boom(facts):
        raise RuntimeError("kaput")

    monkeypatch.setitem(checks.CHECKS, "T05", boom)
    t05 = next(r for r in runner.run_checks(Facts()) if r.tip == "T05")
    assert t05.status == "not-checked" and "kaput" in t05.evidence


def test_missing_part_degrades_to_not_checked(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning_speedups.functional.conv_bias", None)  # import fails
    facts = collected(TinyCNN())
    t16 = checks.check_t16(facts)
    assert t16.status == "not-checked" and "part not available" in t16.evidence


def test_conv_bias_counts_on_tiny_cnn():
    facts = collected(TinyCNN())
    t16 = checks.check_t16(facts)
    assert t16.status == "finding"
    assert t16.evidence.startswith("2 Conv2d layers feed a BatchNorm and keep a bias: 16 parameters")


def test_model_without_convs_has_nothing_for_t16_t24():
    facts = collected(TinyTransformer(), batch=(torch.randint(0, 64, (8, 17)),))
    assert checks.check_t16(facts).status == "ok"
    t24 = checks.check_t24(facts)
    assert t24.status == "ok" and "no 4D/5D" in t24.evidence


def test_channels_last_model_is_fine():
    model = TinyCNN().to(memory_format=torch.channels_last)
    batch = (torch.randn(4, 3, 8, 8).contiguous(memory_format=torch.channels_last), torch.zeros(4))
    assert checks.check_t24(collected(model, batch)).status == "ok"
    t24 = checks.check_t24(collected(model, (torch.randn(4, 3, 8, 8), torch.zeros(4))))
    assert t24.status == "finding" and "arrive NCHW" in t24.evidence


def test_debug_tools_left_on():
    with torch.autograd.set_detect_anomaly(True):
        facts = collected(TinyCNN())
    t14 = checks.check_t14(facts)
    assert t14.status == "finding" and t14.severity == "high" and "anomaly" in t14.evidence


def test_cyclic_schedule_stepped_per_epoch():
    facts = Facts(collected=True, schedulers=[("OneCycleLR", "epoch", True)])
    t01 = checks.check_t01(facts)
    assert t01.status == "finding" and t01.severity == "medium" and "'interval': 'step'" in t01.fix


def test_gradient_explosion_without_clipping():
    t15 = checks.check_t15(Facts(grad_norms=[0.9, 1.1, 1.0, 5e3]))
    assert t15.status == "finding" and "5e+03" in t15.evidence
    assert checks.check_t15(Facts(grad_norms=[0.9, 1.0])).status == "ok"
    t15 = checks.check_t15(Facts(grad_norms=[1.0, float("nan")]))
    assert t15.severity == "high"
    assert checks.check_t15(Facts(grad_norms=[1.0, 5e3], gradient_clip_val=1.0)).status == "ok"


def test_fp32_on_cpu_is_fine_unless_bf16_is_faster_here():
    from lightning_speedups.functional.precision import cpu_fast_bf16

    t05 = checks.check_t05(Facts(collected=True, device_type="cpu", precision="32-true"))
    assert t05.status == ("finding" if cpu_fast_bf16() else "ok")


def test_gpu_only_checks_say_not_checked_on_cpu():
    facts = Facts(collected=True, device_type="cpu")
    for check in (checks.check_t07, checks.check_t08, checks.check_t21):
        r = check(facts)
        assert r.status == "not-checked" and "cpu" in r.evidence and r.fix


def test_findings_merge_items_and_keep_the_worst_severity():
    f = Finding.from_items("T08", [Item("low", "a", "fix a"), Item("high", "b", "fix b"), Item("low", "c", "fix a")])
    assert f.severity == "high" and f.evidence == "a; b; c" and f.fix == "fix a; fix b"
    ok = Finding.ok("T08", "nothing").with_items([Item("medium", "x.py:3: LS201 .item()", "log the tensor", "lint")])
    assert ok.status == "finding" and ok.severity == "medium" and "checked: nothing" in ok.notes[0]
    assert ok.at_least("medium") and not ok.at_least("high")


def test_exit_code_for_rejects_unknown_threshold():
    with pytest.raises(ValueError, match="fail_on"):
        runner.exit_code_for([], "critical")


def test_user_source_files_skip_libraries():
    from lightning_speedups.doctor.facts import user_source_files

    files = user_source_files([TinyCNN(), nn.Linear(2, 2)])
    assert files == [os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers.py")]


# ------------------------------------------------------------------ the CUDA paths, on made-up facts


def cuda_facts(**kwargs):
    base = {"collected": True, "device_type": "cuda", "device_name": "NVIDIA H100", "precision": "32-true", "steps_run": 3}
    base.update(kwargs)
    return Facts(**base)


def test_cuda_unpinned_loader_and_copies():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    t03 = checks.check_t03(cuda_facts(train_loaders=[loader]))
    assert t03.status == "finding" and t03.severity == "medium" and "speedups.loaders.pin_memory: auto" in t03.fix
    t21 = checks.check_t21(cuda_facts(unpinned={"train loader 0": ["batch[0]", "batch[1]"]}))
    assert t21.status == "finding" and "batch[0]" in t21.evidence
    assert checks.check_t21(cuda_facts(pinned_checked=True)).status == "ok"


def test_cuda_memory_headroom_and_pressure():
    gib = 2**30
    t04 = checks.check_t04(cuda_facts(peak_memory=4 * gib, total_memory=80 * gib, batch_size=32))
    assert t04.status == "finding" and t04.severity == "medium" and "(5%) at batch size 32" in t04.evidence
    assert checks.check_t04(cuda_facts(peak_memory=60 * gib, total_memory=80 * gib)).status == "ok"
    t09 = checks.check_t09(cuda_facts(peak_memory=76 * gib, total_memory=80 * gib, checkpoint_candidates=["layers.0", "layers.1"]))
    assert t09.status == "finding" and "checkpointing.targets: [auto]" in t09.fix
    assert checks.check_t09(cuda_facts(peak_memory=10 * gib, total_memory=80 * gib)).status == "ok"


def test_cuda_fp32_and_benchmark_off():
    t05 = checks.check_t05(cuda_facts())
    assert t05.status == "finding" and t05.severity == "high" and "speedups.precision: auto" in t05.fix
    assert checks.check_t05(cuda_facts(precision="bf16-mixed")).status == "ok"
    from lightning_speedups.functional.shapes import ShapeTracker

    tracker = ShapeTracker()
    for _ in range(3):
        tracker.update(torch.zeros(4, 3, 8, 8))
    t07 = checks.check_t07(cuda_facts(module_counts={"Conv2d": 2}, cudnn_benchmark=False, shape_tracker=tracker))
    assert t07.status == "finding" and "speedups.cudnn_benchmark: auto" in t07.fix
    for n in (5, 6, 7):
        tracker.update(torch.zeros(n, 3, 8, 8))
    t07 = checks.check_t07(cuda_facts(module_counts={"Conv2d": 2}, cudnn_benchmark=True, shape_tracker=tracker))
    assert t07.status == "finding" and "4 distinct input shapes" in t07.evidence


def test_cuda_sizes_and_layout_matter_more_in_half_precision():
    model = TinyCNN()
    facts = collected(model, (torch.randn(12, 1, 8, 8), torch.zeros(12)))
    facts.device_type, facts.precision = "cuda", "bf16-mixed"
    t23 = checks.check_t23(facts)
    assert t23.status == "finding" and t23.severity == "medium" and "batch_size = 12 -> 16" in t23.evidence
    assert checks.check_t24(facts).severity == "medium"
    assert checks.check_t22(facts).status == "finding"  # eager element-wise modules on a GPU


def test_cuda_sync_findings_come_from_the_watcher():
    from lightning_speedups.functional.syncs import SyncSite, SyncWatcher

    watcher = SyncWatcher("count")
    watcher.windows = 3
    watcher.sites[SyncSite("user", "your code", "train.py:12 in training_step", "loss.item()")] += 3
    watcher.sites[SyncSite("lightning", "progress bar metrics", "lightning/x.py:1 in f", "")] += 3
    t08 = checks.check_t08(cuda_facts(sync_watcher=watcher))
    assert t08.status == "finding" and "train.py:12" in t08.evidence and "progress bar" not in t08.evidence
    quiet = SyncWatcher("count")
    quiet.windows = 3
    quiet.sites[SyncSite("lightning", "progress bar metrics", "lightning/x.py:1 in f", "")] += 3
    assert checks.check_t08(cuda_facts(sync_watcher=quiet)).status == "ok"
