"""Lightning's callback entry point for the pack's watchers of a command it did not write (both packages, beside the
preset one): the doctor when ``LIGHTNING_SPEEDUPS`` names ``doctor`` (:mod:`lightning_speedups.doctor.script`), and
bench's timer when ``bench -- COMMAND`` runs it (:mod:`lightning_speedups.bench.script_watch`). It imports nothing
heavy while neither is asked for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lightning_speedups.environment import BENCH_OPTIONS_VAR, DOCTOR_OPTIONS_VAR, ENV_VAR, asks_for_doctor
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
    ``LIGHTNING_SPEEDUPS`` names ``doctor``, bench's timer for the Trainer ``bench -- COMMAND`` times; ``[]``
    otherwise."""
    timed: list[Any] = []
    if os.environ.get(BENCH_OPTIONS_VAR):  # bench times this command (with the doctor too: what its watch costs)
        from lightning_speedups.bench.script_watch import callbacks_factory as timer

        timed = timer()
    if not asks_for_doctor(os.environ.get(ENV_VAR)):
        return timed
    options = watch_options()
    _BUILT[0] += 1
    if options.get("out") is not None:
        Path(options["out"], "trainers").write_text(str(_BUILT[0]))
    if _BUILT[0] != options.get("trainer", 1):
        return timed
    from lightning_speedups.doctor.script import ScriptDoctor, WatchOptions

    return [*timed, ScriptDoctor(WatchOptions(**options), index=_BUILT[0])]
