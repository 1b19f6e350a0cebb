"""The argv of every bench run: the user's arguments, the reset of the ``speedups:`` keys they set,
the variant's presets and overrides, and the Trainer settings every run shares.

Examples:
    >>> override_args("speedups", {"conv_bias": True, "precision": "auto"})
    ['--speedups.conv_bias=true', '--speedups.precision=auto']
    >>> flatten({"a": {"b": 1, "c": {}}, "d": 2})
    {'a.b': 1, 'a.c': {}, 'd': 2}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import yaml

from lightning_speedups.bench.options import BenchOptions
from lightning_speedups.bench.variants import Variant
from lightning_speedups.config import Speedups
from lightning_speedups.presets import resolve_config

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "cli_value",
    "flatten",
    "nest",
    "override_args",
    "preset_speedups",
    "reset_args",
    "speedups_defaults",
    "trainer_overrides",
    "user_speedups",
    "user_speedups_keys",
    "variant_args",
]


def cli_value(value: Any) -> str:
    """A value as a command-line argument: strings as they are (``on`` / ``off`` must not be quoted,
    jsonargparse would keep the quotes), everything else as JSON (which YAML reads)."""
    return value if isinstance(value, str) else json.dumps(value)


def override_args(prefix: str, overrides: Mapping[str, Any]) -> list[str]:
    """``{"a.b": 1}`` -> ``["--prefix.a.b=1"]``."""
    return [f"--{prefix}.{key}={cli_value(value)}" for key, value in (overrides or {}).items()]


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``init_args`` mappings and empty ones stay whole)."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v and k != "init_args":
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys as a nested mapping, the inverse of :func:`flatten`.

    Examples:
        >>> nest({"a.b": 1, "d": 2})
        {'a': {'b': 1}, 'd': 2}
    """
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def speedups_defaults() -> dict[str, Any]:
    """Every leaf of the ``speedups:`` section with its default, as dotted keys."""
    # Speedups is a generated dataclass; the type checker sees its base class
    return flatten(dataclasses.asdict(cast("DataclassInstance", Speedups())))


def user_speedups(args: Sequence[str]) -> dict[str, Any]:
    """The ``speedups`` keys the user's configs and command-line arguments set (dotted, no prefix), with
    the value each last set (a later config or argument wins, as in the parser; a group key set whole on
    the command line is listed leaf by leaf with the value ``None``, its leaves not being read here)."""
    out: dict[str, Any] = {}
    defaults = speedups_defaults()

    def add(key: str, value: Any) -> None:
        matches = [k for k in defaults if k.startswith(key + ".")]
        if matches:
            for k in matches:
                out[k] = value.get(k[len(key) + 1 :]) if isinstance(value, dict) else None
        else:
            out[key] = value

    args = list(args)
    for i, arg in enumerate(args):
        path = None
        if arg in ("--config", "-c") and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg.startswith("--speedups."):
            key, _, text = arg[len("--speedups.") :].partition("=")
            try:
                value = yaml.safe_load(text) if text else None
            except yaml.YAMLError:
                value = text
            add(key, flatten(value) if isinstance(value, dict) else value)
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    data = yaml.safe_load(fh) or {}
            except (OSError, yaml.YAMLError):  # a config that does not read is refused by the run that uses it
                continue
            section = data.get("speedups") if isinstance(data, dict) else None
            if isinstance(section, dict):
                for key, value in flatten(section).items():
                    add(key, value)
    return out


def user_speedups_keys(args: Sequence[str]) -> list[str]:
    """The ``speedups`` keys the user's configs and command-line arguments set (dotted, no prefix)."""
    return list(user_speedups(args))


def reset_args(keys: Sequence[str]) -> list[str]:
    """Command-line arguments that put the given ``speedups`` keys back to their defaults."""
    defaults = speedups_defaults()
    return override_args("speedups", {k: defaults[k] for k in keys if k in defaults})


def variant_args(user_args: Sequence[str], reset: Sequence[str], variant: Variant) -> list[str]:
    """The ``fit`` arguments of a variant: the user's, the reset (not for ``yours``), then the presets."""
    out = list(user_args)
    if variant.kind != "yours":
        out += list(reset)
    for p in variant.presets:
        out += ["--config", resolve_config(p)]
    return out


def trainer_overrides(options: BenchOptions, device: str, root: str) -> dict[str, Any]:
    """Trainer settings of every bench run: one device, no validation, logging or checkpoints.

    In target mode the config's training length stays (it is the plan a schedule spans; the run stops
    at the target or the cap) and validation runs, every ``target_every`` batches when given."""
    if options.target_mode_on:
        out: dict[str, Any] = {
            "accelerator": device,
            "devices": 1,
            "max_time": None,
            "num_sanity_val_steps": 0,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": root,
        }
        if options.target_every is not None:
            out["val_check_interval"] = options.target_every
            out["check_val_every_n_epoch"] = None
        return out
    return {
        "accelerator": device,
        "devices": 1,
        "max_epochs": -1,
        "max_steps": options.warmup + options.steps + 3,
        "max_time": None,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root,
    }


def preset_speedups(variant: Variant) -> list[dict[str, Any]]:
    """The ``speedups:`` section of each preset of ``variant`` (``{}`` for one that does not read)."""
    out = []
    for p in variant.presets:
        try:
            with open(resolve_config(p), encoding="utf-8") as fh:
                out.append((yaml.safe_load(fh) or {}).get("speedups") or {})
        except (
            OSError,
            yaml.YAMLError,
            AttributeError,
        ):  # unreadable, or not a mapping: bench refuses it where it runs
            out.append({})
    return out
