"""Every script in examples/ runs (briefly), so the examples cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(args, cwd):
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout + out.stderr


def test_every_example_is_covered_here():
    covered = {"callbacks_on_existing_trainer.py", "preset_from_python.py", "my_model.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == covered


def test_callbacks_on_an_existing_trainer(tmp_path):
    text = _run([str(EXAMPLES / "callbacks_on_existing_trainer.py"), "--max-steps", "3"], tmp_path)
    assert "conv_bias (T16)" in text and "channels_last (T24)" in text and "val_acc:" in text


def test_preset_from_python(tmp_path):
    text = _run([str(EXAMPLES / "preset_from_python.py"), "--preset", "fast", "memory", "--max-steps", "3"], tmp_path)
    assert "parts turned on:" in text and "checkpointing" in text and "channels_last" in text


def test_user_model_driven_by_a_preset_yaml(tmp_path):
    text = _run(
        [
            "-m",
            "lightning_speedups",
            "fit",
            "--config",
            "fast.yaml",
            "--config",
            "my_model.yaml",
            "--trainer.max_epochs",
            "2",
            "--trainer.enable_progress_bar",
            "false",
            "--trainer.logger",
            "false",
            "--trainer.enable_checkpointing",
            "false",
            "--trainer.default_root_dir",
            str(tmp_path),
        ],
        EXAMPLES,
    )
    assert "lr_schedule (T01)" in text and "OneCycleLR" in text
    assert not (EXAMPLES / "config.yaml").exists() or pytest.fail("the example run left config.yaml behind")
