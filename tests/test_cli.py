"""The main command: presets by name from any directory, the embedded default, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml

from lightning_speedups.cli import main
from lightning_speedups.presets import list_presets
from lightning_speedups.session import resolve_config_args

QUICK = [
    "--trainer.max_epochs",
    "1",
    "--trainer.limit_train_batches",
    "2",
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
]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from a directory that has nothing of the project in it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_bare_preset_name_resolves_to_the_packaged_file(elsewhere):
    args = resolve_config_args(["fit", "--config", "fast.yaml", "-c", "memory", "--config=cnn.yaml"])
    assert args[2].endswith(os.path.join("configs", "fast.yaml")) and os.path.isfile(args[2])
    assert args[4].endswith(os.path.join("configs", "memory.yaml"))
    assert args[5].startswith("--config=") and args[5].endswith("cnn.yaml")


def test_a_local_file_wins_over_the_packaged_preset(elsewhere):
    (elsewhere / "fast.yaml").write_text("speedups:\n  channels_last: false\n")
    assert resolve_config_args(["fit", "--config", "fast.yaml"])[2] == "fast.yaml"


def test_unknown_preset_is_one_line_listing_the_presets(elsewhere, capsys):
    assert main(["fit", "--config", "fastest.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    for name in list_presets():
        assert name in err


def test_fit_fast_on_the_embedded_default_from_any_directory(elsewhere, capsys):
    # a real subprocess, as a user runs it: `python -m lightning_speedups fit --config fast.yaml`
    out = subprocess.run(
        [sys.executable, "-m", "lightning_speedups", "fit", "--config", "fast.yaml", *QUICK],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    assert "lightning_speedups:" in text
    assert "precision (T05)" in text and "cudnn_benchmark (T07)" in text  # active and skipped parts, with reasons
    if torch.cuda.is_available():  # `fast` on a GPU machine: cudnn.benchmark is on, and says so
        assert "cudnn_benchmark (T07)" in text and "skipped, cuDNN is only used on CUDA devices" not in text
    else:
        assert "skipped, cuDNN is only used on CUDA devices" in text


def test_embedded_default_reaches_90_percent_validation_accuracy(elsewhere):
    from lightning_speedups.session import SpeedupsCLI

    saved = sys.argv
    sys.argv = [
        "lightning_speedups",
        "fit",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.enable_checkpointing",
        "false",
        "--trainer.enable_model_summary",
        "false",
    ]
    try:
        cli = SpeedupsCLI()
    finally:
        sys.argv = saved
    assert cli.trainer.current_epoch == 5  # the embedded default's epochs
    assert float(cli.trainer.callback_metrics["val_acc"]) >= 0.9


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
def test_other_trainer_commands_take_presets_too(elsewhere, command):
    assert (
        main(
            [
                command,
                "--config",
                "fast.yaml",
                *QUICK[4:],
                "--trainer.limit_"
                + ("predict" if command == "predict" else "val" if command == "validate" else "test")
                + "_batches",
                "1",
            ]
        )
        == 0
    )


def _write(path, data):
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_unknown_key_names_the_key_the_file_and_close_keys(elsewhere, capsys):
    bad = _write(elsewhere / "mine.yaml", {"speedups": {"precison": "auto"}})
    assert main(["fit", "--config", "fast.yaml", "--config", bad]) == 2
    err = capsys.readouterr().err
    assert "speedups.precison" in err and "mine.yaml" in err and "speedups.precision" in err
    assert "Traceback" not in err and "usage:" not in err


def test_bad_value_names_the_key_the_file_and_the_allowed_values(elsewhere, capsys):
    bad = _write(elsewhere / "mine.yaml", {"speedups": {"cudnn_benchmark": "always"}})
    assert main(["fit", "--config", bad]) == 2
    err = capsys.readouterr().err
    assert "speedups.cudnn_benchmark" in err and "mine.yaml" in err and "off, auto, on" in err
    assert "Traceback" not in err


def test_a_part_that_rejects_the_data_exits_2_with_its_message(elsewhere, capsys):
    # 64-sample batches of the embedded default cannot make an effective batch of 100
    assert main(["fit", "--speedups.effective_batch_size", "100", *QUICK]) == 2
    err = capsys.readouterr().err
    assert "effective_batch_size=100" in err and "Use 64 or 128" in err and "Traceback" not in err


def test_unknown_command_is_a_clear_error(capsys):
    assert main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_presets_and_tips_commands_list_everything(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("baseline", "fast", "memory", "cnn", "transformer", "ddp", "debug"):
        assert name in out
    assert main(["tips"]) == 0
    out = capsys.readouterr().out
    for i in range(1, 25):
        assert f"T{i:02d}" in out


def test_trainer_flag_in_the_config_wins_over_the_preset(elsewhere):
    from lightning_speedups.session import SpeedupsCLI

    saved = sys.argv
    sys.argv = [
        "x",
        "fit",
        "--config",
        resolve_config_args(["--config", "memory.yaml"])[1],
        "--trainer.precision",
        "32-true",
        *QUICK,
    ]
    try:
        cli = SpeedupsCLI()
    finally:
        sys.argv = saved
    assert cli.trainer.precision == "32-true"
    summary = [cb for cb in cli.trainer.callbacks if type(cb).__name__ == "SpeedupsSummary"][0]
    assert any("kept trainer.precision" in line for line in summary.lines)


def test_onecycle_from_plain_lr_scheduler_flag_steps_per_optimizer_step(elsewhere):
    from lightning_speedups.session import SpeedupsCLI

    saved = sys.argv
    sys.argv = [
        "x",
        "fit",
        "--optimizer",
        "SGD",
        "--optimizer.lr",
        "0.1",
        "--lr_scheduler",
        "OneCycleLR",
        "--lr_scheduler.max_lr",
        "0.1",
        "--lr_scheduler.total_steps",
        "2",
        *QUICK,
    ]
    try:
        cli = SpeedupsCLI()
    finally:
        sys.argv = saved
    assert cli.trainer.lr_scheduler_configs[0].interval == "step"


def test_a_class_path_that_does_not_import_says_why(elsewhere, capsys):
    bad = _write(elsewhere / "mine.yaml", {"model": {"class_path": "nowhere_pkg.Model"}})
    assert main(["fit", "--config", bad]) == 2
    err = capsys.readouterr().err
    assert "nowhere_pkg.Model" in err and "No module named 'nowhere_pkg'" in err and "mine.yaml" in err


def test_resume_in_place_without_a_logger_keeps_the_first_config(elsewhere, capsys):
    """The commonest second run: the same command with --ckpt_path in the same folder, no logger.
    Lightning's SaveConfigCallback would refuse it (config.yaml exists); here it saves beside it."""
    args = ["fit", "--trainer.limit_val_batches=0", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    assert main([*args, "--trainer.max_steps=2"]) == 0
    first = (elsewhere / "config.yaml").read_text()
    (ckpt,) = (elsewhere / "checkpoints").glob("*.ckpt")
    capsys.readouterr()
    assert main([*args, "--trainer.max_steps=4", "--ckpt_path", str(ckpt)]) == 0
    assert (elsewhere / "config.yaml").read_text() == first  # the first run's config is kept
    second = yaml.safe_load((elsewhere / "config-2.yaml").read_text())
    assert second["trainer"]["max_steps"] == 4 and second["ckpt_path"] == str(ckpt)
    resumed = torch.load(sorted((elsewhere / "checkpoints").glob("*step=4.ckpt"))[0], weights_only=False)
    assert resumed["global_step"] == 4  # it continued from step 2


def test_a_run_that_fails_before_training_leaves_no_config_behind(elsewhere, capsys):
    args = ["fit", "--trainer.limit_val_batches=0", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    # refused in setup, after Lightning's SaveConfigCallback would have written config.yaml
    assert main([*args, "--trainer.max_steps=2", "--speedups.effective_batch_size=100"]) == 2
    assert "not a multiple of batch size" in capsys.readouterr().err
    assert not list(elsewhere.glob("config*.yaml")), "a failed run left its saved config behind"
    assert main([*args, "--trainer.max_steps=1"]) == 0  # nothing blocks the next run
    assert (elsewhere / "config.yaml").is_file()


def test_the_cli_knows_the_trainer_commands_without_importing_the_session():
    """One home for the command names (lightning_speedups.commands): cli.py reads them without importing Lightning."""
    import lightning_speedups.arguments as arguments
    import lightning_speedups.cli as cli
    import lightning_speedups.session as session

    assert cli.TRAINER_COMMANDS is session.TRAINER_COMMANDS and cli.PACKAGE_DIR is arguments.PACKAGE_DIR  # one home
    code = "import sys, lightning_speedups.cli; print('lightning' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_an_error_of_the_pack_itself_is_a_bug_report_not_bad_input(monkeypatch, capsys):
    """Issue 30: a ValueError the pack raises by mistake shows its traceback and says it is a bug; exit 1, not 2."""
    import lightning_speedups.session as session

    # a function whose code is the pack's own (its frames say session.py), failing on an internal invariant
    scope: dict = {}
    exec(
        compile("def broken(argv):\n    raise ValueError('internal invariant broken')\n", session.__file__, "exec"),
        scope,
    )
    monkeypatch.setattr(session, "resolve_config_args", scope["broken"])
    assert main(["fit", "--trainer.max_steps=1"]) == 1
    err = capsys.readouterr().err
    assert "This is a bug in lightning_speedups" in err and "Traceback" in err
    assert "internal invariant broken" in err and "lightning_speedups " in err and "torch " in err


def test_bad_input_raised_deep_in_the_pack_stays_one_line(monkeypatch, capsys):
    import lightning_speedups.session as session
    from lightning_speedups.errors import SettingError

    def refuse(argv):
        raise SettingError("`speedups.precision` must be one of auto, 32-true; got 'fp7'.")

    monkeypatch.setattr(session, "resolve_config_args", refuse)
    assert main(["fit"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "error: `speedups.precision` must be one of auto, 32-true; got 'fp7'." and "Traceback" not in err
    )


@pytest.mark.parametrize("width", [80, 120])
def test_tips_and_presets_read_at_the_terminal_width(monkeypatch, capsys, width):
    """Issue 30: at 80 columns `tips` printed a 14-line cell per tip and `presets` cut converge mid-sentence."""
    from lightning_speedups.catalog import ROWS
    from lightning_speedups.presets import list_presets

    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["tips"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(line) for line in lines) <= width
    heads = [line for line in lines if line[:1] == "T"]
    assert [h.split()[0] for h in heads] == [row[0] for row in ROWS]  # one block per tip, in order
    assert len(lines) <= 8 * len(ROWS)
    for name, description in list_presets().items():
        assert description.endswith("."), (name, description)  # a whole sentence, never cut
    assert (
        list_presets()["converge"].startswith("Reach a target accuracy sooner")
        and "range test" in list_presets()["converge"]
    )
