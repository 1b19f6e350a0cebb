"""bench end to end: a 2-variant bench on TinyCNN through real worker processes."""

from __future__ import annotations

import json
import math
import os

import pytest

from lightning_speedups.bench import main
from lightning_speedups.bench.worker import run_variant


@pytest.mark.parametrize("isolation", ["subprocess", "forkserver"])
def test_two_variant_bench_through_processes(isolation, tmp_path, capsys):
    out_json = tmp_path / "bench.json"
    out_png = tmp_path / "bench.png"
    out_yaml = tmp_path / "fastest.yaml"
    argv = [
        "--model=helpers.TinyCNN",
        "--tips",
        "T24",
        "--presets",
        "none",
        "--no-extras",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--isolation",
        isolation,
        "--min-gain",
        "0",
        "--json",
        str(out_json),
        "--write-preset",
        str(out_yaml),
        "--no-progress",
    ]
    if isolation == "subprocess":
        argv += ["--plot", str(out_png)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "baseline" in printed and "T24 channels-last" in printed and "pick:" in printed
    data = json.loads(out_json.read_text())
    names = [v["name"] for v in data["variants"]]
    assert names[:2] == ["baseline", "T24 channels-last"]
    pids = set()
    for variant in data["variants"][:2]:
        (run,) = variant["runs"]
        assert run["status"] == "ok", run.get("reason")
        assert len(run["step_times"]) == 2 and all(t > 0 for t in run["step_times"])
        assert run["samples"] == [16, 16]
        assert run["samples_per_s"] > 0 and 0 <= run["data_wait_fraction"] < 1
        assert run["warmup_s"] > 0 and run["torch_threads"] == 1
        assert run["train_mem_bytes"] > 0 and run["mem_source"].startswith("cpu allocator")
        assert math.isfinite(run["loss"])
        pids.add(run["pid"])
        summary = variant["summary"]
        assert summary["samples_per_s"]["median"] == pytest.approx(run["samples_per_s"])
        assert summary["sane"] is True
    assert os.getpid() not in pids and len(pids) == 2  # each variant in its own process
    t24 = data["variants"][1]
    assert ["channels_last", "T24", "active"] == t24["runs"][0]["parts"][0][:3]
    assert t24["runs"][0]["speedups"]["channels_last"] is True
    assert data["variants"][0]["runs"][0]["speedups"]["channels_last"] is False
    assert data["meta"]["torch"] and data["meta"]["lightning"] and data["memory_figure"]
    if isolation == "subprocess":
        assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the written preset parses with build and gives the picked variant's section
    from lightning_speedups.session import build

    cli = build(["--model=helpers.TinyCNN", "--config", str(out_yaml)])
    picked = next(v for v in data["variants"] if v["name"] == data["pick"])
    speedups = cli._get(cli.config_init, "speedups")
    assert speedups.channels_last is picked["runs"][0]["speedups"]["channels_last"]


def test_worker_records_a_failing_variant(tmp_path, monkeypatch):
    """A variant whose part fails records why instead of crashing (here: an unknown compile mode)."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")  # run_variant seeds: restore the environment afterwards
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    spec = {
        "args": ["--model=helpers.TinyCNN"],
        "speedups_overrides": {"compile.enabled": True, "compile.mode": "no-such-mode"},
        "trainer_overrides": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": 3,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(tmp_path),
        },
        "warmup": 0,
        "steps": 1,
        "seed": 0,
    }
    result = run_variant(spec)
    assert result["status"] == "failed"
    assert "no-such-mode" in result["reason"] or "mode" in result["reason"]
