"""Find, list, load and compose the packaged presets (``lightning_speedups/configs/*.yaml``).

A preset is a YAML file that LightningCLI reads: plain Trainer flags under ``trainer:`` and the
pack's parts under the typed ``speedups:`` section (see :mod:`lightning_speedups.config`).

Example::

    from lightning_speedups import preset
    p = preset("fast")                        # or preset("fast", "memory"), or a path to a YAML
    trainer = Trainer(**p.trainer_kwargs(), callbacks=p.callbacks(), max_epochs=10)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import yaml

from lightning_speedups.errors import SettingError

if TYPE_CHECKING:  # finding and listing presets needs neither torch nor Lightning (`presets` answers at once)
    from lightning.pytorch.callbacks import Callback

    from lightning_speedups.config import Speedups

PRESET_SUFFIXES = (".yaml", ".yml")


class PresetError(SettingError):
    """A preset name or file that cannot be used; the message says what exists and what to do."""


def preset_dir() -> Path:
    """The folder of the packaged presets."""
    return Path(str(resources.files("lightning_speedups") / "configs"))


@lru_cache(maxsize=1)
def list_presets() -> dict[str, str]:
    """``{name: description}`` of every packaged preset: the first sentence of its header comment (which may
    run over several comment lines)."""
    out: dict[str, str] = {}
    for path in sorted(preset_dir().glob("*.yaml")):
        words: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            text = line.lstrip("#").strip() if line.startswith("#") else None
            if not text:  # the paragraph ends at a blank comment line or the first line of YAML
                if words:
                    break
                if text is None:
                    break
                continue
            words.append(text)
            if text.endswith("."):
                break
        paragraph = " ".join(words)
        end = paragraph.find(". ")
        out[path.stem] = paragraph if end < 0 else paragraph[: end + 1]
    return out


def _preset_name(value: str) -> str:
    name = os.path.basename(value)
    for suffix in PRESET_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_config_file(path: str) -> None:
    """Refuse a config file that is not a YAML mapping, naming the file (and the line of a syntax error).

    Raises:
        PresetError: unreadable, a YAML syntax error, empty, or not a mapping.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as err:
        raise PresetError(f"config {path}: cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise PresetError(f"config {path}: not a text file (a YAML config is UTF-8 text)") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise PresetError(f"config {path}{where}: YAML syntax error: {problem}; fix the file there") from None
    if data is None:
        raise PresetError(
            f"config {path} is empty; fix: write a YAML mapping with any of model:, data:, trainer:, speedups:"
            " (or leave out this --config)"
        )
    if not isinstance(data, dict):
        raise PresetError(
            f"config {path} holds a {type(data).__name__}, not a mapping; fix: write a YAML mapping with any of"
            " model:, data:, trainer:, speedups:"
        )


def resolve_config(value: Union[str, os.PathLike]) -> str:
    """Turn a ``--config`` value into a path: a local file wins, else the packaged preset of that name.

    Raises:
        PresetError: neither a file nor a packaged preset; the message lists the presets.
    """
    text = os.fspath(value)
    if os.path.isfile(text):
        check_config_file(text)
        return text
    if os.sep not in text:
        candidate = preset_dir() / f"{_preset_name(text)}.yaml"
        if candidate.is_file():
            return str(candidate)
    raise PresetError(
        f"config {text!r} is neither a file nor a packaged preset; presets: {', '.join(list_presets())}"
        " (python -m lightning_speedups presets describes them)."
    )


@lru_cache(maxsize=1)
def _speedups_parser():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(_speedups_class(), "speedups", fail_untyped=True)
    return parser


@lru_cache(maxsize=1)
def _trainer_parser():
    from jsonargparse import ArgumentParser
    from lightning.pytorch import Trainer

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Trainer, "trainer", fail_untyped=False)
    return parser


def _parse_over(parser: Any, key: str, sections: list[tuple[str, dict[str, Any]]]) -> Any:
    """The ``key:`` sections of several configs parsed as ``--config A --config B`` parses them: each by jsonargparse
    over the ones before it (a later value wins; a class given twice keeps the first one's arguments the second
    does not set), the ``fit`` command's own rule; ``None`` without sections.

    Raises:
        PresetError: an unknown key or a bad value; the message names the key and the config.
    """
    cfg = None
    for source, section in sections:
        try:
            cfg = parser.parse_object({key: section}, cfg_base=cfg)
        except Exception as err:  # jsonargparse raises its own ArgumentError
            raise PresetError(f"{source}: {first_line(err)}") from None
    return cfg


def compose_trainer(sections: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The ``trainer:`` sections of several configs composed by the same rule as their ``speedups:`` sections (and
    as ``fit --config A --config B``): the keys any of them sets, with the value the last one gives, checked
    against ``Trainer``'s signature (an unknown key or a bad value names the config)."""
    given = [key for _, section in sections for key in section]
    if not given:
        return {}
    cfg = _parse_over(_trainer_parser(), "trainer", [(s, sec) for s, sec in sections if sec])
    out: dict[str, Any] = {}
    for key in dict.fromkeys(given):
        value = cfg.trainer[key]
        out[key] = value.as_dict() if hasattr(value, "as_dict") else value
    return out


def _speedups_class() -> type[Speedups]:
    from lightning_speedups.config import Speedups

    return Speedups


def parse_speedups(section: Optional[dict[str, Any]], source: str = "<dict>") -> Speedups:
    """Validate a ``speedups:`` mapping and return the :class:`Speedups` it describes.

    Raises:
        PresetError: an unknown key or a bad value; the message names the key and the source.
    """
    parser = _speedups_parser()
    try:
        cfg = parser.parse_object({"speedups": section or {}})
        return parser.instantiate_classes(cfg).speedups
    except Exception as err:  # jsonargparse raises its own ArgumentError
        raise PresetError(f"{source}: {first_line(err)}") from None


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:3]) if lines else type(err).__name__


@dataclass
class Preset:
    """One or more presets composed: the Trainer flags and the ``speedups:`` section.

    Attributes:
        names: what was composed, in order.
        trainer: plain Trainer flags from the YAML ``trainer:`` sections (composed as their ``speedups:`` sections
            are, and as ``fit --config A --config B`` composes them).
        speedups: the merged ``speedups:`` section.
    """

    names: list[str]
    trainer: dict[str, Any] = field(default_factory=dict)
    speedups: Speedups = field(default_factory=lambda: _speedups_class()())

    def trainer_kwargs(
        self, accelerator: Optional[str] = None, model: Any = None, lightning: Optional[str] = None, **overrides: Any
    ) -> dict[str, Any]:
        """Arguments for ``Trainer(...)``: the presets' flags and what the ``speedups:`` section resolves to.

        A flag set under a YAML ``trainer:`` section or in ``overrides`` wins over what the
        ``speedups:`` section would pick, and the start-up summary says so (as in the CLI).

        Args:
            accelerator: the accelerator the Trainer will use (default: the preset's, else ``"auto"``).
            model: the LightningModule to fit, when known: a setting Lightning refuses for it (gradient
                clipping under manual optimization) is skipped here, with the fix in the summary.
                Without it, such settings are applied (or skipped) by a callback in ``setup``.
            lightning: the Trainer's Lightning package when no ``model`` is given (``"pytorch_lightning"`` for the
                older one): a strategy (``ddp``, ``fsdp``) is built on that package's classes.
            overrides: Trainer arguments that win over the preset's.
        """
        from lightning_speedups.trainer.trainer_flags import merge_flags

        accel = overrides.get("accelerator", accelerator or self.trainer.get("accelerator", "auto"))
        kwargs, notes = self.speedups.trainer_kwargs(accelerator=accel, model=model, lightning=lightning)
        if accelerator is not None:
            overrides.setdefault("accelerator", accelerator)
        user = {**{k: v for k, v in self.trainer.items() if k != "callbacks"}, **overrides}
        # what the caller passes, or a preset's trainer: section sets, is chosen: it wins, even a value that
        # means "off" (a flag only a Trainer someone else built holds is judged by merge_flags' off rule)
        applied, flag_notes = merge_flags(
            kwargs, user, lambda key: "the call" if key in overrides else "the preset's trainer: section", explicit=True
        )
        notes.extend(flag_notes)
        self._notes = notes
        self._explicit = set(user)
        self._model = model
        return {**kwargs, **user, **applied}

    def callbacks(self, model: Any = None) -> list[Callback]:
        """Fresh callback instances for the ``speedups:`` section (call once per Trainer).

        Args:
            model: the LightningModule to fit, when known (default: the one given to
                :meth:`trainer_kwargs`, if any).
        """
        accelerator = self.trainer.get("accelerator", "auto")
        model = model if model is not None else getattr(self, "_model", None)
        notes = getattr(self, "_notes", None)
        if notes is None:
            _, notes = self.speedups.trainer_kwargs(accelerator=accelerator, model=model)
        out = self.speedups.callbacks(notes, accelerator=accelerator, model=model)
        for cb in out:  # the flags the caller passed to trainer_kwargs are theirs, even a value meaning "off"
            if hasattr(cb, "explicit"):
                cb.explicit = set(getattr(self, "_explicit", ()))
        return out

    def parts(self) -> set[str]:
        """The parts turned on (see :meth:`Speedups.active_parts`)."""
        return self.speedups.active_parts()


def load_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except yaml.YAMLError as err:
        raise PresetError(f"{path}: not valid YAML: {first_line(err)}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{path}: a preset must be a mapping with `trainer:` and/or `speedups:` sections.")
    return data


def preset(*names: Union[str, os.PathLike]) -> Preset:
    """Load and compose presets (packaged names or YAML paths), later ones winning key by key.

    Example::

        p = preset("fast", "memory")
        trainer = Trainer(**p.trainer_kwargs(), callbacks=p.callbacks())
    """
    if not names:
        raise PresetError(f"preset() needs at least one name; presets: {', '.join(list_presets())}.")
    trainers: list[tuple[str, dict[str, Any]]] = []
    sections: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        path = resolve_config(name)
        data = load_yaml(path)
        trainers.append((path, _section(data, "trainer", path)))
        sections.append((path, _section(data, "speedups", path)))
    return Preset(
        names=[os.fspath(n) for n in names], trainer=compose_trainer(trainers), speedups=compose_speedups(sections)
    )


def _section(data: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    section = data.get(key) or {}
    if not isinstance(section, dict):
        raise PresetError(f"{path}: `{key}:` must be a mapping of settings, got {type(section).__name__}.")
    return section


#: parsed ``speedups:`` namespaces by their sections (each use instantiates a clone: fresh objects every time)
_PARSED: dict[str, Any] = {}


def compose_speedups(sections: list[tuple[str, dict[str, Any]]]) -> Speedups:
    """The ``speedups:`` sections of several configs composed as the command line composes ``--config A
    --config B``: each parsed by jsonargparse over the ones before it (one merge rule for both).

    Raises:
        PresetError: an unknown key or a bad value; the message names the key and the config.
    """
    parser = _speedups_parser()
    # the same sections parse to the same namespace: a script that builds a Trainer per run (a library's fit, a
    # sweep) under LIGHTNING_SPEEDUPS parses its preset once (12 ms each time otherwise)
    key = repr([(source, section) for source, section in sections])
    cfg = _PARSED.get(key)
    if cfg is None:
        cfg = _parse_over(parser, "speedups", sections)
        if cfg is None:
            return _speedups_class()()
        if len(_PARSED) >= 32:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = cfg
    try:
        return parser.instantiate_classes(cfg.clone()).speedups
    except Exception as err:  # a value its record refuses (SettingError), named with the configs
        raise PresetError(f"{' + '.join(s for s, _ in sections)}: {first_line(err)}") from None
