"""Trainer flags a preset sets: whose value wins, and setting them on a Trainer that already exists.

A library that builds the Trainer for its users often passes every flag explicitly, with the value that
means "off" (``gradient_clip_val=0.0``, ``accumulate_grad_batches=1``, ``precision="32-true"``). That value
is the library's default, not the user's choice: it must not block what a preset asks for. A value that
turns something on (``gradient_clip_val=0.5``, ``precision="64-true"``) is a choice, and it wins.
:func:`decide_flag` is that rule, shared by ``preset(...).trainer_kwargs``, the CLI and the
``LIGHTNING_SPEEDUPS`` path; :func:`apply_flag` sets a flag on a live Trainer (the path where the pack
meets a Trainer it did not build).

Examples:
    >>> decide_flag("gradient_clip_val", 0.0, 1.0, "the Trainer")
    (True, 'trainer.gradient_clip_val=0.0 from the Trainer means off: the preset sets 1.0')
    >>> decide_flag("gradient_clip_val", 0.5, 1.0, "the Trainer")
    (False, 'kept trainer.gradient_clip_val=0.5 from the Trainer (speedups wanted 1.0)')
    >>> decide_flag("accumulate_grad_batches", 1, 4, "the call")[0], means_off("precision", "32-true")
    (True, True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from typing import Any, Optional, Union

from lightning_speedups.trainer.namespace import is_lightning, lightning_class_name, package_of

#: per Trainer flag, the values that mean "off" (Lightning's default and its spellings): they never block a preset
OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "gradient_clip_val": (None, 0, 0.0),
    "gradient_clip_algorithm": (None,),
    "accumulate_grad_batches": (None, 1),
    "benchmark": (None,),
    "precision": (None, 32, "32", "32-true"),
}
#: a flag that follows another: kept with it when the other is kept (a clip algorithm goes with its value)
FOLLOWS: dict[str, str] = {"gradient_clip_algorithm": "gradient_clip_val"}
#: Lightning's own default of each flag the pack sets on a live Trainer (left there: nobody chose a value)
LIGHTNING_DEFAULTS: dict[str, Any] = {
    "precision": "32-true",
    "accumulate_grad_batches": 1,
    "gradient_clip_val": None,
    "gradient_clip_algorithm": None,
}
#: what Lightning runs for a flag left unset (``gradient_clip_algorithm=None`` clips by norm)
EFFECTIVE: dict[str, Any] = {"gradient_clip_algorithm": "norm"}
#: Lightning's own precision plugins of a single device or DDP: another one is somebody's choice, kept as it is
_PLAIN_PLUGINS = ("Precision", "MixedPrecision", "HalfPrecision", "DoublePrecision")
#: the flags a callback can still set on a Trainer that exists, before the fit loop (see :func:`apply_flag`)
LIVE_FLAGS = ("precision", "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm")


def means_off(key: str, value: Any) -> bool:
    """Whether ``value`` of Trainer flag ``key`` means "off" (the default): a library's default, not a choice."""
    offs = OFF_VALUES.get(key, ())
    if value is None:
        return None in offs
    if isinstance(value, bool):  # True / False is never one of these flags' defaults
        return False
    return any(value == off for off in offs if off is not None)


def decide_flag(key: str, current: Any, wanted: Any, source: str, explicit: bool = False) -> tuple[bool, Optional[str]]:
    """Whether the preset's ``wanted`` value of ``key`` applies over ``current`` (set by ``source``), and the
    start-up summary's line for it (``None`` when there is nothing to say: the values agree).

    ``explicit``: ``current`` is known to be the user's own (typed into their config or passed to
    ``trainer_kwargs(...)``), so even a value that means "off" is their choice and wins. A value read from a
    Trainer someone else built (a library's) is not known to be the user's: there "off" does not block.
    """
    if current == wanted:
        return True, None
    if not explicit and means_off(key, current):
        return True, f"trainer.{key}={current!r} from {source} means off: the preset sets {wanted!r}"
    return False, f"kept trainer.{key}={current!r} from {source} (speedups wanted {wanted!r})"


def merge_flags(
    wanted: Mapping[str, Any],
    given: Mapping[str, Any],
    source: Union[str, Callable[[str], str]],
    explicit: Union[bool, Collection[str]] = False,
) -> tuple[dict[str, Any], list[tuple[str, bool, str]]]:
    """The flags of ``wanted`` (a preset's) that apply over ``given`` (what the user or a library set, without
    the keys left at Lightning's default), and one start-up summary note per flag where they differ
    (``explicit``: see :func:`decide_flag`; ``True`` for every key, or the keys the user chose themselves).

    Examples:
        >>> applied, notes = merge_flags({"gradient_clip_val": 1.0, "gradient_clip_algorithm": "value",
        ...                               "accumulate_grad_batches": 4},
        ...                              {"gradient_clip_val": 0.5, "accumulate_grad_batches": 1}, "the Trainer")
        >>> applied
        {'accumulate_grad_batches': 4}
        >>> [text for _, _, text in notes]  # doctest: +NORMALIZE_WHITESPACE
        ['kept trainer.gradient_clip_val=0.5 from the Trainer (speedups wanted 1.0)',
         'trainer.accumulate_grad_batches=1 from the Trainer means off: the preset sets 4']
    """
    applied: dict[str, Any] = {}
    notes: list[tuple[str, bool, str]] = []
    kept: set[str] = set()
    for key, value in wanted.items():
        if FOLLOWS.get(key) in kept:
            # kept with the flag it follows: the user's clip value keeps its algorithm (stated, when it is the one
            # Lightning runs for it anyway)
            if given.get(key, EFFECTIVE.get(key)) == value:
                applied[key] = value
            kept.add(key)
            continue
        if key not in given:
            applied[key] = value
            continue
        mine = key in explicit if not isinstance(explicit, bool) else explicit
        use, note = decide_flag(key, given[key], value, source(key) if callable(source) else source, mine)
        if note is not None:
            notes.append((key, use, note))
        if use:
            applied[key] = value
        else:
            kept.add(key)
    return applied, notes


def current_flag(trainer: Any, key: str) -> Any:
    """The value of Trainer flag ``key`` on a live Trainer."""
    if key == "precision":
        return trainer.precision
    value = getattr(trainer, key, None)
    return getattr(value, "value", value)  # Lightning's GradClipAlgorithmType


def flags_set_on(trainer: Any, keys: Any) -> dict[str, Any]:
    """The flags of ``keys`` that the live ``trainer`` holds at another value than Lightning's default."""
    values = {k: current_flag(trainer, k) for k in keys}
    return {k: v for k, v in values.items() if v != LIGHTNING_DEFAULTS.get(k)}


def apply_flag(trainer: Any, key: str, value: Any) -> Optional[str]:
    """Set Trainer flag ``key`` to ``value`` on a Trainer that exists (before its fit loop starts, e.g. in a
    callback's ``setup``); the reason it cannot, or ``None`` when it was set.

    Lightning reads ``accumulate_grad_batches`` and the clipping flags from the Trainer at every step, and
    the precision plugin when the strategy sets up (after the callbacks' ``setup``): those can still change.
    The strategy, devices and nodes are fixed when the Trainer is built.
    """

    package = package_of(trainer).__name__
    if key in ("accumulate_grad_batches", "gradient_clip_val"):
        setattr(trainer, key, value)
        return None
    if key == "gradient_clip_algorithm":
        enum = importlib.import_module(f"{package}.utilities").GradClipAlgorithmType
        trainer.gradient_clip_algorithm = None if value is None else enum(str(value).lower())
        return None
    if key == "precision":
        strategy = trainer.strategy
        plain = is_lightning(strategy, "SingleDeviceStrategy", "DDPStrategy")  # the pack's DDP strategy is one
        if not plain or is_lightning(strategy, "DeepSpeedStrategy", "FSDPStrategy", "ModelParallelStrategy"):
            return f"the {type(strategy).__name__} builds its own precision plugin: pass Trainer(precision=...)"
        if type(strategy.precision_plugin).__name__ not in _PLAIN_PLUGINS:
            return f"the Trainer's own {type(strategy.precision_plugin).__name__} plugin is kept"
        plugins = importlib.import_module(f"{package}.plugins.precision")
        text = str(value)
        device = strategy.root_device.type
        if text in ("bf16-mixed", "16-mixed"):
            if text == "16-mixed" and device != "cuda":
                return "16-mixed needs a CUDA device"
            strategy.precision_plugin = plugins.MixedPrecision(precision=text, device=device)
        elif text in ("bf16-true", "16-true"):
            strategy.precision_plugin = plugins.HalfPrecision(text)
        elif text in ("64-true", "64"):
            strategy.precision_plugin = plugins.DoublePrecision()
        elif text in ("32-true", "32"):
            strategy.precision_plugin = plugins.Precision()
        else:
            return f"precision {text!r} is not one the pack sets on a built Trainer"
        return None
    return f"Lightning fixes trainer.{key} when the Trainer is built: pass Trainer({key}=...)"


def set_flags(
    trainer: Any, wanted: dict[str, Any], notes: list[tuple[str, bool, str]], restore: dict[str, Any]
) -> list[tuple[str, bool, str]]:
    """Set the Trainer flags a preset ``wanted`` on a built Trainer, by the one policy (:func:`merge_flags`): a flag
    the user gave wins, a follower keeps to the flag it follows, a flag Lightning fixes when the Trainer is built is
    named with what to pass instead. Each flag changed records its old value in ``restore``
    (:func:`take_back_flags` puts it back). Returns ``notes`` with the refused flags' lines turned off."""
    live = {k: v for k, v in wanted.items() if k in LIVE_FLAGS}
    given = flags_set_on(trainer, live)
    applied, flag_notes = merge_flags(live, given, "the Trainer")
    refused: dict[str, str] = {k: text for k, use, text in flag_notes if not use}
    notes.extend((k, True, text) for k, use, text in flag_notes if use)
    for key, value in applied.items():
        if current_flag(trainer, key) == value or FOLLOWS.get(key) in refused:
            continue  # nothing to change (a follower keeps to the Trainer's own value of the flag it follows)
        before = current_flag(trainer, key) if key != "precision" else trainer.strategy.precision_plugin
        why = apply_flag(trainer, key, value)
        if why is None:
            restore.setdefault(key, before)
        else:
            refused[key] = f"not applied: {why}"
    for key in wanted.keys() - live.keys():
        kind = lightning_class_name(wanted[key]) if key == "strategy" else ""
        if kind and is_lightning(trainer.strategy, kind):
            refused[key] = (
                f"the Trainer's own {type(trainer.strategy).__name__} runs; the preset's settings for it need"
                f" strategy=preset(...).trainer_kwargs(...)['strategy'] where the library takes Trainer arguments"
            )
            continue
        how = (
            "pass strategy=preset(...).trainer_kwargs(model=model)['strategy'] where the library takes Trainer"
            " arguments"
            if key == "strategy"
            else f"pass Trainer({key}=...)"
        )
        refused[key] = f"not applied: Lightning fixes trainer.{key} when the Trainer is built; {how}"
    return _flip(notes, refused)


def take_back_flags(trainer: Any, restore: dict[str, Any]) -> None:
    """Put back the flags :func:`set_flags` changed (``restore``: their old values), and forget them."""
    for key, value in restore.items():
        if key == "precision":
            trainer.strategy.precision_plugin = value
        else:
            apply_flag(trainer, key, value)
    restore.clear()


def _flip(notes: list[tuple[str, bool, str]], refused: dict[str, str]) -> list[tuple[str, bool, str]]:
    """The notes with each refused flag's lines turned off and its reason said, so the summary is true to the
    Trainer (a part whose Trainer flag did not apply did not act)."""
    if not refused:
        return notes
    out: list[tuple[str, bool, str]] = []
    said: set[str] = set()
    for name, active, reason in notes:
        key = name.split(" ")[0]
        flag = key if key in refused else _FLAG_OF_PART.get(key)
        if flag in refused and flag not in said:
            out.append((name, False, refused[flag]))
            said.add(flag)
        elif flag not in refused:
            out.append((name, active, reason))
    out.extend((key, False, why) for key, why in refused.items() if key not in said)
    return out


#: the summary's part names whose work is a Trainer flag
_FLAG_OF_PART: dict[str, Optional[str]] = {
    "grad_clip": "gradient_clip_val",
    "ddp": "strategy",
    "fsdp": "strategy",
    "effective_batch_size": "accumulate_grad_batches",
}
