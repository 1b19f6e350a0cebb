"""The session layer: build a model, data and Trainer from a config exactly as ``fit`` would.

It sits below ``doctor``, ``bench`` and the CLI (which only dispatches commands): all three build a
user's setup through :func:`build`, and :class:`SpeedupsCLI` is the LightningCLI subclass that reads
the typed ``speedups:`` section, resolves presets by name and trains the embedded default.

Example::

    from lightning_speedups.session import build

    cli = build(["--config", "fast"], trainer_overrides={"max_steps": 2})
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from lightning_speedups.arguments import class_path_of, config_files, explain_parse_error, same_class
from lightning_speedups.callbacks.summary import without_theirs
from lightning_speedups.commands import TRAINER_COMMANDS
from lightning_speedups.config import Speedups
from lightning_speedups.environment import BUILT_BY_PACK
from lightning_speedups.errors import BadInput
from lightning_speedups.presets import PresetError, resolve_config
from lightning_speedups.trainer.namespace import NAMESPACES, for_namespace, namespace_of
from lightning_speedups.trainer.trainer_flags import merge_flags

DEFAULT_MODEL = "lightning_speedups.demo.digits.DigitsCNN"
DEFAULT_DATA = "lightning_speedups.demo.digits.DigitsDataModule"
DEFAULT_DEMO_EPOCHS = 5


class UsageError(BadInput):
    """Bad input from the user: printed as one line, exit code 2."""


def resolve_config_args(argv: Sequence[str]) -> list[str]:
    """Replace every ``--config NAME`` / ``-c NAME`` / ``--config=NAME`` by a file path.

    A local file wins; a bare name that is not a file resolves to the packaged preset of that name.

    Raises:
        UsageError: a config that is neither a file nor a packaged preset.
    """
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--config", "-c") and i + 1 < len(args):
            out += [arg, _resolve(args[i + 1])]
            i += 2
            continue
        if arg.startswith("--config="):
            out.append("--config=" + _resolve(arg.split("=", 1)[1]))
        else:
            out.append(arg)
        i += 1
    return out


def _resolve(value: str) -> str:
    try:
        return resolve_config(value)
    except PresetError as err:
        raise UsageError(str(err)) from None


def _trainer_defaults() -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(Trainer.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _sets_model(argv: Sequence[str]) -> bool:
    """Whether the arguments or a config name the model's class (``--model.init_args.x=1`` alone does not)."""
    return class_path_of(argv, config_files(argv), "model") is not None


def with_default_model(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--model=<the embedded default>`` added when nothing sets a model.

    Not a parser default: jsonargparse carries a default class's ``init_args`` over to a user's class
    that takes arguments of the same names, so a user's ``UNet(channels=3, lr=1e-3)`` would silently
    train with the demo's ``channels=32, lr=0.003``.
    """
    out = list(argv)
    if _sets_model(out) or any(a in ("-h", "--help") for a in out):
        return out
    data = class_path_of(out, config_files(out), "data")
    if data and not same_class(data, DEFAULT_DATA):
        raise UsageError(
            f"the config sets data ({data}) but no model: the embedded default model trains only on its own"
            " digits. Fix: add model: {class_path: your_package.YourModel}, or leave out data: to train the demo"
        )
    at = 1 if out and out[0] in TRAINER_COMMANDS else 0
    out.insert(at, f"--model={DEFAULT_MODEL}")
    return out


if TYPE_CHECKING:  # the mixins are typed as the lightning.pytorch classes they sit above
    _ParserBase = LightningArgumentParser
    _SaveBase = SaveConfigCallback
    _CLIBase = LightningCLI
else:
    _ParserBase = _SaveBase = _CLIBase = object


class _SpeedupsParser(_ParserBase):
    """The code of :class:`SpeedupsArgumentParser`, above either Lightning package's parser."""

    def error(self, message: str, ex: Optional[Exception] = None):  # type: ignore[override]
        # JSONARGPARSE_DEBUG (jsonargparse's documented switch): its own full message and traceback
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        text = explain_parse_error(message, sys.argv[1:], parser)
        sys.stderr.write(f"error: {text}\n")
        command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in TRAINER_COMMANDS else "fit"
        sys.stderr.write(f"(all options: python -m lightning_speedups {command} --help)\n")
        self.exit(2)


class SpeedupsArgumentParser(_SpeedupsParser, LightningArgumentParser):
    """LightningArgumentParser whose errors are a few lines naming the key, its file and the fix."""


class _KeepingSave(_SaveBase):
    """The code of :class:`KeepingSaveConfig`, above either Lightning package's ``SaveConfigCallback``.

    Lightning's SaveConfigCallback that never refuses a second run in the same folder and never
    overwrites the first run's config.

    Without a logger every run saves ``config.yaml`` into ``trainer.default_root_dir``; Lightning's
    callback then refuses the next run there (a resume with ``--ckpt_path`` is the commonest one). Here
    a taken name makes the run save beside it (``config-2.yaml``, ``config-3.yaml``, ...), said in one
    line; a run that fails before its first optimizer step removes the file it wrote, so nothing of it
    is left to block or confuse the next one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._written: Optional[str] = None

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if self.already_saved or not self.save_to_log_dir or self.overwrite:
            return super().setup(trainer, pl_module, stage)
        log_dir = trainer.log_dir
        assert log_dir is not None
        name = self.config_filename
        if trainer.is_global_zero:
            stem, dot, ext = name.rpartition(".")
            stem, ext = (stem, dot + ext) if dot else (name, "")
            n = 1
            while os.path.exists(os.path.join(log_dir, name)):
                n += 1
                name = f"{stem}-{n}{ext}"
        name = trainer.strategy.broadcast(name)
        if name != self.config_filename:
            from lightning.pytorch.utilities.rank_zero import rank_zero_info

            rank_zero_info(
                f"{self.config_filename} in {log_dir} is an earlier run's saved config: kept; this run's is {name}"
            )
        self.config_filename = name
        self._written = os.path.join(log_dir, name)
        super().setup(trainer, pl_module, stage)

    def on_exception(self, trainer: Trainer, pl_module: Any, exception: BaseException) -> None:
        written, self._written = self._written, None
        if written and trainer.is_global_zero and trainer.global_step == 0 and os.path.isfile(written):
            os.remove(written)  # the run never trained: its config describes nothing to keep


class KeepingSaveConfig(_KeepingSave, SaveConfigCallback):
    """Lightning's SaveConfigCallback that never refuses a second run in the same folder and never
    overwrites the first run's config (see :class:`_KeepingSave`)."""


class _SpeedupsCLI(_CLIBase):
    """The code of :class:`SpeedupsCLI` (what it does is said there), above either Lightning package's
    ``LightningCLI``."""

    def __init__(self, args: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        ns = namespace_of(self)
        kwargs.setdefault("parser_class", for_namespace(SpeedupsArgumentParser, ns))
        kwargs.setdefault("save_config_callback", for_namespace(KeepingSaveConfig, ns))
        saved = list(sys.argv)
        if args is None:
            # LightningCLI reads sys.argv (and its DDP launcher re-runs it while the fit runs): the default model
            # goes there for as long as the CLI runs, and the caller's argv is put back after
            sys.argv[1:] = with_default_model(sys.argv[1:])
            argv = None
        else:
            argv = with_default_model(list(args))
        try:
            super().__init__(model_class=None, datamodule_class=None, args=argv, **kwargs)
        finally:
            sys.argv[:] = saved

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_class_arguments(Speedups, "speedups", fail_untyped=True)

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        model = cfg.get("model")
        model_path = model.get("class_path") if model is not None else None
        if model_path is not None and same_class(model_path, DEFAULT_MODEL):
            if cfg.get("data") is None:
                from jsonargparse import Namespace

                cfg["data"] = Namespace(class_path=DEFAULT_DATA, init_args=Namespace())
            trainer = cfg["trainer"]
            if trainer.get("max_epochs") is None and trainer.get("max_steps", -1) == -1:
                trainer["max_epochs"] = DEFAULT_DEMO_EPOCHS

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """LightningCLI's public hook for building the Trainer: the ``speedups:`` section's flags and parts are added
        to the ``trainer:`` section's (a flag the config sets is the user's choice and wins, a part the user already
        lists in ``trainer.callbacks`` is theirs)."""
        cfg = self.config_init[self.subcommand] if self.subcommand else self.config_init
        speedups: Speedups = cfg.get("speedups") or Speedups()
        config = {**(cfg.get("trainer") or {}), **kwargs}
        accelerator = config.get("accelerator", "auto")
        # the model exists already (LightningCLI instantiates it first): what Lightning would refuse
        # for it (clipping under manual optimization) is skipped here, before the Trainer is built
        model = getattr(self, "model", None)
        flags, notes = speedups.trainer_kwargs(accelerator=accelerator, model=model)
        defaults = _trainer_defaults()
        # a flag the config leaves at Lightning's default is not set; one the user's config sets is their choice
        # and wins (merge_flags: the same rule as preset(...).trainer_kwargs from Python)
        given = {k: config[k] for k in flags if k in config and config[k] != defaults.get(k)}
        applied, flag_notes = merge_flags(flags, given, "the config", explicit=True)
        notes.extend(flag_notes)
        config.update(applied)
        pack = speedups.callbacks(notes, accelerator=config.get("accelerator", "auto"), model=model)
        listed = config.get("callbacks") or []
        listed = list(listed) if isinstance(listed, list) else [listed]
        pack = without_theirs(pack, listed, "trainer.callbacks")
        trainer = super().instantiate_trainer(**{**kwargs, **applied, "callbacks": [*listed, *pack]})
        setattr(trainer, BUILT_BY_PACK, True)  # LIGHTNING_SPEEDUPS, if set, adds nothing to it
        return trainer

    @staticmethod
    def configure_optimizers(lightning_module: Any, optimizer: Any, lr_scheduler: Any = None) -> Any:
        import torch

        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, (torch.optim.lr_scheduler.OneCycleLR, torch.optim.lr_scheduler.CyclicLR)):
            # T01: Lightning steps a plain scheduler once per epoch; these are per-step schedules.
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "interval": "step"}}
        return LightningCLI.configure_optimizers(lightning_module, optimizer, lr_scheduler)


class SpeedupsCLI(_SpeedupsCLI, LightningCLI):
    """LightningCLI with the typed ``speedups:`` section and the embedded default model and data.

    - ``speedups:`` is turned into Trainer arguments and callbacks when the Trainer is built; a value
      the config sets explicitly under ``trainer:`` wins over what a preset would pick.
    - With no model in the config, :class:`~lightning_speedups.demo.DigitsCNN` trains on the digits
      that scikit-learn ships (:class:`~lightning_speedups.demo.DigitsDataModule`), for
      ``DEFAULT_DEMO_EPOCHS`` epochs unless the config says otherwise.
    - A one-cycle / cyclic ``--lr_scheduler`` is stepped per optimizer step, not per epoch.
    - A config whose model is a ``pytorch_lightning.LightningModule`` runs on that package's LightningCLI and
      Trainer (the same class built on it: Lightning refuses a model of one package in the other's Trainer).
    """

    def __new__(cls, args: Optional[Sequence[str]] = None, **kwargs: Any) -> Any:
        ns = model_namespace(list(args) if args is not None else sys.argv[1:])
        if cls is not SpeedupsCLI or ns == NAMESPACES[0]:
            return super().__new__(cls)
        twin = for_namespace(SpeedupsCLI, ns)
        cli: Any = object.__new__(twin)
        cli.__init__(args, **kwargs)  # not an instance of cls: Python does not call __init__ for it
        return cli


def model_namespace(argv: Sequence[str]) -> str:
    """The Lightning package of the model class the arguments or configs name (``lightning.pytorch`` when
    none is named or it does not import: the CLI then reports that as usual)."""

    files = []
    for value in config_files(argv):
        try:
            files.append(resolve_config(value))
        except PresetError:  # the CLI reports it
            continue
    class_path = class_path_of(argv, files, "model")
    if not class_path or "." not in class_path:
        return NAMESPACES[0]
    module_name, _, name = class_path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), name, None)
    except Exception:  # swallowed on purpose: the user's module may raise anything on import; the
        # CLI imports it again and reports that failure with its own message
        return NAMESPACES[0]
    return namespace_of(obj) or NAMESPACES[0] if inspect.isclass(obj) else NAMESPACES[0]


def _arg_value(value: Any) -> str:
    """A command-line value for ``value``: strings as they are (``off`` stays ``off``), the rest as YAML."""
    import yaml

    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def build(
    args: Sequence[str] = (),
    callbacks: Sequence[Callback] = (),
    trainer_overrides: Optional[dict[str, Any]] = None,
    speedups_overrides: Optional[dict[str, Any]] = None,
) -> SpeedupsCLI:
    """Build the model, data and Trainer of a config exactly as ``fit`` would, without running anything.

    Used by ``doctor`` and ``bench``. ``args`` are the CLI arguments after the subcommand (``--config``
    values may be preset names); ``callbacks`` are added to the Trainer's; the overrides are dotted
    ``trainer.*`` / ``speedups.*`` keys that win over every config.

    Returns:
        The :class:`SpeedupsCLI`, with ``.model``, ``.datamodule`` and ``.trainer`` instantiated.

    Raises:
        UsageError: an unknown preset.
        SystemExit: a config that does not parse (the message was printed).
    """
    argv = resolve_config_args(list(args))
    for prefix, overrides in (("trainer", trainer_overrides), ("speedups", speedups_overrides)):
        for key, value in (overrides or {}).items():
            argv.append(f"--{prefix}.{key}={_arg_value(value)}")
    saved = sys.argv
    sys.argv = [saved[0] if saved else "lightning_speedups", *argv]
    try:
        # no SaveConfigCallback: doctor and bench runs are not results to keep, and must not leave or
        # trip over a config.yaml in the user's working directory
        return SpeedupsCLI(
            run=False,
            save_config_callback=None,
            trainer_defaults={"callbacks": list(callbacks)} if callbacks else None,
        )
    finally:
        sys.argv = saved


__all__ = ["KeepingSaveConfig", "SpeedupsCLI", "UsageError", "build", "explain_parse_error", "resolve_config_args"]
