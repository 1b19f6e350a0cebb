"""T01's span: never a plan nobody set. A schedule spans the user's plan (steps, epochs, a time) or the
run's own; a run on Lightning's default length (1000 epochs) skips it before any work, saying what to set."""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
from helpers import TinyCNN, quiet_trainer

from lightning_speedups.callbacks import LRSchedule
from lightning_speedups.trainer.plan import parse_plan


class StopAt(pl.Callback):
    """Stops the run after ``steps`` optimizer steps; optionally advances a fake clock each batch."""

    def __init__(self, steps: int, clock: list[float] | None = None, step_s: float = 0.5) -> None:
        self.steps, self.clock, self.step_s = steps, clock, step_s

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.clock is not None:
            self.clock[0] += self.step_s
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


def _fit(cb: LRSchedule, stop: StopAt, **trainer_kwargs):
    pl.seed_everything(0)
    model = TinyCNN(lr=0.05)  # 128 samples, batch 16: 8 optimizer steps an epoch
    trainer = quiet_trainer(callbacks=[stop, cb], limit_val_batches=0, **trainer_kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    return model, trainer, [str(w.message) for w in caught]


def test_lightnings_default_length_is_no_plan_the_schedule_skips_before_any_work():
    cb = LRSchedule("onecycle", max_lr="auto", range_test_steps=10, horizon=0.5)
    model, trainer, said = _fit(cb, StopAt(5))  # no max_epochs / max_steps / max_time: Lightning plans 1000 epochs
    assert trainer.max_epochs == 1000 and cb.scheduler is None and cb.range_pick is None  # no range test either
    assert model.lrs == [[0.05]] * 5  # the model's own constant lr ran
    state, why = cb.status
    assert state == "skipped" and "no plan of its own" in why and "speedups.lr_schedule.plan" in why
    assert "4,000 optimizer steps (500 epochs)" in why  # what it would have spanned, in both units
    assert any("no plan of its own" in w for w in said)  # said before training, not only in the summary


@pytest.mark.parametrize(
    ("plan", "steps", "epochs"), [("2 epochs", 16, "2 epochs"), (12, 12, "1.5 epochs"), ("12 steps", 12, "1.5 epochs")]
)
def test_a_plan_in_steps_or_epochs_is_the_span_and_the_summary_says_both_units(plan, steps, epochs):
    cb = LRSchedule("onecycle", horizon=0.5, plan=plan)
    model, trainer, _ = _fit(cb, StopAt(steps + 3))  # again no plan of the trainer's own
    assert cb._total_steps == steps and cb.active
    assert f"over {steps} optimizer steps ({epochs})" in cb.status[1]
    lrs = [lr[0] for lr in model.lrs]
    assert lrs[0] == pytest.approx(0.05 / 25)  # the one-cycle's start
    assert max(lrs) == pytest.approx(0.05, rel=0.05)  # its peak inside the span
    assert lrs[steps] == pytest.approx(lrs[-1]) and lrs[-1] < 0.05 / 25  # annealed by the span's end, then held


def test_a_plan_given_overrides_the_trainers_and_the_horizon():
    cb = LRSchedule("onecycle", horizon=0.5, plan=6)
    _, trainer, _ = _fit(cb, StopAt(100), max_epochs=3)
    assert cb._total_steps == 6 and "the plan of 6 steps" in cb.status[1]


def test_a_time_plan_is_converted_with_the_step_time_of_the_first_steps():
    clock = [0.0]
    cb = LRSchedule("onecycle", plan="10s", clock=lambda: clock[0])
    model, _, _ = _fit(cb, StopAt(24, clock, step_s=0.5))
    # timed from the end of step 1 to step 10 at 0.5 s a step: 10 s - 5 s spent leaves 10 more steps
    assert cb._total_steps == 10
    assert "at 0.5 s a step" in cb.status[1] and "from step 10" in cb.status[1]
    lrs = [lr[0] for lr in model.lrs]
    assert lrs[:10] == [pytest.approx(0.05 / 25)] * 10  # held at the schedule's start while timed
    assert max(lrs) == pytest.approx(0.05, rel=0.05) and lrs[-1] < 0.05 / 25


def test_the_trainers_max_time_is_a_time_plan():
    clock = [0.0]
    cb = LRSchedule("onecycle", horizon=0.5, clock=lambda: clock[0])
    _, trainer, _ = _fit(cb, StopAt(24, clock, step_s=0.5), max_time="00:00:00:20")
    assert trainer.max_epochs == -1 and cb._total_steps == 10  # half of 20 s, as above
    assert "max_time" in cb.status[1]


def test_bad_plans_name_the_setting():
    for bad in ("soon", 0, -3, 2.5, "0 epochs", "1.5 steps", True):
        with pytest.raises(ValueError, match="plan"):
            LRSchedule(plan=bad)
    assert parse_plan("1.5h").amount == 5400 and parse_plan("01:00:00").amount == 3600


def _cli(args, capsys, caplog):
    import logging

    from lightning_speedups.cli import main

    quick = ["--trainer.limit_train_batches=4", "--trainer.limit_val_batches=0", "--trainer.logger=false"]
    quick += ["--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false"]
    stop = ["--trainer.callbacks+=test_lr_plan.StopAt", "--trainer.callbacks.steps=6"]
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["fit", "--config", "converge.yaml", *quick, *stop, *args]) == 0
    out = capsys.readouterr()
    return out.out + out.err + caplog.text + "\n".join(str(w.message) for w in caught)


def test_fit_with_converge_on_a_config_with_no_plan_says_so_before_training(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    text = _cli(["--model=helpers.TinyCNN"], capsys, caplog)  # a config with no plan: Lightning's 1000 epochs
    assert "no plan of its own" in text and "lr_schedule.plan" in text
    assert "chose peak lr" not in text and "no LR range test run" in text  # skipped before the range test


def test_fit_takes_the_plan_a_preset_writes(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "best.yaml").write_text("speedups:\n  lr_schedule:\n    max_lr: 0.01\n    plan: 1 epochs\n")
    text = _cli(["--model=helpers.TinyCNN", "--config", "best.yaml"], capsys, caplog)
    assert "OneCycleLR over 4 optimizer steps (1 epoch), the plan of 1 epochs" in text


def test_a_range_test_pick_below_the_users_lr_is_raised_to_it():
    from lightning_speedups.functional.lr_range import RangePick

    cb = LRSchedule("onecycle", max_lr="auto", plan=8)
    # as a range test leaves it: a pick a decade under the lowest loss, here below the user's lr 0.05
    cb.range_pick = RangePick(lr=0.004, min_loss_lr=0.04, steepest_lr=None, points=20, rule="test")
    cb.on_fit_start = lambda trainer, pl_module: setattr(cb, "_skip", None)  # keep the pick; no new range test
    model, _, _ = _fit(cb, StopAt(3))
    assert cb._peaks == [0.05] and "the optimizer's own lr: the LR range test's pick 0.004 is below it" in cb.status[1]
    cb2 = LRSchedule("onecycle", max_lr="auto", plan=8)
    cb2.range_pick = RangePick(lr=0.2, min_loss_lr=0.04, steepest_lr=None, points=20, rule="test")
    cb2.on_fit_start = lambda trainer, pl_module: setattr(cb2, "_skip", None)
    _fit(cb2, StopAt(3))
    assert cb2._peaks == [0.2] and "LR range test: lowest loss at 0.04" in cb2.status[1]


def test_the_callback_and_the_record_refuse_the_same_range_test_lengths():
    """Issue 30: the record said >= 10 and the callback >= 5; one range, in one place."""
    import dataclasses

    from lightning_speedups.callbacks.lr_range_test import RANGE_TEST_MIN_STEPS
    from lightning_speedups.tips.t01_lr_schedule import ScheduleSettings

    bounds = next(f for f in dataclasses.fields(ScheduleSettings) if f.name == "range_test_steps").metadata["bounds"]
    for steps in (RANGE_TEST_MIN_STEPS - 1, RANGE_TEST_MIN_STEPS, 100):
        record_refuses = bounds.problem(steps) is not None
        try:
            LRSchedule("onecycle", max_lr="auto", range_test_steps=steps)
            callback_refuses = False
        except ValueError:
            callback_refuses = True
        assert record_refuses == callback_refuses == (steps < RANGE_TEST_MIN_STEPS), steps
