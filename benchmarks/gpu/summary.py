"""The last step of ``benchmarks/gpu_check.sh``: one JSON, one chart, and the summary table printed last.

    python -m benchmarks.gpu.summary --work WORK --out OUT --phase tests=RC --phase bench_resnet50=RC ...

Reads ``WORK/workloads.json`` (benchmarks/gpu/workloads.py), ``WORK/pytest.xml`` (JUnit from
``pytest -m gpu``) and ``WORK/bench_<workload>.json``; writes ``OUT/gpu_check.json``,
``OUT/gpu_check.png`` and ``OUT/summary.txt``; exits 1 when anything failed (a test, a workload, a
missing MFU, a phase that timed out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from typing import Any, Optional


def read_junit(path: str) -> dict[str, Any]:
    """Counts and per-test outcomes of a JUnit XML file (``{}`` when it does not exist)."""
    if not os.path.exists(path):
        return {}
    root = ET.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or "").splitlines()[0][:200] if node.get("message") else ""
                break
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "message": message})
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    return {"counts": counts, "cases": cases}


def _fmt(value: Optional[float], spec: str, scale: float = 1.0, suffix: str = "", width: int = 0) -> str:
    text = "-" if value is None else f"{value * scale:{spec}}{suffix}"
    return text.rjust(width)


def table(report: dict[str, Any]) -> str:
    """The summary table (plain text, fixed columns)."""
    head = f"{'workload':<9} {'variant':<9} {'precision':<11} {'samples/s':>10} {'ratio':>6} {'peak MiB':>9} {'wait':>6} {'MFU':>6}  status"
    lines = [head, "-" * len(head)]
    for workload, w in report.get("workloads", {}).items():
        for r in w["rows"]:
            status = r["status"] + (f" ({r['reason']})" if r.get("reason") else "")
            lines.append(
                f"{workload:<9} {r['variant']:<9} {str(r.get('precision', '-')):<11} "
                f"{_fmt(r.get('samples_per_s'), '.1f', width=10)} {_fmt(r.get('ratio'), '.2f', suffix='x', width=6)} "
                f"{_fmt(r.get('peak_mem_bytes'), '.0f', 2**-20, width=9)} "
                f"{_fmt(r.get('data_wait_fraction'), '.1f', 100, '%', width=6)} "
                f"{_fmt(r.get('mfu'), '.1f', 100, '%', width=6)}  {status}"
            )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> Optional[str]:
    """Samples/s over baseline and MFU per workload and variant, as a PNG (``None`` when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib missing: no chart"
    workloads = report.get("workloads", {})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, key, title, scale in (
        (axes[0], "ratio", "samples/s over baseline", 1.0),
        (axes[1], "mfu", "MFU (dense bf16 peak) %", 100.0),
    ):
        labels, values = [], []
        for workload, w in workloads.items():
            for r in w["rows"]:
                labels.append(f"{workload}\n{r['variant']}")
                values.append((r.get(key) or 0.0) * scale)
        ax.bar(range(len(values)), values, color="#4477aa")
        ax.set_xticks(range(len(values)), labels, fontsize=7)
        ax.set_title(title, fontsize=9)
        if key == "ratio":
            ax.axhline(1.0, color="grey", linewidth=0.8)
    fig.suptitle(
        f"gpu_check: {report.get('device')} (torch {report.get('torch')}, lightning {report.get('lightning')})",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase", action="append", default=[], help="NAME=EXIT_CODE of a phase of the script")
    ap.add_argument("--elapsed", type=float, default=None)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    phases = {}
    for item in args.phase:
        name, _, rc = item.partition("=")
        phases[name] = int(rc) if rc.lstrip("-").isdigit() else rc
    wl_path = os.path.join(args.work, "workloads.json")
    report: dict[str, Any] = json.load(open(wl_path)) if os.path.exists(wl_path) else {"workloads": {}}
    report["tests"] = read_junit(os.path.join(args.work, "pytest.xml"))
    report["phases"] = phases
    report["elapsed_s"] = args.elapsed
    bench = {}
    for name in report.get("workloads", {}) or ("resnet50", "gpt2"):
        path = os.path.join(args.work, f"bench_{name}.json")
        if os.path.exists(path):
            data = json.load(open(path))
            bench[name] = {"pick": data.get("pick"), "notes": data.get("notes")}
    report["bench"] = bench
    problems = []
    for name, rc in phases.items():
        if rc == 124:
            problems.append(f"phase {name} timed out")
        elif rc not in (0, "skipped"):
            problems.append(f"phase {name} exited {rc}")
    counts = report["tests"].get("counts", {})
    if counts.get("failed") or counts.get("error"):
        problems.append(f"{counts.get('failed', 0)} test(s) failed, {counts.get('error', 0)} error(s)")
    if not report["workloads"]:
        problems.append("no workload figures")
    for workload, w in report["workloads"].items():
        for r in w["rows"]:
            if r["status"] == "failed":
                problems.append(f"{workload} {r['variant']}: {r.get('reason')}")
            elif r["status"] == "ok" and r.get("mfu") is None:
                problems.append(f"{workload} {r['variant']}: no MFU")
    report["problems"] = problems
    chart = plot(report, os.path.join(args.out, "gpu_check.png"))
    if chart:
        report.setdefault("notes", []).append(chart)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)

    lines = [
        f"gpu_check on {report.get('device', '?')}: torch {report.get('torch')}, lightning {report.get('lightning')},"
        f" CUDA {report.get('cuda')}; peak {report.get('peak_flops')} FLOP/s ({report.get('peak_source')})",
        "packages: " + ", ".join(f"{k} {v}" for k, v in (report.get("packages") or {}).items()),
    ]
    if counts:
        lines.append("tests (-m gpu): " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        for c in report["tests"]["cases"]:
            if c["outcome"] in ("failed", "error"):
                lines.append(f"  {c['outcome'].upper()} {c['test']}: {c['message']}")
    for name, b in bench.items():
        lines.append(f"bench pick for {name}: {b['pick']}")
    for workload, w in report["workloads"].items():
        lines.append(
            f"{workload}: {w['params'] / 1e6:.1f}M parameters, {w['flops_per_batch'] / 1e12:.3f} TFLOP per training batch"
        )
        for v in w.get("rows", []):
            probe = v.get("probe") if isinstance(v, dict) else None
            if probe:
                chosen = ", ".join(f"{k}={c}" for k, c in probe["decisions"].items())
                what = f"skipped ({probe['skipped']})" if probe["skipped"] else chosen
                lines.append(
                    f"  {v['variant']}: start-up probe {probe['seconds']:.1f} s, {probe['steps']} steps: {what}"
                )
    lines += ["", table(report), ""]
    if args.elapsed is not None:
        lines.append(f"elapsed {args.elapsed:.0f} s")
    lines.append("FAILED: " + "; ".join(problems) if problems else "OK: every phase passed, every variant has an MFU")
    text = "\n".join(lines)
    with open(os.path.join(args.out, "summary.txt"), "w") as fh:
        fh.write(text + "\n")
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
