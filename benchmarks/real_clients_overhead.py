"""What the pack costs a short run inside real libraries (issue 27: the start-up probe spent up to 24 s
before it found a 3-step run too short to repay it).

For each library of the real-clients suite (``tests/clients/libraries.py``), the plain run and the run with
``LIGHTNING_SPEEDUPS=fast`` (zero code) alternate in one process, after one untimed warm-up of each, and the
wall time of the library's whole train call (Trainer built, fit, teardown) is compared as a ratio per pair.

    python benchmarks/real_clients_overhead.py --steps 3 --repeats 5

Prints one row per library: median seconds of each, the pack's extra milliseconds (median over the pairs), the
ratio's median and range over the pairs, and the probe's steps in the last ``fast`` run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def main() -> None:
    from clients.libraries import LIBRARIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--preset", default="fast")
    args = parser.parse_args()
    print(f"| library | plain s | {args.preset} s | extra ms (median) | ratio (median) | ratio range | probe steps |")
    print("|---|---|---|---|---|---|---|")
    for lib in LIBRARIES:
        times: dict[str, list[float]] = {"plain": [], "pack": []}
        probe_steps = None
        for i in range(args.repeats + 1):
            for which in ("plain", "pack") if i % 2 == 0 else ("pack", "plain"):
                if which == "pack":
                    os.environ["LIGHTNING_SPEEDUPS"] = args.preset
                else:
                    os.environ.pop("LIGHTNING_SPEEDUPS", None)
                start = time.perf_counter()
                seen = lib.run([], {}, args.steps)
                took = time.perf_counter() - start
                if i > 0:  # the first pair warms imports and caches
                    times[which].append(took)
                if which == "pack":
                    probe = next((cb for cb in seen.trainer.callbacks if type(cb).__name__ == "AutoProbe"), None)
                    probe_steps = probe.result.steps if probe is not None and probe.result is not None else None
        os.environ.pop("LIGHTNING_SPEEDUPS", None)
        ratios = [b / a for a, b in zip(times["plain"], times["pack"])]
        extra = statistics.median(b - a for a, b in zip(times["plain"], times["pack"]))
        print(
            f"| {lib.name} | {statistics.median(times['plain']):.2f} | {statistics.median(times['pack']):.2f} |"
            f" {extra * 1000:.0f} |"
            f" {statistics.median(ratios):.2f}x | {min(ratios):.2f}x-{max(ratios):.2f}x | {probe_steps} |"
        )


if __name__ == "__main__":
    main()
