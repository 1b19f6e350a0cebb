"""The checks on collected facts, without a doctor run: coverage of the registry, not-checked with a
reason, degradation when the user's model refuses a part, the inspection doctor and bench share, and
single checks on hand-made facts."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from helpers import TinyCNN, TinyTransformer, quiet_trainer

from lightning_speedups.advisor import checks_by_tip, run_checks
from lightning_speedups.doctor import runner
from lightning_speedups.inspection import (
    Facts,
    Finding,
    Item,
    collect_static,
    inspect_model,
    inspect_setup,
)
from lightning_speedups.tips import TIPS

CHECK = checks_by_tip()


def collected(model, batch=None, **trainer_kwargs):
    trainer = quiet_trainer(**trainer_kwargs)
    return collect_static(Facts(), trainer, model, batch)


def test_every_registry_tip_has_a_check():
    assert list(CHECK) == [t.id for t in TIPS]
    assert all(callable(fn) for fn in CHECK.values())


def test_empty_facts_never_crash_and_say_why():
    results = run_checks(Facts())
    assert [r.tip for r in results] == [t.id for t in TIPS]
    for r, tip in zip(results, TIPS):
        assert r.status in ("ok", "not-checked", "finding")
        assert r.evidence, r.tip
        assert (r.slug, r.title) == (tip.slug, tip.title)  # filled in from the registry
        assert r.check == f"{tip.check.__module__}:{tip.check.__qualname__}"


def test_a_failing_check_becomes_not_checked():
    def boom(facts):
        raise RuntimeError("kaput")

    t05 = next(r for r in run_checks(Facts(), {**CHECK, "T05": boom}) if r.tip == "T05")
    assert t05.status == "not-checked" and "kaput" in t05.evidence and t05.slug == "amp"
    assert t05.check.endswith(":test_a_failing_check_becomes_not_checked.<locals>.boom")


def test_a_part_the_users_model_refuses_degrades_to_not_checked(monkeypatch):
    import lightning_speedups.inspection.model as inspection_model

    def refuses(model):
        raise RuntimeError("forward needs a second argument")

    monkeypatch.setattr(inspection_model, "plan_conv_bias_removal", refuses)
    facts = collected(TinyCNN())
    assert facts.unavailable["conv_bias"] == "could not inspect: RuntimeError: forward needs a second argument"
    t16 = CHECK["T16"](facts)
    assert t16.status == "not-checked" and "forward needs a second argument" in t16.evidence
    assert CHECK["T24"](facts).status == "finding"  # the other parts still read the model
    info = inspect_setup(TinyCNN(), "cpu")
    assert info.conv_bias_pairs is None and info.has("conv_bias") is None
    assert info.errors == {"conv_bias": "RuntimeError: forward needs a second argument"}


@pytest.mark.parametrize("make", [TinyCNN, TinyTransformer])
def test_doctor_and_bench_read_one_inspection(make):
    model = make()
    shared = inspect_model(model, "cpu")
    facts = collected(model)
    info = inspect_setup(model, "cpu")
    assert shared.errors == {} and info.errors == {}
    assert facts.channels_last_modules == shared.channels_last_modules
    assert info.conv_modules == len(shared.channels_last_modules)
    assert facts.conv_bias_plan.pairs == shared.conv_bias_plan.pairs
    assert info.conv_bias_pairs == len(shared.conv_bias_plan.pairs)
    assert facts.checkpoint_candidates == shared.checkpoint_candidates
    assert info.repeated_blocks == len(shared.checkpoint_candidates)
    assert info.compile_targets == len(shared.compile_targets)
    assert facts.module_counts == shared.module_counts and facts.n_params == shared.n_params
    assert info.model == make.__name__ and info.device == "cpu"


def test_data_wait_is_a_finding_from_the_measured_fraction():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    slow = Facts(collected=True, train_loaders=[loader], data_wait_fraction=0.6, data_wait_steps=3, steps_run=3)
    t02 = CHECK["T02"](slow)
    assert t02.status == "finding" and t02.severity == "high"
    assert t02.evidence.startswith("60% of step time waiting for data over 3 steps")
    fed = Facts(collected=True, train_loaders=[loader], data_wait_fraction=0.1, data_wait_steps=3, steps_run=3)
    assert "10% of step time waiting for data" in CHECK["T02"](fed).evidence


def test_conv_bias_counts_on_tiny_cnn():
    facts = collected(TinyCNN())
    t16 = CHECK["T16"](facts)
    assert t16.status == "finding"
    assert t16.evidence.startswith("2 Conv2d layers feed a BatchNorm and keep a bias: 16 parameters")


def test_model_without_convs_has_nothing_for_t16_t24():
    facts = collected(TinyTransformer(), batch=(torch.randint(0, 64, (8, 17)),))
    assert CHECK["T16"](facts).status == "ok"
    t24 = CHECK["T24"](facts)
    assert t24.status == "ok" and "no 4D/5D" in t24.evidence


def test_channels_last_model_is_fine():
    model = TinyCNN().to(memory_format=torch.channels_last)
    batch = (torch.randn(4, 3, 8, 8).contiguous(memory_format=torch.channels_last), torch.zeros(4))
    assert CHECK["T24"](collected(model, batch)).status == "ok"
    t24 = CHECK["T24"](collected(model, (torch.randn(4, 3, 8, 8), torch.zeros(4))))
    assert t24.status == "finding" and "arrive NCHW" in t24.evidence


def test_debug_tools_left_on():
    with torch.autograd.set_detect_anomaly(True):
        facts = collected(TinyCNN())
    t14 = CHECK["T14"](facts)
    assert t14.status == "finding" and t14.severity == "high" and "anomaly" in t14.evidence


def test_cyclic_schedule_stepped_per_epoch():
    facts = Facts(collected=True, schedulers=[("OneCycleLR", "epoch", True)])
    t01 = CHECK["T01"](facts)
    assert t01.status == "finding" and t01.severity == "medium" and "'interval': 'step'" in t01.fix


def test_gradient_explosion_without_clipping():
    t15 = CHECK["T15"](Facts(grad_norms=[0.9, 1.1, 1.0, 5e3]))
    assert t15.status == "finding" and "5e+03" in t15.evidence
    assert CHECK["T15"](Facts(grad_norms=[0.9, 1.0])).status == "ok"
    t15 = CHECK["T15"](Facts(grad_norms=[1.0, float("nan")]))
    assert t15.severity == "high"
    assert CHECK["T15"](Facts(grad_norms=[1.0, 5e3], gradient_clip_val=1.0)).status == "ok"


def test_fp32_on_cpu_is_fine_unless_bf16_is_faster_here():
    from lightning_speedups.functional.precision import cpu_fast_bf16

    t05 = CHECK["T05"](Facts(collected=True, device_type="cpu", precision="32-true"))
    assert t05.status == ("finding" if cpu_fast_bf16() else "ok")


def test_gpu_only_checks_say_not_checked_on_cpu():
    facts = Facts(collected=True, device_type="cpu")
    for check in (CHECK["T07"], CHECK["T08"], CHECK["T21"]):
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
    from lightning_speedups.inspection import user_source_files

    files = user_source_files([TinyCNN(), nn.Linear(2, 2)])
    assert files == [os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers.py")]


# ------------------------------------------------------------------ the CUDA paths, on made-up facts


def cuda_facts(**kwargs):
    base = {
        "collected": True,
        "device_type": "cuda",
        "device_name": "NVIDIA H100",
        "precision": "32-true",
        "steps_run": 3,
    }
    base.update(kwargs)
    return Facts(**base)


def test_cuda_unpinned_loader_and_copies():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    t03 = CHECK["T03"](cuda_facts(train_loaders=[loader]))
    assert t03.status == "finding" and t03.severity == "medium" and "speedups.loaders.pin_memory: auto" in t03.fix
    t21 = CHECK["T21"](cuda_facts(unpinned={"train loader 0": ["batch[0]", "batch[1]"]}))
    assert t21.status == "finding" and "batch[0]" in t21.evidence
    assert CHECK["T21"](cuda_facts(pinned_checked=True)).status == "ok"


def test_cuda_memory_headroom_and_pressure():
    gib = 2**30
    t04 = CHECK["T04"](cuda_facts(peak_memory=4 * gib, total_memory=80 * gib, batch_size=32))
    assert t04.status == "finding" and t04.severity == "medium" and "(5%) at batch size 32" in t04.evidence
    assert CHECK["T04"](cuda_facts(peak_memory=60 * gib, total_memory=80 * gib)).status == "ok"
    t09 = CHECK["T09"](
        cuda_facts(peak_memory=76 * gib, total_memory=80 * gib, checkpoint_candidates=["layers.0", "layers.1"])
    )
    assert t09.status == "finding" and "checkpointing.targets: [auto]" in t09.fix
    assert CHECK["T09"](cuda_facts(peak_memory=10 * gib, total_memory=80 * gib)).status == "ok"


def test_cuda_fp32_and_benchmark_off():
    t05 = CHECK["T05"](cuda_facts())
    assert t05.status == "finding" and t05.severity == "high" and "speedups.precision: auto" in t05.fix
    assert CHECK["T05"](cuda_facts(precision="bf16-mixed")).status == "ok"
    from lightning_speedups.functional import ShapeTracker

    tracker = ShapeTracker()
    for _ in range(3):
        tracker.update(torch.zeros(4, 3, 8, 8))
    t07 = CHECK["T07"](cuda_facts(module_counts={"Conv2d": 2}, cudnn_benchmark=False, shape_tracker=tracker))
    assert t07.status == "finding" and "speedups.cudnn_benchmark: auto" in t07.fix
    for n in (5, 6, 7):
        tracker.update(torch.zeros(n, 3, 8, 8))
    t07 = CHECK["T07"](cuda_facts(module_counts={"Conv2d": 2}, cudnn_benchmark=True, shape_tracker=tracker))
    assert t07.status == "finding" and "4 distinct input shapes" in t07.evidence


def test_cuda_sizes_and_layout_matter_more_in_half_precision():
    model = TinyCNN()
    facts = collected(model, (torch.randn(12, 1, 8, 8), torch.zeros(12)))
    facts.device_type, facts.precision = "cuda", "bf16-mixed"
    t23 = CHECK["T23"](facts)
    assert t23.status == "finding" and t23.severity == "medium" and "batch_size = 12 -> 16" in t23.evidence
    assert CHECK["T24"](facts).severity == "medium"
    assert CHECK["T22"](facts).status == "finding"  # eager element-wise modules on a GPU


def test_cuda_sync_findings_come_from_the_watcher():
    from lightning_speedups.functional import SyncSite, SyncWatcher

    watcher = SyncWatcher("count")
    watcher.windows = 3
    watcher.sites[SyncSite("user", "your code", "train.py:12 in training_step", "loss.item()")] += 3
    watcher.sites[SyncSite("lightning", "progress bar metrics", "lightning/x.py:1 in f", "")] += 3
    t08 = CHECK["T08"](cuda_facts(sync_watcher=watcher))
    assert t08.status == "finding" and "train.py:12" in t08.evidence and "progress bar" not in t08.evidence
    quiet = SyncWatcher("count")
    quiet.windows = 3
    quiet.sites[SyncSite("lightning", "progress bar metrics", "lightning/x.py:1 in f", "")] += 3
    assert CHECK["T08"](cuda_facts(sync_watcher=quiet)).status == "ok"
