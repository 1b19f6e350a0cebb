"""Check a bench claim independently with `fit`: steady-state step time from two run lengths.

For each config (the baseline, then the pick), run `python -m lightning_speedups fit` for N1 and N2
optimizer steps, interleaved over repeats, and time each whole process. The difference of the two
lengths cancels start-up, build, warm-up and teardown: step time = (T(N2) - T(N1)) / (N2 - N1).
The gain is the baseline's step time over the pick's, with a 95% interval over the repeats paired
by repeat (the same Student's t on log ratios that bench uses).

    python benchmarks/fit_check.py --base "--config benchmarks/fmnist.yaml" \
        --pick "--config benchmarks/fmnist.yaml --config fast" --steps 30 120 --repeats 3 --threads 1

With ``--to-target val_acc=0.85`` it checks a time-to-target claim instead: each config is trained by
``fit`` with Lightning's ``EarlyStopping(stopping_threshold=...)`` (validation every ``--every``
batches, seed = repeat, as bench's seeds), and the whole process is timed; :class:`StopReport` writes
the optimizer steps at the stop and the seconds spent in validation, so the figure is given both as
whole-process wall time and without validation (bench's time to target excludes validation, includes
nothing of the start-up).

    python benchmarks/fit_check.py --to-target val_acc=0.85 --every 50 --base "--config benchmarks/fmnist.yaml" \
        --pick "--config benchmarks/fmnist.yaml --config fast --config converge" --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

from lightning.pytorch.callbacks import Callback

from lightning_speedups.bench.stats import ratio_interval


class StopReport(Callback):
    """Writes ``{"steps", "validation_s", "metrics"}`` at the end of fit to ``$FIT_CHECK_REPORT``."""

    def __init__(self) -> None:
        self.validation_s = 0.0
        self._t = 0.0

    def on_validation_start(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        self._t = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        self.validation_s += time.perf_counter() - self._t

    def on_fit_end(self, trainer, pl_module) -> None:  # type: ignore[no-untyped-def]
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        with open(os.environ["FIT_CHECK_REPORT"], "w", encoding="utf-8") as fh:
            json.dump({"steps": trainer.global_step, "validation_s": self.validation_s, "metrics": metrics}, fh)


def fit_to_target(args: list[str], metric: str, value: float, every: int, seed: int, threads: int) -> dict:
    """One ``fit`` until ``metric`` reaches ``value`` (EarlyStopping), timed whole; its StopReport."""
    mode = "min" if "loss" in metric else "max"
    extra = [
        f"--trainer.val_check_interval={every}",
        "--trainer.check_val_every_n_epoch=null",
        f"--seed_everything={seed}",
        "--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
        f"--trainer.callbacks.monitor={metric}",
        f"--trainer.callbacks.mode={mode}",
        f"--trainer.callbacks.stopping_threshold={value}",
        "--trainer.callbacks.patience=100000",
        "--trainer.callbacks+=benchmarks.fit_check.StopReport",
    ]
    wall, root = run_fit(args, extra, threads, report=True)
    with open(os.path.join(root, "report.json"), encoding="utf-8") as fh:
        out = json.load(fh)
    out["wall_s"] = wall
    out["reached"] = (
        (out["metrics"].get(metric, float("nan")) >= value)
        if mode == "max"
        else (out["metrics"].get(metric, float("nan")) <= value)
    )
    return out


def _interval(ratios: list[float]) -> str:
    g, lo, hi = ratio_interval(ratios)
    ci = f" [{lo:.2f}-{hi:.2f}]" if lo is not None else ""
    return f"{g:.2f}x{ci} (paired ratios {', '.join(f'{x:.2f}' for x in ratios)})"


def check_target(a: argparse.Namespace) -> None:
    metric, value = a.to_target.split("=", 1)
    runs: dict[str, list[dict]] = {"base": [], "pick": []}
    for r in range(a.repeats):
        order = ("base", "pick") if r % 2 == 0 else ("pick", "base")
        for name in order:
            out = fit_to_target(shlex.split(getattr(a, name)), metric, float(value), a.every, r, a.threads)
            runs[name].append(out)
            print(
                f"repeat {r + 1} (seed {r}) {name}: {out['wall_s']:.1f} s whole, {out['validation_s']:.1f} s of it"
                f" validating, stopped at step {out['steps']} with {metric}={out['metrics'].get(metric, float('nan')):.4f}"
                + ("" if out["reached"] else " (MISSED)"),
                flush=True,
            )
    whole = [b["wall_s"] / q["wall_s"] for b, q in zip(runs["base"], runs["pick"])]
    train = [
        (b["wall_s"] - b["validation_s"]) / (q["wall_s"] - q["validation_s"])
        for b, q in zip(runs["base"], runs["pick"])
    ]
    print(f"time-to-target speed-up of the pick, whole fit process: {_interval(whole)}")
    print(f"time-to-target speed-up of the pick, validation excluded: {_interval(train)}")


#: every fit of the check: silent, nothing written but the saved config
QUIET = [
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_model_summary=false",
]


def run_fit(args: list[str], extra: list[str], threads: int, report: bool = False) -> tuple[float, str]:
    """``python -m lightning_speedups fit ARGS QUIET EXTRA`` in a root of its own, timed whole; (seconds, root).

    With ``report``, :class:`StopReport` writes ``report.json`` into the root."""
    root = tempfile.mkdtemp(prefix="fit_check_")  # fit's SaveConfigCallback refuses an existing config.yaml
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=os.getcwd())
    if report:
        env["FIT_CHECK_REPORT"] = os.path.join(root, "report.json")
    cmd = [sys.executable, "-m", "lightning_speedups", "fit", *args, *QUIET, *extra]
    cmd.append(f"--trainer.default_root_dir={root}")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, root


def timed_fit(args: list[str], steps: int, threads: int) -> float:
    extra = ["--trainer.limit_val_batches=0", "--trainer.max_epochs=-1", f"--trainer.max_steps={steps}"]
    return run_fit(args, extra, threads)[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--pick", required=True)
    p.add_argument("--steps", type=int, nargs=2, default=(30, 120))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--to-target", default=None, metavar="METRIC=VALUE", help="check a time-to-target claim")
    p.add_argument("--every", type=int, default=50, help="--to-target: batches between validations")
    a = p.parse_args()
    if a.to_target:
        check_target(a)
        return
    n1, n2 = a.steps
    step: dict[str, list[float]] = {"base": [], "pick": []}
    for r in range(a.repeats):
        order = ("base", "pick") if r % 2 == 0 else ("pick", "base")
        for name in order:
            args = shlex.split(getattr(a, name))
            t1, t2 = timed_fit(args, n1, a.threads), timed_fit(args, n2, a.threads)
            step[name].append((t2 - t1) / (n2 - n1))
            print(
                f"repeat {r + 1} {name}: T({n1})={t1:.1f}s T({n2})={t2:.1f}s step {1e3 * step[name][-1]:.1f} ms",
                flush=True,
            )
    ratios = [b / q for b, q in zip(step["base"], step["pick"])]
    print(f"steady-state speed-up of the pick: {_interval(ratios)}")


if __name__ == "__main__":
    main()
