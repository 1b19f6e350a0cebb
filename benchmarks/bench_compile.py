"""T22 benchmark: compile time and steady-state training-step ratio, eager vs ``compile_modules``.

Two models on CPU with the inductor backend (C++ code generation, needs gcc), each measured eager
and compiled side by side in one run:

* a small transformer encoder (2 pre-norm layers, d=128, 4 heads, ff=512, batch 8 x 128 tokens,
  dropout 0.1) with embedding and output head,
* a small residual CNN (3 stages x 2 blocks, 32-128 channels, batch 8 x 3 x 64 x 64).

``compile_modules(model)`` compiles the top-level children that hold parameters (as the
``CompileModules`` callback does). A training step is forward + backward + SGD update.

* **compile time**: the first compiled step (forward and backward graphs are compiled there) minus
  the median eager step. Inductor's on-disk caches are disabled (``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``,
  set before torch is imported) so the figure is a cold compile; pass ``--warm-cache`` to keep them.
* **steady-state ratio**: median compiled step / median eager step, over interleaved steps after
  warm-up (eager, compiled, eager, ...), so load from other processes hits both alike. On a
  shared, oversubscribed machine wall time is mostly waiting for a core, so the CPU time of this
  process (``time.process_time``, one thread by default) is reported too: trust that one there.
  The compile time includes gcc, which runs in child processes: its CPU time is not in
  ``compile_cpu_s``, only in the wall-clock ``compile_s``.

Usage::

    python benchmarks/bench_compile.py [--threads 1] [--steps 4] [--json out.json] [--warm-cache]
"""

from __future__ import annotations

import os
import sys

if "--warm-cache" not in sys.argv:
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import argparse
import copy
import json
import platform
import statistics
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_checkpointing import ResNet, Transformer, cpu_name

from lightning_speedups.functional.compile import (
    CompileFallbackWarning,
    compile_modules,
    compile_status,
)


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    model(x).float().square().mean().backward()
    opt.step()


def timed(model, opt, x):
    """(wall seconds, CPU seconds of this process) of one step."""
    w0, c0 = time.perf_counter(), time.process_time()
    train_step(model, opt, x)
    return time.perf_counter() - w0, time.process_time() - c0


def bench(name, factory, make_input, steps):
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = factory()
    comp = copy.deepcopy(eager)
    names = compile_modules(comp)
    x = make_input()
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (eager, comp)]
    train_step(eager, opts[0], x)  # warm-up eager
    eager_first = [timed(eager, opts[0], x) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)  # a fallback would make the figures meaningless
        first = timed(comp, opts[1], x)
        train_step(comp, opts[1], x)  # warm-up compiled (a possible recompile for dynamic shapes)
        times: list[list[tuple[float, float]]] = [[], []]
        for _ in range(steps):
            for i, m in enumerate((eager, comp)):
                times[i].append(timed(m, opts[i], x))
    med = [statistics.median(w for w, _ in t) for t in times]
    cpu = [statistics.median(c for _, c in t) for t in times]
    return {
        "model": name,
        "compiled_modules": ",".join(names),
        "status": ",".join(sorted(set(compile_status(comp).values()))),
        "compile_s": round(first[0] - statistics.median(w for w, _ in eager_first + times[0]), 1),
        "compile_cpu_s": round(first[1] - statistics.median(c for _, c in eager_first + times[0]), 1),
        "step_ms_eager": round(med[0] * 1e3, 1),
        "step_ms_compiled": round(med[1] * 1e3, 1),
        "step_ratio_compiled_over_eager": round(med[1] / med[0], 3),
        "cpu_step_ratio": round(cpu[1] / cpu[0], 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant")
    parser.add_argument("--json", default=None)
    parser.add_argument("--warm-cache", action="store_true", help="keep inductor's on-disk caches")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    t0 = time.time()
    results = [
        bench("transformer", lambda: Transformer(layers=2), lambda: torch.randint(0, 1000, (8, 128)), args.steps),
        bench("cnn", ResNet, lambda: torch.randn(8, 3, 64, 64), args.steps),
    ]
    meta = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{cpu_name()}, {os.cpu_count()} logical CPUs",
        "threads": args.threads,
        "cold_cache": not args.warm_cache,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python " + " ".join(sys.argv),
        "wall_s": round(time.time() - t0, 1),
    }
    cols = list(results[0])
    print(" | ".join(cols))
    for r in results:
        print(" | ".join(str(r[c]) for c in cols))
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
