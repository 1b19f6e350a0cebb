"""Zero code: ``LIGHTNING_SPEEDUPS=fast python train.py`` applies a preset to every Trainer a script builds.

Many Lightning users never write ``Trainer(...)``: a library builds it for them, and threading callbacks
and flags through it takes library-specific arguments, or is impossible. Every Lightning Trainer reads the
entry point groups ``lightning.pytorch.callbacks_factory`` and ``pytorch_lightning.callbacks_factory``
when it is constructed; the pack registers :func:`callbacks_factory` in both. With ``LIGHTNING_SPEEDUPS``
unset it returns nothing and imports nothing heavy: installing the pack never alters a Trainer it was not
asked to.

Set, the value names packaged presets composed with ``+`` (``fast+converge``, as bench writes them) or
a path to a YAML file with a ``speedups:`` section. It is checked when the Trainer is built: a bad value
stops the run there, before training, with one line that names ``LIGHTNING_SPEEDUPS``, the value and the
valid presets. The factory adds one callback, :class:`SpeedupsFromEnvironment`, which decides in
``setup``, once the model and the Trainer's device are known:

- the preset's callbacks are built for that model (as the CLI builds them) and placed in the Trainer right
  after it, so they take part in the same ``setup`` and every later hook;
- the Trainer-level settings the preset passes as Trainer arguments (precision, accumulation, clipping) are
  set on the Trainer there, before the strategy sets up and the fit loop starts; a value the Trainer holds
  that turns something on (a library's ``gradient_clip_val=0.5``) wins, one that means "off" does not
  block (:func:`~lightning_speedups.trainer.trainer_flags.merge_flags`); what cannot change on a built
  Trainer (its strategy) is named in the start-up summary with the reason;
- with the pack's CLI or the pack's callbacks already in the Trainer it adds nothing (said in the summary).

Example::

    LIGHTNING_SPEEDUPS=fast python train.py                   # every Trainer train.py builds
    LIGHTNING_SPEEDUPS=fast+converge python train.py
    LIGHTNING_SPEEDUPS=./my_speedups.yaml python train.py     # a YAML file with a speedups: section
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Optional

from lightning_speedups.errors import SettingError

if TYPE_CHECKING:  # the factory runs at every Trainer's construction: nothing heavy is imported while unset
    from lightning_speedups.presets import Preset

#: the environment variable that names the presets
ENV_VAR = "LIGHTNING_SPEEDUPS"
#: the word of a ``LIGHTNING_SPEEDUPS`` value that asks for the doctor, not a preset (``fast+doctor``: see
#: :mod:`lightning_speedups.doctor.script`, whose own entry point answers it)
DOCTOR_TOKEN = "doctor"
#: the doctor command's options for the process it watches (JSON)
DOCTOR_OPTIONS_VAR = "LIGHTNING_SPEEDUPS_DOCTOR"
#: the bench command's options for the process it times (JSON; see :mod:`lightning_speedups.bench.script_watch`)
BENCH_OPTIONS_VAR = "LIGHTNING_SPEEDUPS_BENCH"
#: set on a Trainer that the pack's CLI (or doctor, bench) built: its parts are there already
BUILT_BY_PACK = "_lightning_speedups_built"


def asks_for_doctor(value: Optional[str]) -> bool:
    """Whether a ``LIGHTNING_SPEEDUPS`` value names the doctor (``doctor``, ``fast+doctor``)."""
    return bool(value) and DOCTOR_TOKEN in [part.strip() for part in str(value).split("+")]


class EnvironmentSettingError(SettingError):
    """``LIGHTNING_SPEEDUPS`` holds something that is neither presets nor a preset file."""


def preset_from_environment(value: str) -> Preset:
    """The :class:`~lightning_speedups.presets.Preset` that a ``LIGHTNING_SPEEDUPS`` value names.

    Raises:
        EnvironmentSettingError: one line naming the variable, the value, what is wrong and the valid presets.
    """
    from lightning_speedups.presets import PresetError, list_presets, preset, resolve_config

    text = value.strip()
    names = [text] if os.path.isfile(text) else [part.strip() for part in text.split("+")]
    valid = (
        f"valid presets: {', '.join(list_presets())} (joined with +, e.g. fast+converge), or a path to a YAML file"
        " with a speedups: section"
    )
    if not text or any(not name for name in names):
        raise EnvironmentSettingError(f"{ENV_VAR}={value!r} names no preset; {valid}; or unset it")
    for name in names:
        try:
            resolve_config(name)
        except PresetError:
            raise EnvironmentSettingError(
                f"{ENV_VAR}={value!r}: {name!r} is neither a packaged preset nor a file; {valid}"
            ) from None
    try:
        return preset(*names)
    except PresetError as err:
        raise EnvironmentSettingError(f"{ENV_VAR}={value!r}: {err}") from None


def callbacks_factory() -> list[Any]:
    """Lightning's callback entry point (both packages): ``[]`` while ``LIGHTNING_SPEEDUPS`` is unset, else the
    callback that applies the presets it names. A bad value ends the program here, when the Trainer is built,
    with one line on stderr (exit code 2)."""
    value = os.environ.get(ENV_VAR)
    if value is None or not value.strip():  # unset, or set empty to switch it off
        return []
    presets = "+".join(part for part in value.split("+") if part.strip() != DOCTOR_TOKEN)
    if not presets.strip():  # the doctor alone: its own entry point watches the Trainer
        return []
    from lightning_speedups.messages import keep_rank_zero_logger

    # a pytorch_lightning library's Trainer: importing lightning.pytorch here must not repoint the rank-zero logger
    # that library may have silenced
    with keep_rank_zero_logger():
        try:
            chosen = preset_from_environment(presets)
        except EnvironmentSettingError as err:
            print(f"lightning_speedups: error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        return [_from_environment(chosen, presets)]


def _from_environment(chosen: Preset, value: str) -> Any:
    from lightning_speedups.callbacks.from_environment import SpeedupsFromEnvironment

    return SpeedupsFromEnvironment(
        chosen, source=f"{ENV_VAR}={value}", built_by_pack=BUILT_BY_PACK, rebuild=(preset_from_environment, value)
    )
