"""The error rate of bench's time-to-target decision on A/A pairs (issues 28 and 37).

**Real runs.** Input: the JSON of a bench run in target mode whose variants are all the same setup (``--tips
none --presets none --repeats K``: the baseline and its A/A copy, K runs each, seeds paired). Every split of
those 2K runs into a pretend "baseline" and a pretend "candidate" of ``n`` runs each is decided by bench's own
rule (:func:`~lightning_speedups.bench.stats.compare_target` with the spread pooled over the runs it was given,
then :func:`~lightning_speedups.bench.stats.pick_verdict`); a pick is an error, since both sides are the same
setup. Each split is decided twice: by the interval alone (the rule of issue 28), and by the rule of issue 37 (a
pick that one run carries is refused, and one more run of each side, drawn from the runs the split left unused,
decides it when there are any). It also says how much the crossing between checks narrows the spread against the
time of the check that saw the target.

    python -m lightning_speedups bench --config benchmarks/tta_autoencoder.yaml --target val_loss=0.5 \\
        --tips none --presets none --repeats 6 --json aa.json
    python benchmarks/target_aa.py aa.json --n 2

**Simulated seeds** (``--simulate``): six real runs are too few for a rate, so the same rules also decide
``--trials`` draws of log times to the target from six seed-to-seed laws (:data:`LAWS`), chosen before any rule
was run on them. Three have no effect shared between variants, each run about sd 0.4 on its own (the autoencoder's
spread): normal; Student's t with 3 degrees of freedom (heavy tails); and a two-point mixture where one seed in
three takes 2.2x as long (what the autoencoder's seeds did). Three share a seed effect of sd 0.4 between every
variant (a seed slow for the baseline is slow for the candidates: issue 37's GRU task) and leave each run a
residual of its own: normal sd 0.15, Student's t 3 dof scaled to 0.15, one run in three 1.5x slower. Each trial is
``--groups`` variants of ``n`` seeds (bench fits the spread over every variant it ran: the baseline, the
candidates), the first the baseline; the second is the candidate, the same setup (A/A: any pick is an error) or
``--gain`` times faster (how often a real gain is still picked). The decision takes the seed as a block, as bench
does since 2026-12-07 (:func:`~lightning_speedups.bench.stats.seed_blocks`); ``--rule pooled`` decides the same
draws by the pooled spread alone (the rule before).

    python benchmarks/target_aa.py --simulate --n 2 3 --trials 2000                # and --rule pooled

The last columns decide each draw by the rule at the budget bench has left (:func:`decide_budgeted`): at most 0, 1
or 2 more seeds a side, a carried gain whose seed does not fit settled by ranks
(:func:`~lightning_speedups.bench.stats.ranks_lead`).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lightning_speedups.bench.stats import compare_target, pick_verdict, pooled_spread, seed_blocks, summarize


def _t3(scale: float) -> Callable[[random.Random], float]:
    return lambda rng: scale / math.sqrt(3) * rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3)


#: the seed-to-seed laws of log time to the target the simulation draws from: ``(sd of a seed's effect shared by
#: every variant, the law of each run's own share)``. The first three have no shared effect (each run about sd
#: 0.4 on its own); the last three share a seed effect of sd 0.4 (a seed slow for the baseline is slow for every
#: candidate, as on the GRU task of issue 37) and leave each run a residual of its own
LAWS: dict[str, tuple[float, Callable[[random.Random], float]]] = {
    "normal": (0.0, lambda rng: rng.gauss(0.0, 0.4)),
    "student-t3": (0.0, _t3(0.4)),
    "one-in-three-slow": (0.0, lambda rng: (math.log(2.2) if rng.random() < 1 / 3 else 0.0) + rng.gauss(0.0, 0.05)),
    "seed 0.4 + normal 0.15": (0.4, lambda rng: rng.gauss(0.0, 0.15)),
    "seed 0.4 + student-t3 0.15": (0.4, _t3(0.15)),
    "seed 0.4 + one in three 1.5x": (
        0.4,
        lambda rng: (math.log(1.5) if rng.random() < 1 / 3 else 0.0) + rng.gauss(0.0, 0.05),
    ),
}


def _run(seconds: float, repeat: int) -> dict[str, Any]:
    return {"status": "ok", "reached": True, "time_to_target_s": seconds, "repeat": repeat}


#: whether the decision takes the seed as a block (bench's rule since 2026-12-07); ``--rule pooled``: the rule before
BLOCKS = True


def _summary(base: Sequence[dict], cand: Sequence[dict], others: Sequence[Sequence[dict]]) -> Any:
    bs, cs = summarize(list(base)), summarize(list(cand))
    groups = [list(base), list(cand), *others]
    blocks = seed_blocks(groups, groups[0]) if BLOCKS else None
    compare_target(cs, list(cand), bs, list(base), pooled_spread(groups), blocks)
    return cs


def decide(base: Sequence[dict], cand: Sequence[dict], others: Sequence[Sequence[dict]], min_gain: float) -> tuple:
    """``(picked by the interval alone, picked by issue 37's rule, one run carried it)`` for one split."""
    cs = _summary(base, cand, others)
    carried = cs.carried_by is not None
    ok_new, _ = pick_verdict(cs, min_gain)
    cs.carried_by = None
    ok_old, _ = pick_verdict(cs, min_gain)
    return ok_old, ok_new, carried


def decide_with_one_more(
    base: list[dict], cand: list[dict], others: Sequence[Sequence[dict]], more: Callable[[], tuple], min_gain: float
) -> tuple[bool, bool, bool]:
    """Issue 37's whole rule: a pick one run carries gets one more run of each side (``more()`` draws them, or
    returns ``None`` when there are none) and is decided again, refused if one run still carries it."""
    old, new, carried = decide(base, cand, others, min_gain)
    if carried:
        extra = more()
        if extra is not None:
            b, c = extra
            _, new, _ = decide([*base, b], [*cand, c], others, min_gain)
    return old, new, carried


def decide_confirming(
    base: list[dict], cand: list[dict], others: Sequence[Sequence[dict]], more: Callable[[], tuple], min_gain: float
) -> tuple[bool, bool]:
    """The rule bench runs since the leader is confirmed (``(picked, confirmed)``): issue 37's whole rule, and a
    candidate it left undecided whose gain clears ``min_gain`` and that one more seed of each side would decide if
    its figures held (:func:`~lightning_speedups.bench.stats.one_more_seed_decides`) gets that seed (``more()``)
    and issue 37's whole rule again, on the longer runs."""
    _, new, carried = decide_with_one_more(base, cand, others, more, min_gain)
    if new or carried:
        return new, False
    cs = _summary(base, cand, others)
    if not cs.one_more_decides or (cs.speedup or 0.0) < 1.0 + min_gain:
        return False, False
    extra = more()
    if extra is None:
        return False, False
    b, c = extra
    _, again, _ = decide_with_one_more([*base, b], [*cand, c], others, more, min_gain)
    return again, True


def decide_budgeted(
    base: list[dict],
    cand: list[dict],
    others: Sequence[Sequence[dict]],
    more: Callable[[], tuple],
    min_gain: float,
    pairs: int,
) -> bool:
    """The rule bench runs when its budget holds ``pairs`` more seeds a side at most (0, 1, 2, ...): a candidate
    left undecided that one more seed would decide gets it (the leader confirmed), a gain that one run carries
    gets one more seed and is decided again, and a carried gain whose seed no longer fits is settled by ranks
    (:func:`~lightning_speedups.bench.stats.ranks_lead`, ``pick_verdict(..., by_ranks=True)``)."""
    left = [pairs]

    def draw() -> tuple | None:
        if not left[0]:
            return None
        left[0] -= 1
        return more()

    cs = _summary(base, cand, others)
    if pick_verdict(cs, min_gain)[0]:
        return True
    if cs.carried_by is None:
        if not cs.one_more_decides or (cs.speedup or 0.0) < 1.0 + min_gain:
            return False
        extra = draw()
        if extra is None:
            return False
        base, cand = [*base, extra[0]], [*cand, extra[1]]
        cs = _summary(base, cand, others)
        if pick_verdict(cs, min_gain)[0] or cs.carried_by is None:
            return pick_verdict(cs, min_gain)[0]
    extra = draw()
    if extra is None:
        return pick_verdict(cs, min_gain, by_ranks=True)[0]
    return pick_verdict(_summary([*base, extra[0]], [*cand, extra[1]], others), min_gain)[0]


#: the budgets (more seeds a side it holds) :func:`decide_budgeted` is simulated at
BUDGETS = (0, 1, 2)


def _unused_pair(runs: list[dict], unused: list[int], labels: Iterator[int]) -> tuple[dict, dict] | None:
    """One more run of each side from the runs a split left unused (``None`` when fewer than two are left), as the
    next seed of ``labels``; the two are taken out of ``unused``."""
    if len(unused) < 2:
        return None
    a, b = unused.pop(0), unused.pop(0)  # drawn once: a second call draws the next two
    seed = next(labels)
    return dict(runs[a], repeat=seed), dict(runs[b], repeat=seed)


def real(path: str, ns: Sequence[int], min_gain: float) -> None:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    runs = [r for v in data["variants"] for r in v["runs"] if r.get("status") == "ok" and r.get("reached")]
    print(f"{len(runs)} runs of one setup reached the target")
    for key in ("time_to_target_s", "crossing_s"):
        logs = [math.log(r[key]) for r in runs if r.get(key)]
        if len(logs) > 1:
            print(f"  spread of log {key}: sd {statistics.stdev(logs):.3f} (cv ~{100 * statistics.stdev(logs):.1f}%)")
    for n in ns:
        if 2 * n > len(runs):
            continue
        old = new = carried = total = confirming = 0
        # splits where each side has distinct seeds, as in a bench run: total, then picks by each rule
        distinct = [0, 0, 0, 0]
        for chosen in itertools.combinations(range(len(runs)), 2 * n):
            unused = [i for i in range(len(runs)) if i not in chosen]
            for left in itertools.combinations(chosen, n):
                right = [i for i in chosen if i not in left]
                base = [dict(runs[i], repeat=k) for k, i in enumerate(left)]
                cand = [dict(runs[i], repeat=k) for k, i in enumerate(right)]

                more = functools.partial(_unused_pair, runs, list(unused), itertools.count(n))
                o, w, c = decide_with_one_more(base, cand, [], more, min_gain)
                f, _ = decide_confirming(
                    base, cand, [], functools.partial(_unused_pair, runs, list(unused), itertools.count(n)), min_gain
                )
                old, new, carried, total = old + o, new + w, carried + c, total + 1
                confirming += f
                if all(len({runs[i].get("repeat") for i in side}) == n for side in (left, right)):
                    distinct = [distinct[0] + 1, distinct[1] + o, distinct[2] + w, distinct[3] + f]
        print(
            f"  {n} vs {n} runs: {total} A/A splits; picked by the interval alone {old} ({100 * old / total:.2f}%),"
            f" by issue 37's rule {new} ({100 * new / total:.2f}%), confirming the leader too {confirming}"
            f" ({100 * confirming / total:.2f}%); one run carried {carried}"
        )
        if distinct[0]:
            print(
                f"    of them {distinct[0]} with distinct seeds on each side (as bench runs them): interval alone"
                f" {distinct[1]}, issue 37's rule {distinct[2]}, confirming the leader {distinct[3]}"
            )


class Seeds:
    """Draws of runs' times to the target from one seed-to-seed ``law`` (:data:`LAWS`), ``gain`` times faster for a
    candidate; :meth:`trial` draws the seeds' shared effects anew."""

    def __init__(self, law: tuple[float, Callable[[random.Random], float]], seed: int) -> None:
        self.seed_sd, self.law = law
        self.rng = random.Random(seed)
        self.effects: dict[int, float] = {}

    def trial(self) -> None:
        self.effects = {}

    def _effect(self, seed: int) -> float:
        if seed not in self.effects:
            self.effects[seed] = self.rng.gauss(0.0, self.seed_sd) if self.seed_sd else 0.0
        return self.effects[seed]

    def runs(self, k: int, gain: float = 1.0, first: int = 0) -> list[dict]:
        return [
            _run(100.0 * math.exp(self._effect(first + i) + self.law(self.rng)) / gain, first + i) for i in range(k)
        ]

    def one_more(self, labels: Iterator[int], gain: float) -> tuple[dict, dict]:
        n = next(labels)  # the next seed: its effect is the one any other draw of it in this trial shares
        return self.runs(1, 1.0, n)[0], self.runs(1, gain, n)[0]


def simulate(ns: Sequence[int], trials: int, groups: int, gains: Sequence[float], min_gain: float, seed: int) -> None:
    print(
        "| law | seeds per variant | true gain | picked: interval alone | picked: issue 37's rule |"
        " picked: confirming the leader too | carried | confirmed |"
        + "".join(f" budget of {k} seed(s): ranks when short |" for k in BUDGETS)
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(BUDGETS))
    for law, draw in LAWS.items():
        for n in ns:
            for gain in gains:
                seeds = Seeds(draw, seed)
                old = new = carried = confirming = confirmed = 0
                budgeted = [0] * len(BUDGETS)
                for _ in range(trials):
                    seeds.trial()
                    base, cand = seeds.runs(n), seeds.runs(n, gain)
                    others = [seeds.runs(n) for _ in range(groups - 2)]
                    # each rule decides the same first runs; the extra seeds each draws are its own (runs of their
                    # own on the same next seeds: their shared effects are the trial's)
                    more = functools.partial(seeds.one_more, itertools.count(n), gain)
                    o, w, c = decide_with_one_more(base, cand, others, more, min_gain)
                    more = functools.partial(seeds.one_more, itertools.count(n), gain)
                    f, k = decide_confirming(base, cand, others, more, min_gain)
                    old, new, carried = old + o, new + w, carried + c
                    confirming, confirmed = confirming + f, confirmed + k
                    for i, pairs in enumerate(BUDGETS):
                        more = functools.partial(seeds.one_more, itertools.count(n), gain)
                        budgeted[i] += decide_budgeted(base, cand, others, more, min_gain, pairs)
                print(
                    f"| {law} | {n} | {gain:g}x | {100 * old / trials:.2f}% | {100 * new / trials:.2f}% |"
                    f" {100 * confirming / trials:.2f}% | {100 * carried / trials:.1f}% |"
                    f" {100 * confirmed / trials:.1f}% |" + "".join(f" {100 * b / trials:.2f}% |" for b in budgeted),
                    flush=True,
                )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="?")
    ap.add_argument("--n", type=int, nargs="+", default=[2, 3], help="runs (seeds) per side")
    ap.add_argument("--min-gain", type=float, default=0.02)
    ap.add_argument("--simulate", action="store_true", help="decide simulated seeds instead of a bench JSON")
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--groups", type=int, default=4, help="variants the spread is pooled over (simulation)")
    ap.add_argument("--gain", type=float, nargs="+", default=[1.0, 1.5, 2.0], help="the candidate's true gain")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rule", choices=("blocks", "pooled"), default="blocks", help="pooled: the decision before seeds were blocks"
    )
    a = ap.parse_args()
    global BLOCKS
    BLOCKS = a.rule == "blocks"
    if a.simulate:
        simulate(a.n, a.trials, a.groups, a.gain, a.min_gain, a.seed)
    elif a.json:
        real(a.json, a.n, a.min_gain)
    else:
        ap.error("give a bench JSON, or --simulate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
