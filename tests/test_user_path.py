"""One user's whole path, as real commands in one folder: bench -> the preset it writes -> fit with it ->
a resume in place -> doctor --verify, on a config with the user's own schedule, accumulation and
precision (the README's example ``my.yaml``, on the embedded default model)."""

from __future__ import annotations

import json
import logging

import pytest
import yaml

from lightning_speedups.cli import main

MY_YAML = """\
trainer:
  max_steps: 4
  limit_val_batches: 1
speedups:
  precision: 32-true
  effective_batch_size: 128
  lr_schedule:
    name: onecycle
"""
QUIET = ["--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_preset_fit_resume_doctor_keep_the_users_settings(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO)
    (tmp_path / "my.yaml").write_text(MY_YAML)
    bench = ["bench", "--config", "my.yaml", "--tips", "T24", "--presets", "none", "--repeats", "2", "--steps", "2"]
    bench += ["--warmup", "1", "--no-noise-pair", "--no-extras", "--no-search", "--no-progress", "--threads", "1"]
    assert main([*bench, "--baseline", "yours", "--write-preset", "out/picked.yaml", "--json", "out/b.json"]) == 0
    runs = json.loads((tmp_path / "out" / "b.json").read_text())["variants"]
    assert all(r["status"] == "ok" for v in runs for r in v["runs"]), "a run with the user's schedule failed"
    written = yaml.safe_load((tmp_path / "out" / "picked.yaml").read_text())["speedups"]
    assert not {"precision", "effective_batch_size", "lr_schedule"} & set(written)  # bench did not judge them
    capsys.readouterr()

    caplog.clear()
    assert main(["fit", "--config", "my.yaml", "--config", "out/picked.yaml", *QUIET]) == 0
    summary = caplog.text  # the start-up summary (rank_zero_info)
    assert "accumulate_grad_batches=2" in summary and "OneCycleLR" in summary and "32-true" in summary
    (ckpt,) = (tmp_path / "checkpoints").glob("*.ckpt")
    resume = ["fit", "--config", "my.yaml", "--config", "out/picked.yaml", "--trainer.max_steps=6", *QUIET]
    assert main([*resume, "--ckpt_path", str(ckpt)]) == 0  # in place: the first run's config.yaml is there
    assert (tmp_path / "config.yaml").is_file() and (tmp_path / "config-2.yaml").is_file()
    capsys.readouterr()

    doctor = ["doctor", "--config", "my.yaml", "--config", "out/picked.yaml", "--json", "--no-lint"]
    code = main([*doctor, "--verify", "--verify-steps", "2", "--verify-repeats", "2"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and report["verify"]["error"] is None, report["verify"]
