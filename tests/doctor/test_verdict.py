"""Issue 36 item 2: one primary verdict, with its numbers, and the change that addresses it; "balanced" when
nothing dominates, and never a precision verdict on hardware without a faster precision."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

from lightning_speedups.advisor import SpeedAdvisor
from lightning_speedups.functional import OpCounter, op_fixed_cost
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.verdict import primary_verdict, step_shares

PHASES = {"forward": 0.02, "backward": 0.04, "optimizer": 0.01}


def finding(tip: str, severity: str, evidence: str, fix: str) -> Finding:
    return Finding.from_items(tip, [Item(severity, evidence, fix, "runtime")])


def test_the_shares_of_the_step_add_up_and_keep_the_measured_wait():
    shares = step_shares(Facts(data_wait_fraction=0.3, phase_seconds=PHASES))
    assert shares["data"] == 0.3 and sum(shares.values()) == pytest.approx(1.0)
    assert shares["backward"] == pytest.approx(0.7 * 4 / 7)
    assert step_shares(Facts()) == {}


def test_an_input_bound_run_gets_the_loaders_fix_with_its_numbers():
    loader = finding("T02", "high", "93% of step time waiting for data", "num_workers=4 on the DataLoader")
    verdict = primary_verdict([loader], Facts(data_wait_fraction=0.93, phase_seconds=PHASES))
    assert verdict.name == "input-bound" and verdict.fix == "num_workers=4 on the DataLoader"
    assert "93% of the step waits for data" in verdict.line() and "forward" in verdict.headline


def test_debugging_tools_left_on_come_first():
    debug = finding("T14", "high", "anomaly detection is on", "remove Trainer(detect_anomaly=True)")
    verdict = primary_verdict([debug], Facts(data_wait_fraction=0.5, phase_seconds=PHASES))
    assert verdict.name == "debug-tools" and verdict.fix == "remove Trainer(detect_anomaly=True)"


@pytest.mark.parametrize("faster_here", [True, False])
def test_a_precision_verdict_only_where_the_hardware_has_a_faster_one(faster_here):
    fix = "speedups.precision: auto (bf16-mixed here), or trainer.precision: bf16-mixed"
    findings = [finding("T05", "medium", "32-true where bf16-mixed is faster", fix)]
    verdict = primary_verdict(findings if faster_here else [], Facts(data_wait_fraction=0.05, phase_seconds=PHASES))
    assert verdict.name == ("precision" if faster_here else "balanced")
    assert "%" in verdict.headline  # never without its numbers
    if faster_here:  # the precision to set, as a script sets it (fast keeps it only where its probe ran and paid)
        assert (
            verdict.fix.startswith('Trainer(precision="bf16-mixed")')
            and "speedups: {precision: bf16-mixed}" in verdict.fix
        )


def test_host_reads_are_a_verdict_only_where_they_stall_a_device():
    syncs = finding("T08", "high", "3 device syncs per step at train.py:40", "keep the loss on the device")
    facts = Facts(data_wait_fraction=0.05, phase_seconds=PHASES, device_type="cuda")
    assert primary_verdict([syncs], facts).name == "host-reads"
    facts.device_type = "cpu"  # a read on the CPU waits for nothing
    assert primary_verdict([syncs], facts).name == "balanced"


def test_nothing_timed_is_said_not_guessed():
    assert primary_verdict([], Facts()).name == "not-measured"


# ----------------------------------------------------------------------------------- the fixed cost per op
#: a tiny model's step (as the planted width-8 MLP measured): ~110 ops at ~2.8 µs in a 0.65 ms step
TINY = {"ops_per_step": 110, "op_cost_seconds": 2.8e-6, "step_seconds": 0.65e-3}
#: a wide model's step (as the planted balanced.py measured): ~50 ops in a 6.4 ms step
WIDE = {"ops_per_step": 50, "op_cost_seconds": 2.8e-6, "step_seconds": 6.4e-3}


def test_a_step_mostly_fixed_cost_per_op_is_named_with_its_numbers_and_the_batch_and_compile_fixes():
    verdict = primary_verdict([], Facts(data_wait_fraction=0.17, phase_seconds=PHASES, batch_size=8, **TINY))
    assert verdict.name == "op-overhead" and verdict.tip == "T04"
    assert verdict.headline.startswith("~110 ops a step at ~2.8 µs fixed cost each: ~47% of the 0.65 ms step (")
    assert "data 17%" in verdict.headline  # the step's shares too
    assert "batch_size=8 -> 32" in verdict.fix and "learning rate" in verdict.fix
    assert "`speedups: {compile: {enabled: true}}`" in verdict.fix and "LIGHTNING_SPEEDUPS=" in verdict.fix
    assert "reduce-overhead" not in verdict.fix  # CUDA graphs only where there is a GPU
    on_gpu = primary_verdict([], Facts(data_wait_fraction=0.1, phase_seconds=PHASES, device_type="cuda", **TINY))
    assert on_gpu.name == "op-overhead" and "mode: reduce-overhead" in on_gpu.fix and "CUDA graphs" in on_gpu.fix


def test_op_overhead_comes_before_precision_and_after_an_input_bound_loader():
    bf16 = [finding("T05", "medium", "32-true where bf16-mixed is faster", "speedups.precision: auto")]
    assert primary_verdict(bf16, Facts(data_wait_fraction=0.05, phase_seconds=PHASES, **TINY)).name == "op-overhead"
    assert primary_verdict(bf16, Facts(data_wait_fraction=0.05, phase_seconds=PHASES, **WIDE)).name == "precision"
    assert primary_verdict([], Facts(data_wait_fraction=0.6, phase_seconds=PHASES, **TINY)).name == "input-bound"


def test_a_wide_models_step_or_an_unmeasured_one_gets_no_op_overhead_verdict():
    wide = Facts(data_wait_fraction=0.05, phase_seconds=PHASES, **WIDE)
    assert wide.op_overhead_fraction == pytest.approx(50 * 2.8e-6 / 6.4e-3)  # ~2%
    assert primary_verdict([], wide).name == "balanced"
    for missing in ("ops_per_step", "op_cost_seconds", "step_seconds"):
        facts = Facts(data_wait_fraction=0.05, phase_seconds=PHASES, **{**TINY, missing: None})
        assert facts.op_overhead_fraction is None and primary_verdict([], facts).name == "balanced"


def _mlp(depth: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(16, 2))


def _ops(model: torch.nn.Module, backward: bool) -> int:
    x, y = torch.randn(4, 16), torch.randint(0, 2, (4,))
    counter = OpCounter()
    counter.start()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if backward:
        loss.backward()
    return counter.stop()


def test_the_op_counter_counts_forward_and_backward_ops_and_a_deeper_model_more():
    forward, both = _ops(_mlp(2), backward=False), _ops(_mlp(2), backward=True)
    assert 4 <= forward <= 12  # 3 linear, 2 relu, the loss: the ops inside a linear are part of its cost
    assert 3 * forward <= both <= 80  # the backward ops (on the autograd engine) are counted too
    assert _ops(_mlp(6), backward=True) >= both + 4 * 8  # each layer more: a linear and a relu, forward and backward


def test_the_fixed_cost_of_one_op_is_microseconds():
    assert 1e-8 < op_fixed_cost(repeats=5) < 1e-3


def test_the_advisor_times_quiet_steps_after_the_watched_ones_and_counts_one_steps_ops():
    from helpers import TinyCNN, quiet_trainer

    advisor = SpeedAdvisor(check_steps=3, print_report=False, lint=False)
    quiet_trainer(max_steps=6, callbacks=[advisor], limit_val_batches=0).fit(TinyCNN())
    facts = advisor.facts
    assert facts.steps_run == 3 and len(facts.grad_norms) == 3  # the watched steps' evidence is theirs alone
    assert facts.ops_per_step is not None and 20 <= facts.ops_per_step <= 400
    assert facts.op_cost_seconds is not None and facts.step_seconds is not None and facts.step_seconds > 0
    assert facts.op_overhead_fraction is not None and "op_overhead" not in facts.unavailable
    short = SpeedAdvisor(check_steps=3, print_report=False, lint=False)
    quiet_trainer(max_steps=4, callbacks=[short], limit_val_batches=0).fit(TinyCNN())  # ends 1 batch after
    assert short.facts.ops_per_step is None
    assert "1 batch after the watched steps" in short.facts.unavailable["op_overhead"]
