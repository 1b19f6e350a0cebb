"""T01 lr-schedule: One-cycle / cyclic learning-rate schedules stepped per optimizer step.

Card:
    Seeds: A#1 (claim: huge speed-ups in the best case ('super-convergence')).
    What it does: LRSchedule replaces a constant learning rate by a one-cycle or cyclic schedule
    stepped every optimizer step, total steps from trainer.estimated_stepping_batches; ScheduleFree
    swaps Adam / AdamW / SGD with momentum for its schedule-free twin (schedulefree), which needs no
    schedule and no plan, its train / eval mode switched around validation, test, predict and
    checkpoints; doctor warns about a one-cycle schedule stepped per epoch.
    Expected gain: fewer epochs to a target accuracy when the peak learning rate is right (judge it
    by time to accuracy, not samples/s).
    When it hurts: it changes the optimisation: a peak learning rate that is too high diverges;
    schedule-free needs its learning rate tuned too (often 1-10x AdamW's) and evaluates BatchNorm
    statistics gathered at other weights; compare accuracy, not only speed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from lightning_speedups.callbacks import LRSchedule, ScheduleFree
from lightning_speedups.callbacks.lr_range_test import RANGE_TEST_MIN_STEPS
from lightning_speedups.functional.schedule_free import is_schedule_free, schedule_free_twin, why_not_schedule_free
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import has_callback
from lightning_speedups.tips.record import (
    FROM_PART,
    BenchVariant,
    BuildContext,
    Placed,
    Setting,
    SuiteCase,
    Tip,
    at,
    bounded,
    settings_of,
)


@dataclass
@settings_of(LRSchedule)
class ScheduleSettings:
    """T01: a one-cycle or cyclic schedule stepped per optimizer step; total steps from the trainer."""

    name: Literal["off", "onecycle", "cyclic"] = "off"
    #: peak learning rate: a number, ``None`` (the optimizer's lr) or ``"auto"`` (an LR range test at the
    #: start of fit, through the trainer's own loop and undone from memory, picks it; the chosen lr is printed)
    max_lr: Union[float, Literal["auto"], None] = bounded(FROM_PART, gt=0)
    pct_start: float = bounded(FROM_PART, gt=0, lt=1)
    div_factor: float = bounded(FROM_PART, gt=0)
    final_div_factor: float = bounded(FROM_PART, gt=0)
    anneal_strategy: Literal["cos", "linear"] = FROM_PART
    base_lr: Optional[float] = bounded(FROM_PART, gt=0)
    cycles: int = bounded(FROM_PART, ge=1)
    mode: Literal["triangular", "triangular2", "exp_range"] = FROM_PART
    #: ``max_lr: auto``: optimizer steps of the range test (undone afterwards; its time counts)
    range_test_steps: int = bounded(FROM_PART, ge=RANGE_TEST_MIN_STEPS)
    #: share of the run's optimizer steps the schedule spans (a one-cycle then holds its final lr)
    horizon: float = bounded(FROM_PART, gt=0, le=1)
    #: the schedule's own span, for a run with no plan (no max_epochs / max_steps / max_time): optimizer
    #: steps (``2000``, ``"2000 steps"``), ``"3 epochs"`` or a time (``"10min"``, ``"00:10:00"``); horizon
    #: does not apply to it. ``bench --target`` writes it from the steps the baseline took to the target
    plan: Union[int, str, None] = FROM_PART
    #: ``max_lr: auto``: the peak is the range test's lowest-loss lr divided by this (10: a decade below it; 2-3 is
    #: bolder and diverges on some seeds: pair it with back_offs)
    peak_divisor: float = bounded(FROM_PART, ge=1)
    #: how many times the schedule may back off from a divergence (weights and optimizer put back, peak halved,
    #: a new cycle over the steps left); 0: not watched
    back_offs: int = bounded(FROM_PART, ge=0)


@dataclass
@settings_of(ScheduleFree)
class ScheduleFreeSettings:
    """T01: the optimizer swapped for its schedule-free twin (``schedulefree``: Adam/AdamW -> AdamWScheduleFree,
    SGD with momentum -> SGDScheduleFree), which needs no schedule and no plan; train / eval mode switched by the
    Trainer's hooks. With it on, ``lr_schedule`` steps aside."""

    enabled: bool = False
    #: the twin's linear warm-up: optimizer steps (an int) or a share of the run's planned steps (a float in (0, 1))
    warmup_steps: Union[int, float] = bounded(FROM_PART, ge=0)
    #: the twin's learning rate is the optimizer's times this (1: the user's rate)
    lr_scale: float = bounded(FROM_PART, gt=0)


def _schedule_free_problem(value: ScheduleFreeSettings) -> Optional[str]:
    w = value.warmup_steps
    if isinstance(w, float) and not w.is_integer() and not 0.0 < w < 1.0:
        return (
            f"warmup_steps {w!r} is neither a number of steps (an int) nor a share of the run (in (0, 1)); fix: give"
            " one of the two"
        )
    return None


def check(facts: Facts) -> Finding:
    """T01 lr-schedule: a one-cycle / cyclic schedule stepped per epoch; a constant learning rate."""
    tip = "T01"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    if has_callback(facts, "LRSchedule") is not None and facts.callback_of("LRSchedule").active:
        return Finding.ok(tip, "speedups.lr_schedule: " + facts.callback_of("LRSchedule").status[1])
    free = has_callback(facts, "ScheduleFree")
    if free is not None and free.active:
        return Finding.ok(tip, "speedups.schedule_free: " + free.status[1])
    own = [type(o).__name__ for o in facts.optimizers if is_schedule_free(o)]
    if own:  # a schedule-free optimizer needs no schedule: never advise one for it
        return Finding.ok(tip, f"{', '.join(own)} is schedule-free: it needs no learning-rate schedule")
    bad = [(name, interval) for name, interval, cyclic in facts.schedulers if cyclic and interval != "step"]
    if bad:
        name, interval = bad[0]
        return Finding.from_items(
            tip,
            [
                Item(
                    "medium",
                    f"{name} is stepped once per {interval} (interval='{interval}'): a one-cycle/cyclic schedule"
                    " is meant to move every optimizer step, so over a short run it barely changes the learning rate",
                    "return {'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'interval': 'step'}} from"
                    " configure_optimizers, or drop it and set speedups.lr_schedule.name: onecycle (LRSchedule callback,"
                    " total steps from the trainer)",
                )
            ],
        )
    if facts.schedulers:
        desc = ", ".join(f"{n} (interval={i})" for n, i, _ in facts.schedulers)
        return Finding.ok(tip, f"the learning rate is scheduled: {desc}")
    if not facts.optimizers:
        return Finding.ok(tip, "the model has no optimizer: nothing to schedule")
    opt = type(facts.optimizers[0]).__name__
    lrs = sorted(
        {g.get("lr") for o in facts.optimizers for g in o.param_groups if isinstance(g.get("lr"), (int, float))}
    )
    lr = ", ".join(f"{x:.3g}" for x in lrs) or "?"
    return Finding.from_items(
        tip,
        [
            Item(
                "low",
                f"constant learning rate: {opt} at lr {lr} with no scheduler",
                "try the converge preset (--config converge: a one-cycle schedule whose peak an LR range test picks,"
                " completed in the first half of the run; on the Fashion-MNIST reference with fast it reached the"
                " target in 0.45-0.48x of the constant lr's time), or, for a run with no fixed length,"
                " speedups.schedule_free.enabled: true (the optimizer's schedule-free twin, no plan needed); either"
                " changes the optimisation, so judge it by time to your metric:"
                " `python -m lightning_speedups bench --config <yours> --target val_acc=<goal>`",
            )
        ],
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T01 adds, each at its place in the callback list (with both on, the schedule steps aside at the
    start of fit, saying so: schedule-free wins)."""
    out: list[Placed] = []
    if s.schedule_free.enabled:
        w = s.schedule_free.warmup_steps
        warmup = int(w) if isinstance(w, float) and w.is_integer() else w
        out.append((at("schedule_free"), ScheduleFree(warmup_steps=warmup, lr_scale=s.schedule_free.lr_scale)))
    if s.lr_schedule.name != "off":
        out.append((at("lr_schedule"), LRSchedule(**dataclasses.asdict(s.lr_schedule))))
    return out


def _schedule_free(trainer: Any, model: Any, callbacks: Any) -> None:
    managed = [o for o in trainer.optimizers if is_schedule_free(o)]
    assert managed, f"no schedule-free optimizer: {[type(o).__name__ for o in trainer.optimizers]}"


TIP = Tip(
    id="T01",
    slug="lr-schedule",
    title="One-cycle / cyclic learning-rate schedules stepped per optimizer step",
    seeds=("A#1",),
    claim="huge speed-ups in the best case ('super-convergence')",
    does="LRSchedule replaces a constant learning rate by a one-cycle or cyclic schedule stepped every optimizer step, total steps from trainer.estimated_stepping_batches; ScheduleFree swaps Adam / AdamW / SGD with momentum for its schedule-free twin (schedulefree), which needs no schedule and no plan, its train / eval mode switched around validation, test, predict and checkpoints; doctor warns about a one-cycle schedule stepped per epoch.",
    gain="fewer epochs to a target accuracy when the peak learning rate is right (judge it by time to accuracy, not samples/s)",
    hurts="it changes the optimisation: a peak learning rate that is too high diverges; schedule-free needs its learning rate tuned too (often 1-10x AdamW's) and evaluates BatchNorm statistics gathered at other weights; compare accuracy, not only speed",
    check=check,
    settings=(
        Setting(
            "lr_schedule",
            ScheduleSettings,
            factory=ScheduleSettings,
            doc="T01. One-cycle / cyclic schedule stepped per optimizer step.",
            on=lambda v: v.name != "off",
        ),
        Setting(
            "schedule_free",
            ScheduleFreeSettings,
            factory=ScheduleFreeSettings,
            doc="T01. The optimizer swapped for its schedule-free twin (no schedule, no plan); lr_schedule steps aside.",
            on=lambda v: v.enabled,
            validate=_schedule_free_problem,
        ),
    ),
    callbacks=callbacks,
    parts=(LRSchedule, ScheduleFree, schedule_free_twin, why_not_schedule_free),
    bench=(
        BenchVariant({"lr_schedule.name": "onecycle", "lr_schedule.max_lr": "auto"}, mode="target", name="onecycle"),
        # a bolder peak, halfway to the range test's lowest loss (Smith's own rule sits near that edge), made safe by
        # backing off when it diverges; its range test is converge's 50 steps
        BenchVariant(
            {
                "lr_schedule.name": "onecycle",
                "lr_schedule.max_lr": "auto",
                "lr_schedule.range_test_steps": 50,
                "lr_schedule.peak_divisor": 2,
                "lr_schedule.back_offs": 3,
            },
            mode="target",
            name="bold-peak",
        ),
        BenchVariant({"lr_schedule.name": "cyclic", "lr_schedule.max_lr": "auto"}, mode="target", name="cyclic"),
        # plan-free: no span to measure; its warm-up is a share of the baseline's steps to the target (bench sets it)
        BenchVariant({"schedule_free.enabled": True}, mode="target", name="schedule-free"),
    ),
    not_timed="a learning-rate schedule changes the optimisation, not the step time: judged by time to a target (bench --target), not samples/s",
    suite=(
        SuiteCase(
            "onecycle", settings={"lr_schedule.name": "onecycle"}, kinds=("cnn", "transformer", "configure_model")
        ),
        # the manual kind's Adam pair is swapped too (its steps are the model's own); the scheduler kind keeps its
        # SGD, which has a scheduler
        SuiteCase(
            "schedule_free",
            settings={"schedule_free.enabled": True},
            kinds=("cnn", "transformer", "manual", "configure_model"),
            acted=_schedule_free,
        ),
    ),
)
