"""The doctor's verdict on planted bottlenecks (issue 36), each a plain `train.py`-style script in
benchmarks/planted/, run as a user runs it: `doctor --json -- python SCRIPT`. Prints one row per script and view:
the planted cause, the verdict, its shares of the step, the fixed cost per op (ops a step x one op's fixed cost, and
its share of the step) and its change; then bench's pick on the same script, `bench --json -- python SCRIPT`
(plain, plain again for the A/A noise, and each preset that applies, paired over --repeats), with its speed over
plain and the paired interval: the pick must never be slower than plain.

    python benchmarks/planted_verdicts.py [--repeats 3] [--no-bench]

Each script runs twice: with this machine's own view of its bf16 kernels, and with LIGHTNING_SPEEDUPS_CPU_BF16=0
(as on a CPU without them, where a precision verdict must never appear).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "planted"
PLANTED = {
    "input_bound.py": "input-bound",
    "host_reads.py": "host reads (they stall a GPU; a CPU does not wait)",
    "tiny_model.py": "per-op overhead",
    "fp32_compute.py": "fp32 compute (where a faster precision exists)",
    "balanced.py": "nothing",
}
VIEWS = {"this CPU's": {}, "none (forced)": {"LIGHTNING_SPEEDUPS_CPU_BF16": "0"}}


def report_of(script: str, env: dict) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "report.json")
        command = [sys.executable, "-m", "lightning_speedups", "doctor", "--steps", "20", "--json", str(out), "--"]
        subprocess.run(
            [*command, sys.executable, script], cwd=HERE, env=env, capture_output=True, text=True, timeout=900
        )
        return json.loads(out.read_text()) if out.is_file() else None


def bench_of(script: str, env: dict, repeats: int) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "bench.json")
        command = [sys.executable, "-m", "lightning_speedups", "bench", "--repeats", str(repeats), "--json", str(out)]
        subprocess.run(
            [*command, "--", sys.executable, script], cwd=HERE, env=env, capture_output=True, text=True, timeout=3600
        )
        return json.loads(out.read_text()) if out.is_file() else None


def pick_of(doc: dict | None) -> str:
    """bench's pick with its speed over plain (paired 95% interval), or what it kept and the best it saw."""
    if doc is None:
        return "(no bench report)"
    ratios = []
    for c in doc["candidates"][2:]:
        s = c.get("summary") or {}
        if s.get("speedup") is not None:
            lo, hi = s.get("speedup_ci95") or (None, None)
            ci = f" ({lo:.2f}-{hi:.2f})" if lo is not None and hi is not None else ""
            ratios.append((c["name"], f"{s['speedup']:.2f}x{ci}"))
    seen = "; ".join(f"{name} {r}" for name, r in ratios)
    pick = doc.get("pick")
    head = f"LIGHTNING_SPEEDUPS={pick['LIGHTNING_SPEEDUPS']}" if pick else "keep plain"
    return f"{head} (noise {100 * (doc.get('noise_floor') or 0):.1f}%; {seen})"


def per_op(doc: dict) -> str:
    o = doc.get("op_overhead") or {}
    if o.get("share") is None:
        return "not measured"
    return (
        f"{o['ops_per_step']} x {1e6 * o['op_cost_seconds']:.1f} µs = {o['share']:.1%}"
        f" of {1e3 * o['step_seconds']:.2f} ms"
    )


def main() -> int:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-bench", action="store_true")
    ns = p.parse_args()
    print(
        "| script | planted | bf16 kernels | verdict | shares of the step | ops x fixed cost | change | bench's pick |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for script, planted in PLANTED.items():
        for view, extra in VIEWS.items():
            doc = report_of(script, {**os.environ, **extra})
            pick = "" if ns.no_bench else pick_of(bench_of(script, {**os.environ, **extra}, ns.repeats))
            if doc is None:
                print(f"| {script} | {planted} | {view} | (no report) | | | | {pick} |", flush=True)
                continue
            verdict = doc["verdict"]
            shares = ", ".join(f"{k} {v:.0%}" for k, v in verdict["shares"].items())
            fix = (verdict["fix"] or "")[:90]
            row = f"| {script} | {planted} | {view} | {verdict['name']} | {shares} | {per_op(doc)} | {fix} | {pick} |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
