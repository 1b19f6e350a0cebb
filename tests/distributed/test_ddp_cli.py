"""T11: the `ddp` preset through the CLI on CPU with two processes (gloo), via Lightning's own launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_ddp_preset_runs_two_cpu_processes_through_the_cli(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_speedups",
            "fit",
            "--config",
            "ddp.yaml",
            "--trainer.accelerator",
            "cpu",
            "--trainer.devices",
            "2",
            "--trainer.max_steps",
            "3",
            "--trainer.limit_val_batches",
            "1",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger",
            "false",
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.enable_model_summary",
            "false",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in text and "GLOBAL_RANK: 1, MEMBER: 2/2" in text
    assert "static graph" in text and "not on CPU (gloo)" in text  # says the hook cannot apply
    assert "`max_steps=3` reached" in text
