"""Lightning's callback entry point for the doctor (both packages, beside the preset one): imports nothing heavy
unless ``LIGHTNING_SPEEDUPS`` names ``doctor`` (see :mod:`lightning_speedups.doctor.script`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lightning_speedups.environment import DOCTOR_OPTIONS_VAR, ENV_VAR, asks_for_doctor
from lightning_speedups.errors import SettingError

__all__ = ["callbacks_factory", "watch_options"]


def watch_options() -> dict[str, Any]:
    """What the doctor command asks the watched process (``{}``: ``LIGHTNING_SPEEDUPS=doctor`` on its own)."""
    text = os.environ.get(DOCTOR_OPTIONS_VAR)
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as err:
        raise SettingError(f"{DOCTOR_OPTIONS_VAR} is not what the doctor command writes ({err}); unset it.") from None
    if not isinstance(options, dict):
        raise SettingError(f"{DOCTOR_OPTIONS_VAR} is not what the doctor command writes; unset it.")
    return options


#: Trainers built in this process while the doctor was asked for
_BUILT = [0]


def callbacks_factory() -> list[Any]:
    """A :class:`~lightning_speedups.doctor.script.ScriptDoctor` for the Trainer the doctor watches when
    ``LIGHTNING_SPEEDUPS`` names ``doctor``; ``[]`` otherwise."""
    if not asks_for_doctor(os.environ.get(ENV_VAR)):
        return []
    options = watch_options()
    _BUILT[0] += 1
    if options.get("out") is not None:
        Path(options["out"], "trainers").write_text(str(_BUILT[0]))
    if _BUILT[0] != options.get("trainer", 1):
        return []
    from lightning_speedups.doctor.script import ScriptDoctor, WatchOptions

    return [ScriptDoctor(WatchOptions(**options), index=_BUILT[0])]
