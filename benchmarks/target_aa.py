"""The error rate of bench's time-to-target decision on A/A pairs (issue 28).

Input: the JSON of a bench run in target mode whose variants are all the same setup (``--tips none
--presets none --repeats K``: the baseline and its A/A copy, K runs each, seeds paired). Every split
of those 2K runs into a pretend "baseline" and a pretend "candidate" of ``n`` runs each is decided by
bench's own rule (:func:`~lightning_speedups.bench.stats.compare_target` with the spread pooled over
the runs it was given, then :func:`~lightning_speedups.bench.stats.pick_verdict`); a pick is an
error, since both sides are the same setup. It also says how much the crossing between checks
narrows the spread against the time of the check that saw the target.

    python -m lightning_speedups bench --config benchmarks/tta_autoencoder.yaml --target val_loss=0.5 \\
        --tips none --presets none --repeats 6 --json aa.json
    python benchmarks/target_aa.py aa.json --n 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys

from lightning_speedups.bench.stats import compare_target, pick_verdict, pooled_spread, summarize


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--n", type=int, nargs="+", default=[2, 3], help="runs per side")
    ap.add_argument("--min-gain", type=float, default=0.02)
    a = ap.parse_args()
    with open(a.json, encoding="utf-8") as fh:
        data = json.load(fh)
    runs = [r for v in data["variants"] for r in v["runs"] if r.get("status") == "ok" and r.get("reached")]
    print(f"{len(runs)} runs of one setup reached the target")
    for key in ("time_to_target_s", "crossing_s"):
        logs = [math.log(r[key]) for r in runs if r.get(key)]
        if len(logs) > 1:
            print(f"  spread of log {key}: sd {statistics.stdev(logs):.3f} (cv ~{100 * statistics.stdev(logs):.1f}%)")
    out = {}
    for n in a.n:
        if 2 * n > len(runs):
            continue
        picks = total = decided = 0
        for chosen in itertools.combinations(range(len(runs)), 2 * n):
            for left in itertools.combinations(chosen, n):
                right = [i for i in chosen if i not in left]
                base = [dict(runs[i], repeat=k) for k, i in enumerate(left)]
                cand = [dict(runs[i], repeat=k) for k, i in enumerate(right)]
                bs, cs = summarize(base), summarize(cand)
                compare_target(cs, cand, bs, base, pooled_spread([base, cand]))
                ok, _ = pick_verdict(cs, a.min_gain)
                total += 1
                picks += ok
                decided += cs.speedup_ci[0] is not None
        out[n] = (picks, total)
        print(
            f"  {n} vs {n} runs: {picks} of {total} A/A splits picked the pretend candidate ({100 * picks / total:.2f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
