"""What the doctor's watch costs (issue 36, item 7), measured paired with bench's own machinery on planted scripts.

For each script in ``benchmarks/planted/``, :class:`~lightning_speedups.bench.script.CommandBench` runs the plain
script (and its A/A twin) beside ``LIGHTNING_SPEEDUPS=doctor`` in fresh processes, interleaved over paired repeats:

- ``inspected``: the doctor's first steps, where it intercepts every torch call for host reads (steps 2-3 of its 3
  inspected ones timed; the first is every run's warm-up);
- ``timed``: the watched steps after them, where the doctor times the phases and the data wait with clock marks (the
  inspected steps and the next, whose fetch ran under the last one's window, inside bench's warm-up);
- ``after``: the doctor's watch (and its 3 closing batches) ends inside bench's warm-up: the steps after it.

Usage: ``python benchmarks/doctor_cost.py [--repeats 5] [--steps 20] [--rows inspected timed after] [SCRIPT ...]``
(prints a Markdown table).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lightning_speedups.advisor import INSPECTED_STEPS
from lightning_speedups.bench.script import CommandBench, ScriptBenchOptions

HERE = Path(__file__).parent / "planted"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("scripts", nargs="*", default=["tiny_model.py", "balanced.py", "input_bound.py"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument(
        "--rows", nargs="+", choices=("inspected", "timed", "after"), default=["inspected", "timed", "after"]
    )
    ns = p.parse_args()
    os.chdir(HERE)
    print("| script | doctor | speed vs plain (95% CI) | A/A noise |")
    print("|---|---|---|---|")
    for script in ns.scripts:
        rows = (
            ("inspected", "its inspected steps", 1, INSPECTED_STEPS - 1, 2 + ns.steps),
            ("timed", "its timed steps", INSPECTED_STEPS + 1, ns.steps, INSPECTED_STEPS + 1 + ns.steps),
            ("after", "after its watch", 26, ns.steps, 20),
        )
        for row, label, warmup, steps, watched in rows:
            if row not in ns.rows:
                continue
            opts = ScriptBenchOptions(
                steps=steps, warmup=warmup, repeats=ns.repeats, memory_step=False,
                doctor={"steps": watched, "full": True, "lint": False},
            )  # fmt: skip
            bench = CommandBench([sys.executable, script], opts, candidates=[("doctor", "doctor")], say=lambda t: None)
            bench.run()
            bench.cleanup()
            s = bench.candidates[2].summary
            lo, hi = s.speedup_ci if s is not None else (None, None)
            ratio = f"{s.speedup:.3f}x ({lo:.3f}-{hi:.3f})" if s is not None and s.speedup and lo else "-"
            print(f"| {script} | {label} | {ratio} | {100 * bench.noise:.1f}% |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
