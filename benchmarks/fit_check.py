"""Check a bench claim independently with `fit`: steady-state step time from two run lengths.

For each config (the baseline, then the pick), run `python -m lightning_speedups fit` for N1 and N2
optimizer steps, interleaved over repeats, and time each whole process. The difference of the two
lengths cancels start-up, build, warm-up and teardown: step time = (T(N2) - T(N1)) / (N2 - N1).
The gain is the baseline's step time over the pick's, with a 95% interval over the repeats paired
by repeat (the same Student's t on log ratios that bench uses).

    python benchmarks/fit_check.py --base "--config benchmarks/fmnist.yaml" \
        --pick "--config benchmarks/fmnist.yaml --config fast" --steps 30 120 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time

from lightning_speedups.bench.stats import ratio_interval

COMMON = [
    "--trainer.logger=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.limit_val_batches=0",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.max_epochs=-1",
    "--trainer.enable_model_summary=false",
]


def timed_fit(args: list[str], steps: int, threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=os.getcwd())
    root = tempfile.mkdtemp(prefix="fit_check_")  # fit's SaveConfigCallback refuses an existing config.yaml
    cmd = [
        sys.executable,
        "-m",
        "lightning_speedups",
        "fit",
        *args,
        *COMMON,
        f"--trainer.max_steps={steps}",
        f"--trainer.default_root_dir={root}",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--pick", required=True)
    p.add_argument("--steps", type=int, nargs=2, default=(30, 120))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    n1, n2 = a.steps
    step = {"base": [], "pick": []}
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
    g, lo, hi = ratio_interval(ratios)
    ci = f" [{lo:.2f}-{hi:.2f}]" if lo is not None else ""
    print(f"steady-state speed-up of the pick: {g:.2f}x{ci} (paired ratios {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
