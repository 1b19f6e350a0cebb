"""Seeds as blocks: what bench's time-to-target decision would say if it took the seed out of the spread first
(issue 37, a measurement for a rule bench does not use yet).

Bench runs every variant on the same seeds (0, 1, ...), and a seed that is slow for the baseline tends to be slow
for every candidate (the same data order, the same initial weights): on the GRU task the baseline's seeds took 75
and 100 s, the candidate's 42 and 56 s, a ratio of 1.79 on both. Bench's interval pools each variant's spread
around its own mean (:func:`lightning_speedups.bench.stats.pooled_spread`), so the seed's share of that spread
widens it (here to 0.80-4.00). A randomized-block analysis (log time = variant + seed + residual) estimates the
residual from the variant-by-seed interaction instead, with (V-1)(S-1) degrees of freedom.

Two parts:

- ``JSON ...``: re-decides each bench JSON's variants that reached on every one of the first two seeds, with both
  intervals (the interval alone, without bench's leave-one-out rule, for both).
- ``--simulate``: the A/A rate (a candidate that is the baseline: any pick is an error) and the power (a 1.5x and
  a 2x candidate) of both intervals over ``--trials`` draws of 4 variants x S seeds: a seed effect shared by every
  variant (sd 0.4 of log time, about the spread issue 28 measured) plus a residual from one of four laws fixed
  before either interval ran on them (normal sd 0.15; Student's t 3 dof scaled to 0.15; one run in three 1.5x
  slower; and no seed effect at all, the residual normal sd 0.4: the case the pooled interval assumes).

    python benchmarks/seed_blocks.py benchmarks/results/tta_gru_bf16_bench_6.json --simulate --trials 4000
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Callable

from lightning_speedups.functional.timing import t95

#: bench's default --min-gain
MIN_GAIN = 1.02

Table = dict[str, list[float]]  # variant -> log time to the target, by seed


def blocked_interval(table: Table, cand: str, base: str = "baseline") -> tuple[float, float, float, int]:
    """``(speed-up, low, high, dof)`` of ``cand`` over ``base`` with the seed as a block."""
    seeds = len(table[base])
    row = {v: statistics.fmean(t) for v, t in table.items()}
    col = [statistics.fmean(t[s] for t in table.values()) for s in range(seeds)]
    grand = statistics.fmean(row.values())
    ss = sum((t[s] - row[v] - col[s] + grand) ** 2 for v, t in table.items() for s in range(seeds))
    dof = (len(table) - 1) * (seeds - 1)
    half = t95(dof) * math.sqrt(ss / dof) * math.sqrt(2 / seeds)
    diff = row[base] - row[cand]
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half), dof


def pooled_interval(table: Table, cand: str, base: str = "baseline") -> tuple[float, float, float, int]:
    """``(speed-up, low, high, dof)`` with each variant's spread around its own mean pooled (bench's interval)."""
    seeds = len(table[base])
    ss = sum((x - statistics.fmean(t)) ** 2 for t in table.values() for x in t)
    dof = len(table) * (seeds - 1)
    half = t95(dof) * math.sqrt(ss / dof) * math.sqrt(2 / seeds)
    diff = statistics.fmean(table[base]) - statistics.fmean(table[cand])
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half), dof


def from_json(path: str, seeds: int = 2) -> list[str]:
    data = json.load(open(path))
    table: Table = {}
    for v in data["variants"]:
        runs = v["runs"][:seeds]
        if len(runs) == seeds and all(r.get("reached") and r.get("crossing_s") for r in runs):
            table[v["name"]] = [math.log(r["crossing_s"]) for r in runs]
    lines = []
    for cand in table:
        if cand != "baseline" and "baseline" in table:
            p, b = pooled_interval(table, cand), blocked_interval(table, cand)
            lines.append(
                f"{path.rsplit('/', 1)[-1]}: {cand}: pooled {p[0]:.2f}x [{p[1]:.2f}-{p[2]:.2f}] ({p[3]} dof);"
                f" seeds as blocks {b[0]:.2f}x [{b[1]:.2f}-{b[2]:.2f}] ({b[3]} dof)"
            )
    return lines


LAWS: dict[str, tuple[float, Callable[[random.Random], float]]] = {  # name -> (seed effect sd, residual law)
    "seed 0.4 + normal 0.15": (0.4, lambda rng: rng.gauss(0.0, 0.15)),
    "seed 0.4 + t3 0.15": (
        0.4,
        lambda rng: 0.15 / math.sqrt(3) * rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3),
    ),
    "seed 0.4 + one in three 1.5x": (
        0.4,
        lambda rng: (math.log(1.5) if rng.random() < 1 / 3 else 0.0) + rng.gauss(0.0, 0.05),
    ),
    "no seed effect, normal 0.4": (0.0, lambda rng: rng.gauss(0.0, 0.4)),
}


def pick_rate(trials: int, seeds: int, law: str, gain: float, rule: Callable, variants: int = 4) -> float:
    seed_sd, residual = LAWS[law]
    rng = random.Random(1)
    picks = 0
    for _ in range(trials):
        effect = [rng.gauss(0.0, seed_sd) for _ in range(seeds)]
        table = {
            ("baseline" if v == 0 else f"v{v}"): [
                (-math.log(gain) if v == 1 else 0.0) + effect[s] + residual(rng) for s in range(seeds)
            ]
            for v in range(variants)
        }
        ratio, low, _, _ = rule(table, "v1")
        picks += low > 1.0 and ratio >= MIN_GAIN
    return picks / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="*", help="bench --target JSON files to re-decide")
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--trials", type=int, default=4000)
    args = ap.parse_args()
    for path in args.json:
        print("\n".join(from_json(path)))
    if args.simulate:
        print("| law | seeds | pooled: A/A, 1.5x, 2x picked | seeds as blocks: A/A, 1.5x, 2x picked |")
        print("|---|---|---|---|")
        for law in LAWS:
            for seeds in (2, 3):
                cells = [
                    ", ".join(f"{pick_rate(args.trials, seeds, law, g, rule):.1%}" for g in (1.0, 1.5, 2.0))
                    for rule in (pooled_interval, blocked_interval)
                ]
                print(f"| {law} | {seeds} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
