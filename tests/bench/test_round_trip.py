"""bench -> written preset -> ``fit --config yours.yaml --config written.yaml``: every setting the user
set survives unless bench picked another value on purpose (and the preset says so).

The user's settings are drawn from the registry (:func:`lightning_speedups.config.all_settings`, leaf by
leaf of the generated ``speedups:`` dataclass): a new setting is covered without editing this file,
unless its values need a companion (:data:`COMPANIONS`) to be valid.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
import yaml
from helpers import FakeLauncher
from jsonargparse import ActionConfigFile, ArgumentParser

from lightning_speedups.bench import Bench, BenchOptions, flatten, speedups_defaults
from lightning_speedups.bench.args import nest
from lightning_speedups.bench.report import decided_speedups, write_preset
from lightning_speedups.config import GROUPS, Speedups, all_settings

TINY_CNN = ["--model=helpers.TinyCNN"]

#: leaves whose non-default value is only valid with another leaf set too
COMPANIONS: dict[str, dict[str, Any]] = {
    "device_normalize.mean": {"device_normalize.std": [0.25, 0.25, 0.25]},
    "device_normalize.std": {"device_normalize.mean": [0.5, 0.5, 0.5]},
}


def _leaf_types() -> dict[str, Any]:
    """Every leaf key of ``speedups:`` -> its annotation."""
    out: dict[str, Any] = {}
    for _, s in all_settings():
        if dataclasses.is_dataclass(s.type):
            hints = typing.get_type_hints(s.type)
            for f in dataclasses.fields(s.type):
                out[f"{s.path}.{f.name}"] = hints[f.name]
        else:
            out[s.path] = s.type
    return out


def _other_value(annotation: Any, default: Any) -> Any:
    """A valid value of ``annotation`` that differs from ``default``."""
    args = typing.get_args(annotation)
    if annotation is bool:
        return not default
    if typing.get_origin(annotation) is typing.Literal:  # the last choice: away from ``off`` and ``auto``
        return next(a for a in reversed(args) if a != default)
    if typing.get_origin(annotation) is list:
        inner = args[0]
        value = [0.5] if inner is float else ["head"]
        return value if value != default else ["net"]
    if typing.get_origin(annotation) is typing.Union:
        members = [a for a in args if a is not type(None)]
        for m in members:  # a literal choice first (``auto``), then a number, a list, a string
            if typing.get_origin(m) is typing.Literal:
                return next(a for a in typing.get_args(m) if a != default)
        for m in members:
            if m in (int, float) or typing.get_origin(m) is list or m is bool:
                return _other_value(m, default)
        return "custom"
    if annotation in (int, float):
        if isinstance(default, (int, float)) and default:
            return annotation(default / 2) if annotation is float else max(1, int(default) // 2)
        return annotation(3)
    if annotation is str:
        return "custom"
    raise AssertionError(f"no example value for {annotation!r}: add one to this test")


def user_values() -> dict[str, Any]:
    """A non-default value for every leaf of ``speedups:`` (with the companions it needs)."""
    defaults = speedups_defaults()
    out: dict[str, Any] = {}
    for key, annotation in _leaf_types().items():
        out[key] = _other_value(annotation, defaults[key])
    for key, extra in COMPANIONS.items():
        if key in out:
            out.update(extra)
    return out


def _compose(*files: str) -> dict[str, Any]:
    """``--config a --config b`` through jsonargparse, as LightningCLI merges the ``speedups:`` section."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_class_arguments(Speedups, "speedups", fail_untyped=True)
    cfg = parser.parse_args([a for f in files for a in ("--config", f)])
    section = parser.instantiate_classes(cfg).speedups
    return flatten(dataclasses.asdict(section))


#: (scenario, bench options, the fake launcher's rates, the variant that must be picked)
SCENARIOS = {
    "tip": (dict(tips=["T24"], presets=["none"]), {"T24 channels-last": 150.0}, "T24 channels-last"),
    "preset": (dict(tips=["none"], presets=["fast"]), {"preset:fast": 150.0}, "preset:fast"),
    "baseline": (dict(tips=["T24"], presets=["none"]), {"T24 channels-last": 90.0}, "baseline"),
    "yours": (dict(tips=["T24"], presets=["none"]), {"yours": 150.0}, "yours"),
}


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """Each scenario's bench on a user config that sets every leaf, and the preset it wrote."""
    root = tmp_path_factory.mktemp("round_trip")
    values = user_values()
    mine = root / "mine.yaml"
    mine.write_text(yaml.safe_dump({"speedups": nest(values)}, sort_keys=False))
    out = {}
    for name, (options, rates, _) in SCENARIOS.items():
        fake = FakeLauncher({"baseline": 100.0, **rates})
        opts = dict(args=TINY_CNN + ["--config", str(mine)], steps=2, warmup=1, repeats=2, progress=False)
        opts.update(options, extras=False, search=False)
        bench = Bench(BenchOptions(**opts), launcher=fake, clock=fake.clock)
        bench.prepare()
        result = bench.run()
        path = write_preset(result, str(root / f"{name}.yaml"))
        out[name] = (result, path, str(mine))
    return values, out


def test_user_values_are_valid_and_differ_from_the_defaults():
    values = user_values()
    defaults = speedups_defaults()
    assert set(values) == set(defaults), "every leaf of speedups: has a user value"
    assert all(values[k] != defaults[k] for k in values)
    groups = {k: v for k, v in nest(values).items() if k in GROUPS}
    built = Speedups(**{k: GROUPS[k](**v) for k, v in groups.items()})  # every value passes its record's bounds
    assert built.channels_last is False  # only the groups were given


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_written_preset_keeps_what_the_user_set(benched, scenario):
    values, out = benched
    result, path, mine = out[scenario]
    assert result.pick.variant.name == SCENARIOS[scenario][2]
    text = open(path, encoding="utf-8").read()
    written = flatten(yaml.safe_load(text)["speedups"])
    decided = decided_speedups(result.pick) if result.pick.variant.kind not in ("baseline", "yours") else {}
    # bench writes only what it decided
    assert set(written) <= set(decided) | {"summary"} or not decided
    assert all(written[k] == decided[k] for k in written if k in decided)
    composed = _compose(mine, path)
    lost = []
    for key, mine_value in values.items():
        if key in written and written[key] != mine_value:
            # picked on purpose: the preset names the key, its value and the user's
            assert f"# speedups.{key}: bench's pick sets" in text, f"{key} replaced without a comment"
            assert composed[key] == written[key]
        elif composed[key] != mine_value:
            lost.append((key, mine_value, composed[key]))
    assert not lost, f"{scenario}: the composed config lost the user's settings: {lost}"


def test_preset_pick_replaces_the_users_precision_and_says_so(benched):
    _, out = benched
    result, path, _ = out["preset"]
    text = open(path, encoding="utf-8").read()
    assert "# speedups.precision: bench's pick sets auto in place of your 64-true" in text
    assert "lr_schedule.name" in text.split("# Yours, not judged here", 1)[1]  # kept, and said so
