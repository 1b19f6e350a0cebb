"""benchmarks/gpu_check.sh cannot rot: its CPU dry run runs here (CI, no GPU), and its parts are unit-tested.

Not marked ``gpu``: these run everywhere. The dry run (``GPU_CHECK_QUICK=1 DEVICE=cpu``) takes
about 40 s on 2 cores: tiny models, 2 timed steps, bench's flags checked instead of timed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.gpu import summary
from benchmarks.gpu.models import SIZES
from benchmarks.gpu.workloads import peak_flops

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_dry_run_on_cpu(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "GPU_CHECK_QUICK": "1",
        "PYTHON": sys.executable,
        "OUT": str(tmp_path),
        "STEPS": "2",
        "WARMUP": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=230)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.json", "gpu_check.png", "run.log", "summary.txt"]
    lines = done.stdout.strip().splitlines()
    assert lines[-1].startswith("OK:"), lines[-5:]
    assert any(line.startswith("workload  variant") for line in lines[-15:])  # the table comes last
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(report["workloads"]) == {"resnet50", "gpt2"} and report["problems"] == []
    rows = {(w, r["variant"]): r for w, d in report["workloads"].items() for r in d["rows"]}
    for key in [
        ("resnet50", "baseline"),
        ("resnet50", "fast"),
        ("gpt2", "baseline"),
        ("gpt2", "fast"),
        ("gpt2", "fp8"),
    ]:
        row = rows[key]
        assert row["status"] == "ok" and row["mfu"] is not None and row["samples_per_s"] > 0, row
        assert row["data_wait_fraction"] is not None
    assert rows[("gpt2", "fp8")]["notes"] and "fp8 skipped" in " ".join(rows[("gpt2", "fp8")]["notes"])
    assert rows[("resnet50", "pick")]["status"] == "skipped"
    assert report["phases"]["bench"] == "skipped"  # flags checked, not timed
    assert report["tests"]["counts"].get("skipped", 0) >= 10 and not report["tests"]["counts"].get("failed")


def test_gpu_check_script_parses() -> None:
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    text = SCRIPT.read_text()
    assert "OUT=${OUT:-" in text and 'carry=[".whl"]' in text and "timeout_s=600" in text


@pytest.mark.parametrize("workload", ["resnet50", "gpt2"])
@pytest.mark.parametrize("size", ["full", "tiny"])
def test_bench_configs_agree_with_the_workload_sizes(workload: str, size: str) -> None:
    cfg = yaml.safe_load(
        (ROOT / "benchmarks" / "gpu" / f"{workload}{'' if size == 'full' else '_tiny'}.yaml").read_text()
    )
    s = SIZES[workload][size]
    args = {**cfg["model"]["init_args"], **cfg["data"]["init_args"]}
    for key, value in s.items():
        name = {"batch": "batch_size"}.get(key, key)
        if name in args:
            assert args[name] == (list(value) if isinstance(value, tuple) else value), (key, args[name], value)


def test_peak_flops_is_passed_explicitly() -> None:
    assert peak_flops("NVIDIA H200")[0] == pytest.approx(989.4e12)  # the name Lightning's table misses
    assert peak_flops("NVIDIA H100 PCIe")[0] == pytest.approx(756e12)
    assert peak_flops("NVIDIA H100 80GB HBM3")[0] == pytest.approx(989.4e12)
    assert peak_flops("Some Future GPU") == (None, "no dense bf16 peak known for 'Some Future GPU': pass PEAK_FLOPS")
    assert peak_flops("Some Future GPU", 2e15) == (2e15, "given")


def test_summary_fails_when_an_mfu_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    rows = [
        {"variant": "baseline", "status": "ok", "samples_per_s": 10.0, "ratio": 1.0, "mfu": 0.3},
        {"variant": "fast", "status": "ok", "samples_per_s": 20.0, "ratio": 2.0, "mfu": None},
    ]
    (work / "workloads.json").write_text(
        json.dumps({"device": "NVIDIA H200", "workloads": {"gpt2": {"params": 1, "flops_per_batch": 1, "rows": rows}}})
    )
    assert summary.main(["--work", str(work), "--out", str(tmp_path / "out"), "--phase", "tests=0"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "FAILED: gpt2 fast: no MFU"
    assert summary.main(["--work", str(work), "--out", str(tmp_path / "out"), "--phase", "tests=124"]) == 1
