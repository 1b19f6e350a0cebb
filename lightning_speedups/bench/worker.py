"""One bench run: build one variant of the user's setup, train ``warmup + steps`` batches, report.

Runs in its own process, so global state (cuDNN flags, compiled caches, thread pools, allocator
caches) cannot leak from one variant into the next. Two ways to start it:

* ``python -m lightning_speedups.bench.worker SPEC.json RESULT.json`` (a fresh interpreter), or
* :func:`child_main` as the target of a process forked from a server that has only imported torch
  and Lightning (the default: saves the interpreter start on every run).

The spec is a JSON object: ``args`` (CLI arguments as for ``fit``), ``speedups_overrides``,
``trainer_overrides``, ``warmup``, ``steps``, ``seed``, ``memory_step``, ``sys_path``, ``cwd``,
``env``. The result is a JSON object with ``status`` (``"ok"`` or ``"failed"``), ``reason`` when it
failed, and the figures of :meth:`~lightning_speedups.bench.measure.BenchProbe.results`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, Optional

from lightning_speedups.bench.args import override_args
from lightning_speedups.callbacks import AutoProbe, LRSchedule, SpeedupCallback
from lightning_speedups.trainer.attributes import set_at_init

__all__ = ["child_main", "main", "parts_of", "run_variant"]


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {line}"[:300] if line else type(err).__name__


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, MemoryError):
        return True
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    text = str(err).lower()
    return "out of memory" in text or "can't allocate memory" in text


def parts_of(trainer: Any) -> list[list[str]]:
    """``[part, tip, state, reason]`` of every part of the pack on the trainer (its callbacks and its summary)."""
    out = []
    for cb in trainer.callbacks:
        if isinstance(cb, SpeedupCallback) and cb.status is not None:
            out.append([cb.part, cb.tip, cb.status[0], cb.status[1]])
        notes = getattr(cb, "notes", None)
        if type(cb).__name__ == "SpeedupsSummary" and notes:
            out.extend([[name, "", "active" if active else "skipped", reason] for name, active, reason in notes])
    return out


def range_peaks(trainer: Any) -> Optional[list[float]]:
    """The peak learning rates (one per parameter group) that a learning-rate range test set for the schedule of this
    run (``lr_schedule.max_lr: auto``), as the schedule started from them; ``None`` where no range test chose one."""
    for cb in trainer.callbacks:
        if isinstance(cb, LRSchedule) and cb.max_lr == "auto" and cb.range_pick is not None and cb.start_peaks:
            return [float(p) for p in cb.start_peaks]
    return None


#: optimizer steps a throughput run may take per batch it times before max_steps would end it first
STEP_MARGIN = 8


def _speedups_dict(cli: Any) -> Any:
    import dataclasses

    try:
        value = cli._get(cli.config_init, "speedups")
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else None
    except (AttributeError, KeyError, TypeError):  # a config without a speedups section
        return None


def run_variant(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Build and train one variant as the spec says; never raises (failures are in the result)."""
    t0 = time.perf_counter()
    result: dict[str, Any] = {"status": "failed", "reason": None, "pid": os.getpid()}
    stage = "import"
    try:
        import lightning.pytorch as pl
        import torch

        from lightning_speedups.bench.measure import BenchProbe
        from lightning_speedups.bench.target import Target, TargetProbe
        from lightning_speedups.session import build

        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))  # the bench's own process: asked with --threads
        result["torch_threads"] = torch.get_num_threads()
        stage = "build"
        try:
            pl.seed_everything(int(spec.get("seed", 0)), workers=True, verbose=False)
        except TypeError:  # Lightning < 2.3 has no `verbose`
            pl.seed_everything(int(spec.get("seed", 0)), workers=True)
        target = Target(**spec["target"]) if spec.get("target") else None
        probe: Any
        if target is not None:
            plan = (spec.get("speedups_overrides") or {}).get("lr_schedule.plan")
            probe = TargetProbe(
                target,
                float(spec.get("target_max_time") or math.inf),
                annealed_step=int(plan) if isinstance(plan, int) and not isinstance(plan, bool) else None,
            )
        else:
            probe = BenchProbe(int(spec["warmup"]), int(spec["steps"]), memory_step=bool(spec.get("memory_step", True)))
        kind = type(probe)
        cli = _build_variant(build, spec, probe, result)
        if cli is None:
            return result
        trainer = cli.trainer
        probe = next(cb for cb in set_at_init(trainer).callbacks if isinstance(cb, kind))
        if target is None:
            _leave_the_end_to_the_probe(trainer)
        result["build_s"] = time.perf_counter() - t0
        result["speedups"] = _speedups_dict(cli)
        result["precision"] = str(getattr(trainer, "precision", ""))
        result["accelerator"] = type(trainer.accelerator).__name__
        stage = "fit"
        probe.t_fit = time.perf_counter()
        trainer.fit(cli.model, datamodule=cli.datamodule)
        return _verdict(result, spec, probe, target, trainer)
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt):
            raise
        why = _first_line(err)
        result["reason"] = f"out of memory ({why})" if _is_oom(err) else f"{stage} failed: {why}"
        result["traceback"] = traceback.format_exc(limit=20)
        try:
            result["parts"] = parts_of(cli.trainer)  # cli is unbound when the build failed: a NameError, swallowed
        except Exception:  # swallowed on purpose: the run failed and says why above; its parts are extra
            pass
    finally:
        result["run_s"] = time.perf_counter() - t0
    return result


def _build_variant(build: Callable[..., Any], spec: Mapping[str, Any], probe: Any, result: dict[str, Any]) -> Any:
    """The variant's setup built with ``probe`` attached; ``None`` (the reason in ``result``) when the config exits.

    A config with its own ModelCheckpoint refuses the spec's ``enable_checkpointing``: built again without it.
    """
    trainer_overrides = dict(spec.get("trainer_overrides") or {})
    speedups_args = override_args("speedups", spec.get("speedups_overrides") or {})

    def argv() -> list[str]:
        return list(spec.get("args") or []) + speedups_args + override_args("trainer", trainer_overrides)

    try:
        return build(argv(), callbacks=[probe])
    except SystemExit as exc:
        result["reason"] = f"the config does not build (exit {exc.code}; see the log)"
        return None
    except Exception as err:
        if "enable_checkpointing" in str(err) and "enable_checkpointing" in trainer_overrides:
            trainer_overrides.pop("enable_checkpointing")  # the config has its own ModelCheckpoint
            return build(argv(), callbacks=[probe])
        raise


def _leave_the_end_to_the_probe(trainer: Any) -> None:
    """A throughput run ends when its probe has timed its batches, not at the config's plan."""
    # the probe stops the run after its batches; max_steps counts optimizer steps (two a batch for
    # a GAN stepping two optimizers in manual optimization), so it must not end the run first. It
    # stays finite: a schedule the user's config sets (speedups.lr_schedule) plans over it
    trainer.fit_loop.epoch_loop.max_steps = max(trainer.max_steps, 1) * STEP_MARGIN
    # that short max_steps is bench's, not the user's plan: the start-up probe of auto settings
    # runs whatever the plan (its cost lands in the warm-up figures), so the timed steps are the
    # steady state a real fit runs after it
    for cb in set_at_init(trainer).callbacks:
        if isinstance(cb, AutoProbe):
            cb.max_fraction = None


def _verdict(result: dict[str, Any], spec: Mapping[str, Any], probe: Any, target: Any, trainer: Any) -> dict[str, Any]:
    """The figures of a run that trained, and whether it is ``ok``: all batches timed, or the target checked."""
    result["parts"] = parts_of(trainer)
    result["range_peaks"] = range_peaks(trainer)
    result.update(probe.results())
    if target is not None:
        result["cap_s"] = probe.max_time
        result["cap_reason"] = spec.get("cap_reason")
        result["cap_leader"] = spec.get("cap_leader")
        result["cap_baseline_s"] = spec.get("cap_baseline_s")
        return _target_verdict(result, target, trainer, spec.get("cap_reason"))
    if not probe.done:
        result["reason"] = (
            f"training stopped after {probe.batches} of {probe.total_batches} batches"
            " (the config's max_steps / max_time / min_epochs / a callback stopped it)"
        )
        return result
    result["status"] = "ok"
    return result


def _target_verdict(
    result: dict[str, Any], target: Any, trainer: Any, spec_reason: Optional[str] = None
) -> dict[str, Any]:
    """A target run is ``ok`` when it trained and checked the metric; a miss is ``ok`` with ``reached`` false."""
    if not result["checks"]:
        result["reason"] = (
            "no validation ran before the run ended: give the data a val_dataloader, or --target-every BATCHES"
        )
        return result
    if not result["metric_seen"]:
        logged = ", ".join(sorted(trainer.callback_metrics)) or "nothing"
        result["reason"] = f"the model never logged {target.metric!r} in validation (it logged: {logged})"
        return result
    result["status"] = "ok"
    if not result["reached"]:
        if result.get("flattened"):
            result["miss"] = (
                f"flattened: no better {target.metric} in the {result['flat_checks']} checks after its schedule"
                f" annealed at step {result['annealed_step']:,} (best {result['best_value']:.4g},"
                f" {result['train_s']:.0f} s)"
            )
            return result
        if result["timed_out"] and spec_reason:
            result["miss"] = f"{spec_reason} (best {target.metric} {result['best_value']:.4g})"
            return result
        why = "the --target-max-time cap" if result["timed_out"] else "the end of the configured training"
        best = result["best_value"]
        result["miss"] = (
            f"missed: best {target.metric} {best:.4g} by {why} ({result['checks'][-1]['step']} steps,"
            f" {result['train_s']:.0f} s)"
        )
    return result


def _prepare(spec: Mapping[str, Any]) -> None:
    for path in spec.get("sys_path") or []:
        if path not in sys.path:
            sys.path.append(path)
    cwd = spec.get("cwd")
    if cwd:
        os.chdir(cwd)
    for key, value in (spec.get("env") or {}).items():
        os.environ[key] = str(value)


def _write(path: str, result: Mapping[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)
    os.replace(tmp, path)


def child_main(spec_path: str, result_path: str, log_path: str) -> None:
    """Target of a forked run: output to ``log_path``, spec from and result to JSON files."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    _prepare(spec)
    _write(result_path, run_variant(spec))
    sys.stdout.flush()
    sys.stderr.flush()


def main(argv: Any = None) -> int:
    """``python -m lightning_speedups.bench.worker SPEC.json RESULT.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m lightning_speedups.bench.worker SPEC.json RESULT.json", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as fh:
        spec = json.load(fh)
    _prepare(spec)
    result = run_variant(spec)
    _write(args[1], result)
    return 0 if result.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
