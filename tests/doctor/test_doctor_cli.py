"""The doctor end to end: the embedded default, JSON output, exit codes, models with and without the
habits the tips warn about, and bad input. Each doctor run trains only 2-3 steps; timings run on an
injected clock (``doctor_models.CLOCK``), never on the wall clock."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # doctor_models, importable by class path

import doctor_models

from lightning_speedups.doctor import diagnose
from lightning_speedups.doctor.runner import main
from lightning_speedups.tips import BY_ID

TIPS = [f"T{i:02d}" for i in range(1, 25)]


def by_tip(result):
    return {f.tip: f for f in result.findings}


@pytest.fixture(scope="module")
def default_result():
    result = diagnose([], steps=3)
    assert result.error is None and result.run_error is None
    return result


@pytest.fixture(scope="module")
def bad_result():
    """Biased convs before BN, raw 0..255 inputs, validation with gradients, zeroed gradients, anomaly detection."""
    return diagnose(
        ["--model=doctor_models.BadHabitsCNN", "--data=doctor_models.PixelData", "--trainer.detect_anomaly=true"],
        steps=3,
    )


@pytest.fixture(scope="module")
def clean_slow_result():
    """No biased convs, channels_last weights and batches, normalised inputs, but a slow dataset:
    each sample costs 0.1 s on the injected clock, the training step none."""
    return diagnose(
        [
            "--model=doctor_models.CleanCNN",
            "--data=doctor_models.PixelData",
            "--data.raw=false",
            "--data.batch_size=4",
            "--data.delay=0.1",
        ],
        steps=3,
        clock=doctor_models.CLOCK,
    )


# --------------------------------------------------------------------------------- the default


def test_default_finds_conv_bias_with_the_right_numbers(default_result):
    t16 = by_tip(default_result)["T16"]
    assert t16.status == "finding" and t16.severity == "low"
    # DigitsCNN(channels=32): three conv blocks, biases 32 + 32 + 64
    assert "3 Conv2d layers feed a BatchNorm and keep a bias: 128 parameters" in t16.evidence
    assert "features.0.0 -> features.0.1" in t16.evidence
    assert "speedups.conv_bias: true" in t16.fix
    assert t16.check == f"{BY_ID['T16'].check.__module__}:{BY_ID['T16'].check.__qualname__}"


def test_default_finds_nchw_convs(default_result):
    t24 = by_tip(default_result)["T24"]
    assert t24.status == "finding"
    assert t24.evidence.startswith("3 Conv2d layers hold 4D/5D weights in NCHW")
    assert "speedups.channels_last: true" in t24.fix


def test_default_covers_every_tip_once_and_reports_fine_ones(default_result):
    assert [f.tip for f in default_result.findings] == TIPS
    for f in default_result.findings:
        assert f.slug == BY_ID[f.tip].slug
        assert f.status in ("finding", "ok", "not-checked")
        assert f.evidence
        if f.status == "finding":
            assert f.severity in ("high", "medium", "low") and f.fix
        else:
            assert f.severity is None
    statuses = {f.status for f in default_result.findings}
    assert statuses == {"finding", "ok", "not-checked"}
    fine = by_tip(default_result)
    assert fine["T18"].status == "ok" and "mean" in fine["T18"].evidence  # the demo data is normalised
    assert fine["T14"].status == "ok"
    if default_result.facts.device_type != "cuda":  # on CPU: cudnn cannot be checked, and it says why
        assert fine["T07"].status == "not-checked" and "CUDA" in fine["T07"].evidence


def test_exit_codes_follow_fail_on(default_result):
    # the demo has low findings, plus a T05 finding where bf16 is faster than its fp32: medium on CPUs with
    # fast bf16, high on a CUDA GPU with bf16 (the embedded default runs with `accelerator: auto`)
    from lightning_speedups.functional.precision import cpu_fast_bf16

    t05 = by_tip(default_result)["T05"]
    high = default_result.facts.on_cuda and t05.severity == "high"
    assert default_result.exit_code("high") == (1 if high else 0)
    assert default_result.exit_code("medium") == (
        1 if high or (not default_result.facts.on_cuda and cpu_fast_bf16()) else 0
    )
    assert default_result.exit_code("low") == 1
    assert default_result.exit_code("never") == 0


def test_json_is_one_object_with_one_entry_per_tip(capsys):
    code = main(["--json", "--steps", "2", "--fail-on", "low"])
    out = capsys.readouterr().out
    doc = json.loads(out)  # the whole of stdout is one JSON object
    assert code == 1 and doc["exit_code"] == 1 and doc["fail_on"] == "low"
    assert [f["tip"] for f in doc["findings"]] == TIPS
    for f in doc["findings"]:
        assert {"tip", "slug", "severity", "evidence", "fix", "status"} <= set(f)
    assert doc["counts"]["low"] >= 2 and doc["model"] == "DigitsCNN"
    t16 = next(f for f in doc["findings"] if f["tip"] == "T16")
    assert t16["status"] == "finding" and "128 parameters" in t16["evidence"]


def test_terminal_report_groups_by_severity(capsys, default_result):
    from lightning_speedups.inspection import print_report

    print_report(default_result.findings, default_result.facts, result=default_result, fail_on="high")
    out = capsys.readouterr().out
    assert "LOW (" in out and "FINE (" in out and "NOT CHECKED HERE (" in out
    assert "Time on I/O" in out and "Use memory well" in out
    assert "T16 conv-bias" in out and "fix: speedups.conv_bias: true" in out
    assert out.index("LOW (") < out.index("FINE (")


# ---------------------------------------------------------------------------------- bad habits


def test_unnormalised_inputs_are_named_with_their_statistics(bad_result):
    t18 = by_tip(bad_result)["T18"]
    assert t18.status == "finding" and t18.severity == "medium"
    assert "inputs of batch[0] have mean 12" in t18.evidence  # uniform 0..255: mean ~127.5, std ~73.9
    assert "std 7" in t18.evidence and "max 255" in t18.evidence and "0..255" in t18.evidence
    assert "DeviceNormalize" in t18.fix


def test_bad_habits_are_found(bad_result):
    found = by_tip(bad_result)
    assert "2 Conv2d layers feed a BatchNorm and keep a bias: 16 parameters" in found["T16"].evidence
    assert found["T17"].status == "finding" and "validation" in found["T17"].evidence
    assert found["T12"].status == "finding" and "optimizer_zero_grad" in found["T12"].evidence
    assert found["T14"].status == "finding" and found["T14"].severity == "high"
    assert "anomaly detection" in found["T14"].evidence
    assert found["T24"].status == "finding"
    assert bad_result.exit_code("high") == 1


def test_lint_findings_join_their_tip(bad_result):
    t12 = by_tip(bad_result)["T12"]
    assert any(i.source == "lint" and "LS302" in i.evidence for i in t12.items)
    assert any(i.source == "runtime" for i in t12.items)


# ----------------------------------------------------------------------- clean model, slow data


def test_clean_model_has_no_conv_bias_or_channels_last_finding(clean_slow_result):
    found = by_tip(clean_slow_result)
    assert found["T16"].status == "ok", found["T16"].evidence
    assert found["T24"].status == "ok", found["T24"].evidence
    assert found["T18"].status == "ok"
    assert found["T01"].status == "ok" and "OneCycleLR (interval=step)" in found["T01"].evidence
    assert found["T06"].status == "ok" and "fused" in found["T06"].evidence


def test_slow_dataset_gives_a_data_wait_finding(clean_slow_result):
    # on the injected clock only the loader takes time: every watched step after the warm-up waits
    assert clean_slow_result.facts.data_wait_fraction == 1.0
    assert clean_slow_result.facts.data_wait_steps == 2  # 3 steps, the first one is warm-up
    t02 = by_tip(clean_slow_result)["T02"]
    assert t02.status == "finding" and t02.severity == "high", t02.evidence
    assert t02.evidence.startswith("100% of step time waiting for data over 2 steps")


def test_fixes_from_the_config_turn_findings_ok():
    result = diagnose(["--speedups.conv_bias=true", "--speedups.channels_last=true"], steps=2, lint=False)
    found = by_tip(result)
    assert found["T16"].status == "ok" and "ConvBiasRemoval removed 3" in found["T16"].evidence
    assert found["T24"].status == "ok"
    assert found["T13"].status == "not-checked"  # lint off, and it says so


# ----------------------------------------------------------------------------------- bad input


def test_config_that_does_not_build_exits_2_with_one_message(capsys):
    code = main(["--model.init_args.channels=-3"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: the config does not build: DigitsCNN: `channels` must be a positive integer" in err
    assert "Traceback" not in err


def test_missing_config_path_exits_2(capsys, tmp_path):
    code = main(["--config", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "nope.yaml" in err and "Traceback" not in err


def test_unknown_key_exits_2(capsys):
    assert main(["--speedups.no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err


def test_bad_steps_exits_2(capsys):
    assert main(["--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_cli_dispatches_doctor(capsys):
    from lightning_speedups.cli import main as cli_main

    assert cli_main(["doctor", "--config", "no-such-preset"]) == 2
    assert "no-such-preset" in capsys.readouterr().err


def test_training_steps_that_fail_exit_2_and_still_report(capsys):
    code = main(
        [
            "--model=doctor_models.BrokenStepCNN",
            "--data=doctor_models.PixelData",
            "--data.raw=false",
            "--json",
            "--no-lint",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert "error: the training steps failed: RuntimeError: boom in training_step" in captured.err
    assert "Traceback" not in captured.err
    doc = json.loads(captured.out)
    assert doc["exit_code"] == 2 and "boom" in doc["error"]
    t16 = next(f for f in doc["findings"] if f["tip"] == "T16")
    assert t16["status"] == "ok"  # the static checks still ran
