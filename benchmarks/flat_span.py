"""How many checks without a better value, after a one-cycle schedule has annealed, mean the run will not reach the
target (issue 37, item 3): the span ``TargetProbe(flat_checks=...)`` waits before it stops a candidate as a miss.

Curves: the digits CNN with a learning rate 30x too low (``benchmarks/digits_slow_lr.yaml``'s task), one-cycle
with a range-tested peak (what bench's target candidates run) over plans of 30, 60, 120 and 240 optimizer steps,
each run on for 300 steps past its plan with no stop, validation every 10 steps, seeds 0-7; target ``val_acc >=
0.99`` (at 0.97, bench's target for this task, every plan reached it before annealing: nothing to stop; at 0.99
the short plans flatten just under it and the long ones reach it). The seeds are split before anything is
read: even seeds tune the span (the shortest with no false stop: a run stopped that would still have reached the
target) and the rule itself (on them, a plateau one validation sample under the target touched it 22 checks after
the anneal: the rule now leaves a run whose target lies within the metric's resolution or its last checks' flicker
of its best), odd seeds are held out and only measured, with that span and with bench's ``FLAT_CHECKS``.

    python benchmarks/flat_span.py --run        # the curves, into benchmarks/results/flat_span_curves.json (~8 min)
    python benchmarks/flat_span.py              # the table, from the curves
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

from lightning_speedups.bench.target import FLAT_CHECKS

RESULTS = Path(__file__).parent / "results" / "flat_span_curves.json"
TARGET = 0.99
PLANS = (30, 60, 120, 240)
PAST_PLAN = 300
EVERY = 10
SEEDS = range(8)


def run_curves() -> list[dict[str, Any]]:
    import lightning.pytorch as pl
    import torch

    from lightning_speedups.callbacks.lr_schedule import LRSchedule
    from lightning_speedups.demo.digits import DigitsCNN, DigitsDataModule

    class Curve(pl.Callback):
        def __init__(self) -> None:
            self.checks: list[dict[str, float]] = []
            self.t0 = time.perf_counter()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking:
                return
            value = trainer.callback_metrics.get("val_acc")
            if value is not None:
                self.checks.append(
                    {"step": trainer.global_step, "s": time.perf_counter() - self.t0, "value": float(value)}
                )

    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    curves = []
    for seed in SEEDS:
        for plan in PLANS:
            pl.seed_everything(seed, verbose=False)
            curve = Curve()
            trainer = pl.Trainer(
                max_steps=plan + PAST_PLAN,
                val_check_interval=EVERY,
                check_val_every_n_epoch=None,
                num_sanity_val_steps=0,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                callbacks=[LRSchedule("onecycle", max_lr="auto", plan=plan), curve],
            )
            trainer.fit(DigitsCNN(lr=1e-4), datamodule=DigitsDataModule(seed=seed))
            curves.append({"seed": seed, "plan": plan, "checks": curve.checks})
            reached = next((c["step"] for c in curve.checks if c["value"] >= TARGET), None)
            print(f"seed {seed} plan {plan}: {len(curve.checks)} checks, reached at step {reached}", flush=True)
    return curves


def flat_stop(checks: list[dict[str, float]], plan: int, span: int) -> int | None:
    """The index of the check at which bench's rule (:func:`~lightning_speedups.bench.target.flattened`, with
    ``span`` checks) stops the run as flat, or ``None``; the run stops at the target first if it gets there."""
    from lightning_speedups.bench.target import Target, flattened

    goal = Target("val_acc", TARGET, "max")
    for i in range(len(checks)):
        if checks[i]["value"] >= TARGET:
            return None  # reached first: the probe stops it at the target, not as flat
        if flattened(checks[: i + 1], plan, span, goal):
            return i
    return None


def table(curves: list[dict[str, Any]]) -> None:
    halves = {"tuning (even seeds)": [c for c in curves if c["seed"] % 2 == 0]}
    halves["held out (odd seeds)"] = [c for c in curves if c["seed"] % 2 == 1]
    tuned = None
    print("| half | span (checks) | runs | stopped as flat | false stops (would still reach) | training saved |")
    print("|---|---|---|---|---|---|")
    for half, runs in halves.items():
        spans = range(1, 9) if tuned is None else sorted({tuned, FLAT_CHECKS})
        tuning = tuned is None
        for span in spans:
            stopped = false = 0
            saved = total = 0.0
            for c in runs:
                checks = c["checks"]
                if not checks:
                    continue
                total += checks[-1]["s"]
                i = flat_stop(checks, c["plan"], span)
                if i is None:
                    continue
                stopped += 1
                if any(x["value"] >= TARGET for x in checks[i + 1 :]):
                    false += 1
                saved += checks[-1]["s"] - checks[i]["s"]
            share = f"{saved:.0f} s of {total:.0f} s ({100 * saved / total:.0f}%)" if total else "-"
            print(f"| {half} | {span} | {len(runs)} | {stopped} | {false} | {share} |")
            if tuning and tuned is None and false == 0:
                tuned = span  # the shortest span with no false stop (a longer one stops later: never more of them)
        if tuned is None:
            print(f"no span up to 8 checks made no false stop on the {half} half")
            return
    print(
        f"\nspan chosen on the tuning half: {tuned} checks; bench's FLAT_CHECKS: {FLAT_CHECKS} (the held-out rows are"
        " their measurement)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="store_true", help="run the curves first (about 8 minutes on 2 cores)")
    a = ap.parse_args()
    if a.run:
        RESULTS.write_text(json.dumps(run_curves(), indent=1) + "\n")
    table(json.loads(RESULTS.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
