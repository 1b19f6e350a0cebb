"""Run ``lint`` over a corpus folder: findings per rule and severity, and the time it took.

    python benchmarks/lint_corpus.py /tmp/corpus            # counts per rule, timing
    python benchmarks/lint_corpus.py /tmp/corpus --list     # also every finding, one line each
    python benchmarks/lint_corpus.py /tmp/corpus --by-top   # counts per top-level folder (repository)

It reads the folder it is given and nothing else: no code is downloaded or contained here. How
the corpus was assembled, and how its findings were judged, is in ``benchmarks/lint_corpus.md``.
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from lightning_speedups.lint import lint_paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--list", action="store_true", help="print every finding")
    parser.add_argument("--by-top", action="store_true", help="counts per top-level folder of the corpus")
    args = parser.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()
    result = lint_paths([args.corpus])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    counts = collections.Counter((f.code, f.severity) for f in result.findings)
    print(f"files: {result.files}  errors: {len(result.errors)}  findings: {len(result.findings)}")
    print(f"time: {wall:.2f} s wall, {cpu:.2f} s CPU ({1000 * cpu / max(result.files, 1):.2f} ms CPU per file)")
    print("| code | warning | info |\n|---|---|---|")
    for code in sorted({c for c, _ in counts}):
        print(f"| {code} | {counts[(code, 'warning')]} | {counts[(code, 'info')]} |")
    if args.by_top:
        tops = collections.Counter(Path(f.path).relative_to(args.corpus).parts[0] for f in result.findings)
        for top, n in sorted(tops.items()):
            print(f"{top}: {n}")
    if args.list:
        for f in sorted(result.findings, key=lambda f: (f.path, f.line, f.code)):
            print(f"{f.path}:{f.line}: {f.code} {f.severity} ({f.runs}): {f.message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
