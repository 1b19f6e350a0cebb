"""How far below the range test's lowest-loss learning rate a one-cycle should peak (issue 37, item 5): the
annealed value after a fixed cycle, at the pack's rule (the lowest loss's lr / 10) and at other divisors.

Each run is ``python -m lightning_speedups fit --config TASK --config (converge with a fixed plan,
lr_schedule.peak_divisor and lr_schedule.back_offs set)`` with ``--trainer.max_epochs`` set to the plan's epochs;
the validation metric of each epoch is read from a CSV logger, and the back-offs taken from the run's summary. A
higher value at the cycle's end (a lower loss) means the target comes sooner.

    python benchmarks/peak_divisor.py --divisors 10 3 --seeds 0 1 \\
        --task benchmarks/tta_vgg.yaml:936:val_acc --task benchmarks/tta_autoencoder.yaml:936:val_loss \\
        --task benchmarks/fmnist.yaml:938:val_acc --out benchmarks/results/peak_divisor.json
    python benchmarks/peak_divisor.py --divisors 3 --seeds 1 --back-offs 3 --task benchmarks/tta_vgg.yaml:936:val_acc
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(config: str, plan: int, epochs: int, metric: str, divisor: float, seed: int, back_offs: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="peak_") as tmp:
        preset = os.path.join(tmp, "plan.yaml")
        with open(preset, "w", encoding="utf-8") as fh:
            fh.write(
                "speedups:\n  lr_schedule:\n    name: onecycle\n    max_lr: auto\n    horizon: 0.5\n"
                f"    range_test_steps: 50\n    plan: {plan}\n    peak_divisor: {divisor}\n    back_offs: {back_offs}\n"
            )
        argv = [
            sys.executable, "-m", "lightning_speedups", "fit", "--config", config, "--config", preset,
            f"--trainer.max_epochs={epochs}", f"--seed_everything={seed}", f"--trainer.default_root_dir={tmp}",
            "--trainer.enable_progress_bar=false", "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={tmp}",
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        values = []
        for path in glob.glob(os.path.join(tmp, "**", "metrics.csv"), recursive=True):
            with open(path, encoding="utf-8") as fh:
                values += [(int(r["step"]), float(r[metric])) for r in csv.DictReader(fh) if r.get(metric)]
        peak = re.search(r"peak lr ([0-9.e+-]+)", log)
        low = re.search(r"lowest loss at (?:lr )?([0-9.e+-]+)", log)
        return {
            "divisor": divisor,
            "back_offs": back_offs,
            "backed_off": re.findall(r"backed off at step (\d+)", log),
            "seed": seed,
            "rc": proc.returncode,
            "peak_lr": float(peak.group(1)) if peak else None,
            "lowest_loss_lr": float(low.group(1)) if low else None,
            metric: sorted(values),
            "log_tail": None if proc.returncode == 0 else log[-1500:],
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", action="append", required=True, help="CONFIG:PLAN_STEPS:METRIC (the plan whole epochs)")
    ap.add_argument("--divisors", type=float, nargs="+", default=[10.0, 3.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--back-offs", type=int, default=0, help="lr_schedule.back_offs (0: the cycle is not watched)")
    ap.add_argument("--steps-per-epoch", type=int, default=469, help="to turn the plan into max_epochs")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = []
    for seed in a.seeds:
        for task in a.task:
            config, plan, metric = task.rsplit(":", 2)
            epochs = -(-int(plan) // a.steps_per_epoch)
            for divisor in a.divisors:
                r = run_once(os.path.abspath(config), int(plan), epochs, metric, divisor, seed, a.back_offs)
                r["task"] = os.path.basename(config)
                out.append(r)
                last = r[metric][-1][1] if r[metric] else None
                print(
                    f"{r['task']} /{divisor:g} seed {seed}: peak {r['peak_lr']} (lowest loss at {r['lowest_loss_lr']}),"
                    f" {metric} by epoch {[round(v, 4) for _, v in r[metric]]}, end {last}, backed off at steps"
                    f" {r['backed_off'] or 'none'}",
                    flush=True,
                )
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
