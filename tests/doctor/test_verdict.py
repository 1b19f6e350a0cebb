"""Issue 36 item 2: one primary verdict, with its numbers, and the change that addresses it; "balanced" when
nothing dominates, and never a precision verdict on hardware without a faster precision."""

from __future__ import annotations

import pytest

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
    findings = [finding("T05", "medium", "32-true where bf16-mixed is faster", "speedups.precision: auto")]
    verdict = primary_verdict(findings if faster_here else [], Facts(data_wait_fraction=0.05, phase_seconds=PHASES))
    assert verdict.name == ("precision" if faster_here else "balanced")
    assert "%" in verdict.headline  # never without its numbers


def test_host_reads_are_a_verdict_only_where_they_stall_a_device():
    syncs = finding("T08", "high", "3 device syncs per step at train.py:40", "keep the loss on the device")
    facts = Facts(data_wait_fraction=0.05, phase_seconds=PHASES, device_type="cuda")
    assert primary_verdict([syncs], facts).name == "host-reads"
    facts.device_type = "cpu"  # a read on the CPU waits for nothing
    assert primary_verdict([syncs], facts).name == "balanced"


def test_nothing_timed_is_said_not_guessed():
    assert primary_verdict([], Facts()).name == "not-measured"
