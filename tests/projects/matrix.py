"""Run a project with a packaged preset: from Python (``Trainer(**preset(name).trainer_kwargs(), ...)``)
and through the CLI (``python -m lightning_speedups fit --config NAME --config user.yaml``)."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import yaml

from projects.registry import PROJECTS, Project


def presets() -> list[str]:
    from lightning_speedups.presets import list_presets

    return list(list_presets())


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No Lightning info lines or warnings on the console (the results are checked, not read)."""
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "lightning")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def statuses(trainer: Any) -> dict[str, list[str]]:
    """``{"active": [...], "skipped": [...]}``: each pack part's line and each build note."""
    from lightning_speedups.callbacks import SpeedupCallback, SpeedupsSummary

    out: dict[str, list[str]] = {"active": [], "skipped": [], "silent": []}
    for cb in trainer.callbacks:
        if isinstance(cb, SpeedupsSummary):
            for name, active, reason in cb.notes:
                out["active" if active else "skipped"].append(f"{name}: {reason}")
        elif isinstance(cb, SpeedupCallback):
            if cb.status is None:
                out["silent"].append(type(cb).__name__)
            else:
                out[cb.status[0]].append(f"{cb.part}: {cb.status[1]}")
    return out


def result(model: Any, trainer: Any) -> dict[str, Any]:
    loss = getattr(model, "last_loss", None)
    value = float(loss) if loss is not None else math.nan
    return {"loss": value, "finite": math.isfinite(value), **statuses(trainer)}


def fit_python(project: Project, name: str) -> dict[str, Any]:
    """``Trainer(**preset(name).trainer_kwargs(), callbacks=preset(name).callbacks())`` on the project."""
    import lightning.pytorch as pl

    from lightning_speedups import preset

    pl.seed_everything(0, verbose=False)
    model, data = project.build()
    kwargs = {**preset(name).trainer_kwargs(), **project.trainer_settings()}
    trainer = pl.Trainer(**kwargs, callbacks=preset(name).callbacks() + project.user_callbacks())
    with quiet():
        trainer.fit(model, datamodule=data)
    return result(model, trainer)


def write_user_yaml(project: Project, folder: str) -> str:
    path = os.path.join(folder, f"{project.name}.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(project.user_yaml(), fh, sort_keys=False)
    return path


def fit_cli(name: str, user_yaml: str) -> dict[str, Any]:
    """What ``python -m lightning_speedups fit --config NAME --config user.yaml`` runs, in this process."""
    import lightning.pytorch as pl

    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    pl.seed_everything(0, verbose=False)
    argv = resolve_config_args(["fit", "--config", name, "--config", user_yaml])
    saved = sys.argv
    sys.argv = ["lightning_speedups", *argv]  # as lightning_speedups.cli.main does
    try:
        with quiet(), contextlib.redirect_stdout(io.StringIO()):
            cli = SpeedupsCLI(args=None, save_config_callback=None)
    finally:
        sys.argv = saved
    return result(cli.model, cli.trainer)


__all__ = ["PROJECTS", "fit_cli", "fit_python", "presets", "write_user_yaml"]
