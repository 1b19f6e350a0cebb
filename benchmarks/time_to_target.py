"""Time to a target, timed independently of bench: ``fit`` to the target, the baseline and bench's
pick alternating, several seeds (issue 28).

Each run is ``python -m lightning_speedups fit --config TASK [--config PICK] --seed_everything SEED``
with Lightning's own ``EarlyStopping(stopping_threshold=...)`` added on the command line, as a user
stops a run at a target; :class:`benchmarks.tta_tasks.FitClock` writes how long ``fit`` took. The
process's wall time (interpreter start, imports, data loading included) is measured here too.

    python benchmarks/time_to_target.py --config benchmarks/tta_vgg.yaml --pick best.yaml \\
        --target val_acc=0.9 --seeds 0 1 2 --out benchmarks/results/tta_vgg.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(config: str, pick: str | None, metric: str, value: float, mode: str, seed: int, limit: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="tta_") as tmp:
        clock = os.path.join(tmp, "clock.json")
        argv = [sys.executable, "-m", "lightning_speedups", "fit", "--config", config]
        if pick:
            argv += ["--config", pick]
        argv += [
            f"--seed_everything={seed}",
            f"--trainer.default_root_dir={tmp}",
            "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
            f"--trainer.callbacks.monitor={metric}",
            f"--trainer.callbacks.mode={mode}",
            f"--trainer.callbacks.stopping_threshold={value}",
            "--trainer.callbacks.patience=1000000",
            "--trainer.callbacks+=benchmarks.tta_tasks.FitClock",
            f"--trainer.callbacks.path={clock}",
            f"--trainer.callbacks.monitor={metric}",
        ]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=limit)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            rc, tail = -1, "timed out"
        wall = time.perf_counter() - t0
        out = {"seed": seed, "rc": rc, "wall_s": wall}
        if os.path.exists(clock):
            with open(clock, encoding="utf-8") as fh:
                out.update(json.load(fh))
        v = out.get("value")
        out["reached"] = v is not None and (v >= value if mode == "max" else v <= value)
        if rc != 0 or not out["reached"]:
            out["log_tail"] = tail
        return out


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--pick", required=True, help="bench's written preset (--write-preset)")
    ap.add_argument("--target", required=True, help="METRIC=VALUE, as bench --target")
    ap.add_argument("--mode", choices=("max", "min"), default=None)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--limit", type=float, default=1800.0, help="seconds before a run is stopped (a miss)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    a.config, a.pick = os.path.abspath(a.config), os.path.abspath(a.pick)  # each run starts in a folder of its own
    metric, _, number = a.target.partition("=")
    mode = a.mode or ("min" if "loss" in metric else "max")
    runs: dict[str, list[dict]] = {"baseline": [], "pick": []}
    for i, seed in enumerate(a.seeds):
        order = ("baseline", "pick") if i % 2 == 0 else ("pick", "baseline")
        for who in order:
            r = run_once(a.config, a.pick if who == "pick" else None, metric, float(number), mode, seed, a.limit)
            runs[who].append(r)
            print(
                f"{who:8s} seed {seed}: fit {r.get('fit_s', float('nan')):.1f} s, process {r['wall_s']:.1f} s,"
                f" {r.get('steps')} steps, {metric} {r.get('value')}, reached {r['reached']}",
                flush=True,
            )
    ratios_fit = [
        b["fit_s"] / p["fit_s"]
        for b, p in zip(runs["baseline"], runs["pick"])
        if b.get("fit_s") and p.get("fit_s") and b["reached"] and p["reached"]
    ]
    ratios_wall = [
        b["wall_s"] / p["wall_s"] for b, p in zip(runs["baseline"], runs["pick"]) if b["reached"] and p["reached"]
    ]
    summary = {
        "config": a.config,
        "pick": a.pick,
        "target": a.target,
        "baseline_fit_s": spread([r["fit_s"] for r in runs["baseline"] if r.get("fit_s")]),
        "pick_fit_s": spread([r["fit_s"] for r in runs["pick"] if r.get("fit_s")]),
        "baseline_process_s": spread([r["wall_s"] for r in runs["baseline"]]),
        "pick_process_s": spread([r["wall_s"] for r in runs["pick"]]),
        "ratio_fit": spread(ratios_fit),
        "ratio_process": spread(ratios_wall),
        "all_reached": all(r["reached"] for rs in runs.values() for r in rs),
    }
    print(json.dumps(summary, indent=1))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "runs": runs}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
