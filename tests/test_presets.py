"""Presets: every packaged preset loads, pairs compose without losing a part, users override one key."""

from __future__ import annotations

import itertools
import sys

import pytest
import yaml

from lightning_speedups.session import SpeedupsCLI, resolve_config_args
from lightning_speedups.presets import PresetError, list_presets, preset, preset_dir

EXPECTED = {"baseline", "fast", "memory", "cnn", "transformer", "ddp", "debug"}


def test_all_presets_are_packaged_with_a_header_comment():
    assert EXPECTED <= set(list_presets())
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


@pytest.mark.parametrize("first,second", [("fast", "memory"), ("memory", "fast"), ("cnn", "ddp"), ("transformer", "debug")])
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

    p = preset("transformer")
    kwargs = p.trainer_kwargs(accelerator="cpu")
    assert kwargs["gradient_clip_val"] == 1.0 and kwargs["gradient_clip_algorithm"] == "norm"
    names = [type(cb).__name__ for cb in p.callbacks()]
    assert "FusedOptimizer" in names and names[-1] == "SpeedupsSummary"
    Trainer(**kwargs, callbacks=p.callbacks(), logger=False, max_steps=1)  # the kwargs are valid Trainer arguments


def test_preset_api_errors_are_clear(tmp_path):
    with pytest.raises(PresetError, match="presets: baseline"):
        preset("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("speedups:\n  channels_lats: true\n")
    with pytest.raises(PresetError, match=r"bad.yaml.*channels_lats"):
        preset(str(bad))


@pytest.mark.parametrize("name", sorted(EXPECTED - {"ddp"}))
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
