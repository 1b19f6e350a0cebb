"""The start-up summary shows one line per setting, with the value that runs (issue 22 item 3): the
user's own ``gradient_clip_val`` under a preset that clips is one grad_clip line saying the user's value
runs, not an "on ... at 1.0" line and a "kept ... =5" line."""

from __future__ import annotations

import contextlib
import io
import sys

import lightning.pytorch as pl
import yaml

from lightning_speedups.callbacks import SpeedupsSummary
from lightning_speedups.callbacks.summary import merge_kept


def test_the_users_clip_value_is_one_line_with_the_value_that_runs(tmp_path, monkeypatch):
    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    monkeypatch.chdir(tmp_path)
    user = tmp_path / "user.yaml"
    trainer = {
        "accelerator": "cpu",
        "max_steps": 1,
        "limit_val_batches": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "gradient_clip_val": 5.0,
    }
    user.write_text(yaml.safe_dump({"model": {"class_path": "helpers.TinyCNN"}, "trainer": trainer}))
    pl.seed_everything(0, verbose=False)
    argv = resolve_config_args(["fit", "--config", "transformer", "--config", str(user)])
    monkeypatch.setattr(sys, "argv", ["lightning_speedups", *argv])
    with contextlib.redirect_stdout(io.StringIO()):
        cli = SpeedupsCLI(args=None, save_config_callback=None)
    assert cli.trainer.gradient_clip_val == 5.0
    lines = next(cb.lines for cb in cli.trainer.callbacks if isinstance(cb, SpeedupsSummary))
    clip_lines = [line for line in lines if "grad_clip" in line or "gradient_clip" in line]
    assert len(clip_lines) == 1, lines
    assert "runs gradient_clip_val=5.0, gradient_clip_algorithm='norm'" in clip_lines[0]
    assert "kept trainer.gradient_clip_val=5.0" in clip_lines[0]
    assert "at 1.0" not in clip_lines[0]


def test_rows_without_named_flags_are_left_alone():
    rows = [("precision", True, "bf16-mixed"), ("precision", False, "kept trainer.precision='32' from the config")]
    assert merge_kept(rows) == rows
