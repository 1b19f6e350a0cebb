"""bench --target's decision with the seed as a block (issue 37): the residual fit, what it leaves out, and the
rules for heavy-tailed seeds restated seed by seed. Made-up times, no training."""

from __future__ import annotations

import math

import pytest

from lightning_speedups.bench.stats import (
    MIN_BLOCK_DOF,
    SeedBlocks,
    VariantSummary,
    blocked_decision,
    compare_target,
    pick_verdict,
    pooled_spread,
    seed_blocks,
    summarize,
)


def runs(*times, steps=None, values=None, first=0):
    """Runs that reached the target in ``times`` seconds, on seeds ``first``, ``first + 1``, ...; ``steps`` to it and
    the metric's ``values`` at two checks, per seed."""
    return [
        {
            "status": "ok",
            "reached": True,
            "time_to_target_s": t,
            "repeat": first + i,
            "steps_to_target": None if steps is None else steps[i],
            "checks": [] if values is None else [{"step": 1, "value": v} for v in values[i]],
        }
        for i, t in enumerate(times)
    ]


def decide(cand, base, groups):
    s, b = summarize(cand), summarize(base)
    compare_target(s, cand, b, base, pooled_spread(groups), seed_blocks(groups, base))
    return s


def test_the_residual_is_the_interaction_the_seeds_effect_taken_out():
    """Every variant 30% slower on seed 1: an additive table has no residual at all, the pooled spread a large
    one; one cell off the pattern is all the residual there is (by hand: SS = 0.5 * sum of the seed contrasts'
    squared deviations from their mean)."""
    base, a, b = runs(100, 130), runs(50, 65), runs(70, 91)
    assert seed_blocks([base, a, b], base).sd == pytest.approx(0.0, abs=1e-9)
    assert pooled_spread([base, a, b]).sd > 0.15
    b = runs(70, 70)
    blocks = seed_blocks([base, a, b], base)
    contrasts = [math.log(1.3), math.log(1.3), 0.0]
    mean = sum(contrasts) / 3
    ss = 0.5 * sum((c - mean) ** 2 for c in contrasts)
    assert blocks.dof == 2 and blocks.sd == pytest.approx(math.sqrt(ss / 2), rel=1e-9)
    assert (blocks.runs, blocks.variants, blocks.seeds) == (6, 3, 2)


def test_an_unbalanced_table_is_fit_by_least_squares():
    """Seeds run per variant differ (a cut candidate has one, a confirmed one three): the fit is the additive
    model's least squares, whose residual is orthogonal to every variant and every seed."""
    base = runs(100, 120, 90)
    groups = [base, runs(50, 66), runs(60), runs(40, 50, 33)]
    blocks = seed_blocks(groups, base)
    assert blocks.runs == 9 and blocks.variants == 4 and blocks.seeds == 3
    assert blocks.dof == 9 - 4 - 3 + 1
    # the same fit by numpy's least squares on the design matrix (variants, then seeds 1 and 2)
    np = pytest.importorskip("numpy")
    rows, ys = [], []
    for v, g in enumerate(groups):
        for r in g:
            x = [0.0] * 6
            x[v] = 1.0
            if r["repeat"]:
                x[3 + r["repeat"]] = 1.0
            rows.append(x)
            ys.append(math.log(r["time_to_target_s"]))
    _, res, *_ = np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)
    assert blocks.sd == pytest.approx(math.sqrt(float(res[0]) / blocks.dof), rel=1e-6)


def test_a_seed_the_baseline_did_not_run_and_a_variant_with_a_failed_run_are_left_out():
    base = runs(100, 120)
    cand = runs(50, 61, 45)  # its seed 2 has no baseline run to pair with
    failed = runs(70, 80) + [{"status": "failed", "repeat": 2}]
    blocks = seed_blocks([base, cand, failed, runs(60, 75)], base)
    assert blocks.runs == 6 and blocks.variants == 3 and blocks.seeds == 2
    s = decide(cand, base, [base, cand, failed, runs(60, 75)])
    assert s.speedup == pytest.approx(math.sqrt(100 / 50 * 120 / 61))  # the seeds both ran, not seed 2's 45 s


def test_a_variant_that_trained_as_one_already_fit_is_left_out_of_the_residual():
    """A throughput part alone (channels_last, workers) trains the baseline's very curve on each seed: what it adds
    to the fit is timing noise, which would shrink the residual the schedules' interaction gives. Curves that only
    reached the target at the same check (validation once an epoch: the GRU's three one-cycles at batch 512 all at
    step 468) are not alike: the metric at each check tells them apart."""
    curve = [(0.80, 0.87), (0.82, 0.86)]
    base = runs(100, 130, steps=[1000, 1300], values=curve)
    sched = runs(50, 80, steps=[480, 760], values=[(0.83, 0.89), (0.84, 0.885)])
    other = runs(60, 70, steps=[590, 700], values=[(0.81, 0.886), (0.85, 0.887)])
    twin = runs(80, 104, steps=[1000, 1300], values=curve)  # 1.25x on both seeds: the baseline's curve, faster
    without = seed_blocks([base, sched, other], base)
    with_twin = seed_blocks([base, sched, other, twin], base)
    assert with_twin == without and without.variants == 3
    same_check = runs(80, 104, steps=[1000, 1300], values=[(0.80, 0.87), (0.83, 0.87)])  # seed 1: another curve
    counted = seed_blocks([base, sched, other, same_check], base)
    assert counted.variants == 4 and counted.sd < without.sd  # what a twin would have done to the residual
    # the twin's own gain is still decided, against the residual of the others
    s = decide(twin, base, [base, sched, other, twin])
    assert s.speedup == pytest.approx(1.25) and s.decided_by.startswith("seeds as blocks")
    # without the metric at any check, steps alone do not make a twin
    assert seed_blocks([base, sched, other, runs(80, 104, steps=[1000, 1300])], base).variants == 4


def test_too_few_residual_dof_falls_back_to_the_pooled_spread():
    base, cand = runs(75, 100), runs(42, 56)
    assert seed_blocks([base, cand], base).dof == 1 < MIN_BLOCK_DOF
    s = decide(cand, base, [base, cand])
    assert "pooled over" in s.decided_by


def test_one_seed_carrying_the_gain_and_one_more_seed_deciding_it():
    blocks = SeedBlocks(0.1, 4, 10, 5, 2)
    s = VariantSummary.empty()
    blocked_decision(s, {0: math.log(1.8), 1: math.log(1.75)}, blocks)
    assert s.speedup_ci[0] > 1.0 and s.carried_by is None and not s.one_more_decides
    assert pick_verdict(s, 0.02)[0]
    blocked_decision(s, {0: math.log(2.2), 1: math.log(1.1)}, blocks)  # above 1.0, but seed 1 alone is not
    assert s.speedup_ci[0] > 1.0 and s.carried_by == "seed 0"
    blocked_decision(s, {0: math.log(1.35), 1: math.log(1.25)}, SeedBlocks(0.08, 2, 6, 3, 2))
    assert s.speedup_ci[0] < 1.0 and s.one_more_decides  # every seed a gain; three seeds at 3 dof would decide
    blocked_decision(s, {0: math.log(1.6), 1: math.log(0.95)}, SeedBlocks(0.08, 2, 6, 3, 2))
    assert s.speedup_ci[0] < 1.0 and not s.one_more_decides  # seed 1 is a loss: not a lead seed by seed
