"""SpeedAdvisor inside a user's own fit: report at the end, same checks, nothing left behind."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))
from helpers import TinyCNN, quiet_trainer

from lightning_speedups.doctor import SpeedAdvisor


def test_advisor_reports_at_the_end_of_fit(capsys):
    advisor = SpeedAdvisor(check_steps=2)
    model = TinyCNN()
    quiet_trainer(max_steps=3, callbacks=[advisor], limit_val_batches=1).fit(model)
    out = capsys.readouterr().out
    assert [f.tip for f in advisor.findings] == [f"T{i:02d}" for i in range(1, 25)]
    t16 = next(f for f in advisor.findings if f.tip == "T16")
    assert t16.status == "finding" and "16 parameters" in t16.evidence
    assert "lightning_speedups SpeedAdvisor" in out and "T16 conv-bias" in out
    assert advisor.facts.steps_run == 2  # only the first check_steps steps are watched
    assert len(advisor.facts.grad_norms) == 2
    # nothing left behind: no forward hooks from the evaluation check, status reported
    assert all(not m._forward_hooks for m in model.modules())
    assert advisor.status is not None and advisor.status[0] == "active"


def test_advisor_quiet_mode_and_validation():
    advisor = SpeedAdvisor(check_steps=1, print_report=False)
    quiet_trainer(max_steps=1, callbacks=[advisor], num_sanity_val_steps=1, limit_val_batches=1).fit(TinyCNN())
    t17 = next(f for f in advisor.findings if f.tip == "T17")
    assert t17.status == "ok" and "without autograd" in t17.evidence
    from lightning_speedups.functional.precision import cpu_fast_bf16

    assert advisor.worst() == ("medium" if cpu_fast_bf16() else "low")  # T05: fp32 where bf16 is faster


def test_advisor_from_the_preset_key():
    from lightning_speedups.config import MonitorSettings, Speedups

    cbs = Speedups(monitors=MonitorSettings(advisor=True)).callbacks()
    assert any(isinstance(cb, SpeedAdvisor) for cb in cbs)


def test_advisor_reuses_the_users_own_monitor():
    from lightning_speedups.callbacks import DataWaitMonitor

    mine = DataWaitMonitor(log=False)
    advisor = SpeedAdvisor(check_steps=3, print_report=False)
    quiet_trainer(max_steps=3, callbacks=[mine, advisor], limit_val_batches=0).fit(TinyCNN())
    assert "data_wait" not in advisor._children
    assert advisor.facts.data_wait_fraction == mine.data_wait_fraction


def test_advisor_times_on_the_injected_clock():
    class Stopped:  # a clock that never moves: no step takes any time
        calls = 0

        def __call__(self):
            self.calls += 1
            return 42.0

    clock = Stopped()
    advisor = SpeedAdvisor(check_steps=2, print_report=False, clock=clock)
    quiet_trainer(max_steps=2, callbacks=[advisor], limit_val_batches=0).fit(TinyCNN())
    assert clock.calls > 4  # the advisor and the data-wait monitor it started both read it
    assert advisor.facts.seconds == 0.0
    assert advisor.facts.data_wait_fraction is None  # no step time measured on a stopped clock
    t02 = next(f for f in advisor.findings if f.tip == "T02")
    assert t02.status != "finding"


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_advisor_validates_check_steps(bad):
    with pytest.raises(ValueError, match="check_steps"):
        SpeedAdvisor(check_steps=bad)


def test_advisor_validates_flags():
    with pytest.raises(TypeError, match="print_report"):
        SpeedAdvisor(print_report="yes")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_advisor_counts_syncs_on_cuda():
    class SyncingCNN(TinyCNN):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.seen = loss.item()  # a device sync in the user's step
            return loss

    advisor = SpeedAdvisor(check_steps=2, print_report=False)
    quiet_trainer(accelerator="gpu", max_steps=2, callbacks=[advisor], limit_val_batches=0).fit(SyncingCNN())
    t08 = next(f for f in advisor.findings if f.tip == "T08")
    assert t08.status == "finding" and "test_speed_advisor.py" in t08.evidence
    t21 = next(f for f in advisor.findings if f.tip == "T21")
    assert t21.status == "finding"  # TinyCNN's loader does not pin
    t04 = next(f for f in advisor.findings if f.tip == "T04")
    assert t04.status in ("finding", "ok") and "peak memory" in t04.evidence
    assert torch.cuda.get_sync_debug_mode() == 0
