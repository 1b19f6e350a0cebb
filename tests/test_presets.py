"""Presets: every packaged preset loads, pairs compose without losing a part, users override one key."""

from __future__ import annotations

import itertools
import sys

import pytest
import yaml

from lightning_speedups.presets import PresetError, list_presets, preset, preset_dir
from lightning_speedups.session import SpeedupsCLI, resolve_config_args

REQUIRED = {"baseline", "fast", "memory", "cnn", "transformer", "ddp", "fsdp", "converge", "debug"}
EXPECTED = set(list_presets())
#: presets for several processes: trained across gloo processes in tests/distributed
MULTI_PROCESS = {"ddp", "fsdp"}


def test_all_presets_are_packaged_with_a_header_comment():
    assert REQUIRED <= EXPECTED
    for name, description in list_presets().items():
        text = (preset_dir() / f"{name}.yaml").read_text()
        assert text.startswith("# "), f"{name}.yaml needs a header comment saying what it turns on and why"
        assert description


def test_baseline_turns_nothing_on():
    assert preset("baseline").parts() == set()
    assert preset("baseline").trainer_kwargs() == {}


@pytest.mark.parametrize("first,second", list(itertools.permutations(sorted(EXPECTED), 2)))
def test_every_pair_of_presets_keeps_every_part_of_both(first, second):
    composed = preset(first, second).parts()
    assert preset(first).parts() | preset(second).parts() <= composed


def _cli_speedups(*configs: str):
    """Parse configs exactly as `python -m lightning_speedups fit --config ...` does (no fit)."""
    argv = []
    for c in configs:
        argv += ["--config", c]
    argv = resolve_config_args(argv) + ["--trainer.logger", "false"]
    saved = sys.argv
    sys.argv = ["x", *argv]
    try:
        cli = SpeedupsCLI(run=False)
    finally:
        sys.argv = saved
    return cli.config_init.speedups


@pytest.mark.parametrize(
    "first,second", [("fast", "memory"), ("memory", "fast"), ("cnn", "ddp"), ("transformer", "debug")]
)
def test_the_cli_composes_presets_like_the_python_api(first, second):
    assert _cli_speedups(first, second).active_parts() == preset(first, second).parts()


def test_a_user_yaml_overrides_one_setting_and_keeps_the_rest(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"speedups": {"precision": "32-true"}}))
    base = preset("transformer")
    ours = preset("transformer", str(mine))
    assert ours.speedups.precision == "32-true"
    assert ours.speedups.grad_clip == base.speedups.grad_clip
    assert ours.parts() == base.parts()
    cli = _cli_speedups("transformer", str(mine))
    assert cli.precision == "32-true" and cli.grad_clip.algorithm == "norm"


def test_python_api_gives_trainer_kwargs_and_callbacks():
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    p = preset("transformer")
    # the model known: clipping is a Trainer argument (it would be skipped for manual optimization)
    kwargs = p.trainer_kwargs(accelerator="cpu", model=BoringModel())
    assert kwargs["gradient_clip_val"] == 1.0 and kwargs["gradient_clip_algorithm"] == "norm"
    names = [type(cb).__name__ for cb in p.callbacks()]
    assert "FusedOptimizer" in names and names[-1] == "SpeedupsSummary"
    assert "AutomaticOptimizationFlags" not in names
    Trainer(**kwargs, callbacks=p.callbacks(), logger=False, max_steps=1)  # the kwargs are valid Trainer arguments
    # no model: clipping waits for setup, where the model says whether Lightning accepts it
    q = preset("transformer")
    kwargs = q.trainer_kwargs(accelerator="cpu")
    assert "gradient_clip_val" not in kwargs
    cbs = q.callbacks()
    flags = next(cb for cb in cbs if type(cb).__name__ == "AutomaticOptimizationFlags")
    trainer = Trainer(**kwargs, callbacks=cbs, logger=False, max_steps=1, enable_checkpointing=False)
    trainer.fit(BoringModel())
    assert flags.active and trainer.gradient_clip_val == 1.0 and trainer.gradient_clip_algorithm == "norm"


def test_a_yaml_trainer_flag_wins_over_the_speedups_section_and_is_noted(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"trainer": {"gradient_clip_val": 0.5}}))
    from lightning.pytorch.demos.boring_classes import BoringModel

    p = preset("transformer", str(mine))
    kwargs = p.trainer_kwargs(accelerator="cpu", model=BoringModel())
    assert kwargs["gradient_clip_val"] == 0.5
    assert any(name == "gradient_clip_val" and not active and "kept" in why for name, active, why in p._notes)


def test_clipping_is_skipped_with_the_fix_for_manual_optimization():
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import ManualOptimBoringModel

    model = ManualOptimBoringModel()
    p = preset("transformer")
    kwargs = p.trainer_kwargs(accelerator="cpu", model=model)
    assert "gradient_clip_val" not in kwargs
    skipped = [why for name, active, why in p._notes if name.startswith("grad_clip") and not active]
    assert skipped and "self.clip_gradients(opt" in skipped[0] and "gradient_clip_val=1.0" in skipped[0]
    # and without the model: the part decides in setup and says the same
    q = preset("transformer")
    cbs = q.callbacks()
    Trainer(
        **q.trainer_kwargs(accelerator="cpu"), callbacks=cbs, logger=False, max_steps=2, enable_checkpointing=False
    ).fit(ManualOptimBoringModel())
    flags = next(cb for cb in cbs if type(cb).__name__ == "AutomaticOptimizationFlags")
    assert flags.status[0] == "skipped" and "self.clip_gradients(opt" in flags.status[1]


def test_preset_api_errors_are_clear(tmp_path):
    with pytest.raises(PresetError, match="presets: baseline"):
        preset("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("speedups:\n  channels_lats: true\n")
    with pytest.raises(PresetError, match=r"bad.yaml.*channels_lats"):
        preset(str(bad))


@pytest.mark.parametrize("name", sorted(EXPECTED - MULTI_PROCESS))
@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_every_preset_trains_both_kinds_of_model(name, kind):
    """Each preset's parts together, on hardware-resolved settings, on a CNN and a transformer."""
    from helpers import QUIET, TinyCNN, TinyTransformer
    from lightning.pytorch import Trainer

    p = preset(name)
    model = TinyCNN(optimizer="adamw") if kind == "cnn" else TinyTransformer()
    trainer = Trainer(**{**QUIET, **p.trainer_kwargs(accelerator="cpu")}, callbacks=p.callbacks(), max_steps=2)
    trainer.fit(model)
    assert trainer.global_step == 2


def test_python_and_the_command_line_compose_every_pair_of_presets_alike():
    """Issue 30: preset(a, b) merged with its own _deep_merge, the CLI through jsonargparse; one rule now."""
    import dataclasses

    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    class ParseOnly(SpeedupsCLI):
        def instantiate_classes(self) -> None:  # the parsed config is what is compared: nothing to build
            pass

    differ = []
    for first, second in itertools.permutations(sorted(EXPECTED), 2):
        cli = ParseOnly(args=resolve_config_args(["--config", first, "--config", second]), run=False)
        from_cli = cli.config.speedups.as_dict()
        from_python = dataclasses.asdict(preset(first, second).speedups)
        if from_cli != from_python:
            keys = sorted(k for k in from_python if from_cli.get(k) != from_python[k])
            differ.append(f"{first} + {second}: {keys}")
    assert not differ, "\n".join(differ)


def test_trainer_sections_compose_by_the_command_lines_rule(tmp_path):
    """Issue 38 item 5: a YAML's trainer: keys went through the pack's own _deep_merge and its speedups: keys through
    jsonargparse; both follow the command line's rule now (a later value wins, a class given twice keeps what the
    second does not set), and a key Trainer does not take is refused naming the config."""

    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    ddp = "lightning.pytorch.strategies.DDPStrategy"
    a.write_text(
        f"trainer:\n  max_steps: 3\n  precision: bf16-mixed\n  strategy:\n    class_path: {ddp}\n"
        "    init_args: {static_graph: true}\n"
    )
    b.write_text(
        f"trainer:\n  max_steps: 5\n  strategy:\n    class_path: {ddp}\n    init_args: {{gradient_as_bucket_view: true}}\n"
        'speedups:\n  cudnn_benchmark: "on"\n'
    )

    class ParseOnly(SpeedupsCLI):
        def instantiate_classes(self) -> None:
            pass

    cli = ParseOnly(args=["--config", str(a), "--config", str(b)], run=False)
    ours = preset(str(a), str(b)).trainer
    assert set(ours) == {"max_steps", "precision", "strategy"}
    for key, value in ours.items():
        theirs = cli.config.trainer[key]
        assert value == (theirs.as_dict() if hasattr(theirs, "as_dict") else theirs), key
    assert ours["max_steps"] == 5 and ours["precision"] == "bf16-mixed"
    assert ours["strategy"]["init_args"]["static_graph"] is True  # kept from the first
    assert ours["strategy"]["init_args"]["gradient_as_bucket_view"] is True
    (tmp_path / "typo.yaml").write_text("trainer:\n  max_step: 3\n")
    with pytest.raises(PresetError, match=r"typo\.yaml.*max_step"):
        preset(str(tmp_path / "typo.yaml"))
