"""Issue 21's table: each bench run's variants over its own baseline, paired per repeat.

Reads the JSON that ``benchmarks/run_probe_check.sh`` writes (``benchmarks/results/probe_<model>_{before,after}.json``)
and prints, per model and variant, the ratio of the baselines' median step time (the geometric mean of the
baseline and its A/A twin of the same repeat) to the variant's, paired per repeat (the same ``ratio_interval`` bench and the start-up probe use: geometric mean and 95% interval), next
to bench's own samples/s ratio, and what fast's start-up probe kept in each repeat.

    python benchmarks/probe_ratios.py            # after bash benchmarks/run_probe_check.sh
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from lightning_speedups.functional.timing import ratio_interval

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def _fmt(g: Any, lo: Any, hi: Any) -> str:
    if g is None:
        return "-"
    return f"{g:.2f}x" + (f" [{lo:.2f}-{hi:.2f}]" if lo is not None else "")


def table(path: str) -> list[str]:
    with open(path) as fh:
        report = json.load(fh)
    variants = report["variants"]
    # the baseline runs first in every repeat and its A/A twin last: their geometric mean per repeat is the
    # reference, so a drift of the machine within a repeat does not favour the variants run early
    steps: dict[Any, list[float]] = {}
    for name in ("baseline", "baseline (A/A)"):
        for v in variants:
            if v["name"] == name:
                for r in v["runs"]:
                    if r.get("status") == "ok" and r.get("step_s"):
                        steps.setdefault(r["repeat"], []).append(r["step_s"])
    base_step = {k: (vals[0] * vals[-1]) ** 0.5 for k, vals in steps.items()}
    lines = []
    for v in variants:
        ratios = [
            base_step[r["repeat"]] / r["step_s"]
            for r in v["runs"]
            if r.get("status") == "ok" and r.get("step_s") and base_step.get(r["repeat"])
        ]
        s = v.get("summary") or {}
        bench = _fmt(s.get("speedup"), *(s.get("speedup_ci95") or [None, None]))
        kept = []
        for r in v["runs"]:
            for part in r.get("parts") or []:
                if part[0] in ("channels_last", "optimizer", "precision") and "probed" in part[3]:
                    kept.append(f"{part[0]}={'on' if part[2] == 'active' else 'off'}")
                if part[0] == "auto_probe" and part[2] != "active":
                    kept.append("probe skipped")
        probe = ""
        if kept:
            counts: dict[str, int] = {}
            for k in kept:
                counts[k] = counts.get(k, 0) + 1
            probe = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
        lines.append(f"| {v['name']} | {_fmt(*ratio_interval(ratios))} | {bench} | {probe} |")
    return lines


def main() -> int:
    for model in ("cnn", "vit", "mlp"):
        for when in ("before", "after", "fast"):
            path = os.path.join(HERE, f"probe_{model}_{when}.json")
            if not os.path.exists(path):
                continue
            print(f"\n{model}, {when}\n")
            print("| variant | step-time ratio, paired [95% CI] | bench's samples/s ratio [95% CI] | probe kept |")
            print("|---|---|---|---|")
            print("\n".join(table(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
