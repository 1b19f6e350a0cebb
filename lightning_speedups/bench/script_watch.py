"""Inside the command ``bench -- COMMAND`` runs: Lightning's callback entry point that times one Trainer's fit.

``bench [options] -- python train.py ARGS`` (:mod:`lightning_speedups.bench.script`) runs the user's command once per
candidate and repeat, each in its own process, with ``LIGHTNING_SPEEDUPS`` set to the candidate (unset for plain
Lightning) and :data:`BENCH_OPTIONS_VAR` holding what to time. This module's :func:`callbacks_factory` (called by the
pack's watch entry point, :mod:`lightning_speedups.doctor.entry`, in both Lightning packages, only while the variable
is set) puts a :class:`ScriptTimer` into the Trainer to time (the first one the command builds, ``--trainer N``: the N-th):

- throughput: ``warmup`` batches, then ``steps`` timed ones (:class:`~lightning_speedups.bench.measure.BenchProbe`:
  step and data-wait times, loss, memory), validation left out of the step it follows; then the fit ends (the
  user's plan is not run on);
- time to a target (``--target``): the fit runs on until the logged metric reaches the target (or a time cap),
  timed by :class:`~lightning_speedups.bench.target.TargetProbe`.

It writes ``result.json`` into the bench's folder for that run at the end of the fit (global rank zero), with the
pack's parts as they decided, and what the model is (for which presets apply).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from lightning_speedups.environment import BENCH_OPTIONS_VAR
from lightning_speedups.errors import SettingError

__all__ = ["callbacks_factory", "model_facts"]

#: Trainers built in this process while a bench asked for one
_BUILT = [0]


def _options() -> Optional[dict[str, Any]]:
    text = os.environ.get(BENCH_OPTIONS_VAR)
    if not text:
        return None
    try:
        options = json.loads(text)
    except ValueError as err:
        raise SettingError(f"{BENCH_OPTIONS_VAR} is not what the bench command writes ({err}); unset it.") from None
    if not isinstance(options, dict) or "out" not in options:
        raise SettingError(f"{BENCH_OPTIONS_VAR} is not what the bench command writes; unset it.")
    return options


def callbacks_factory() -> list[Any]:
    """A :class:`ScriptTimer` for the Trainer the bench times when :data:`BENCH_OPTIONS_VAR` is set; ``[]``
    otherwise."""
    options = _options()
    if options is None:
        return []
    _BUILT[0] += 1
    Path(options["out"], "trainers").write_text(str(_BUILT[0]))
    if _BUILT[0] != options.get("trainer", 1):
        return []
    return [_timer(options)]


def _timer(options: dict[str, Any]) -> Any:
    from lightning_speedups.bench.measure import BenchProbe
    from lightning_speedups.bench.target import TargetProbe, parse_target

    class ScriptTimer(BenchProbe):
        """Times the fit (see the module doc) and writes what it measured at its end."""

        def __init__(self) -> None:
            super().__init__(
                warmup=int(options.get("warmup", 3)),
                steps=int(options.get("steps", 20)),
                memory_step=bool(options.get("memory_step", True)),
            )
            self.out = Path(options["out"])
            self.target = None
            if options.get("target"):
                self.target = TargetProbe(
                    parse_target(options["target"]), max_time=float(options.get("max_time") or float("inf"))
                )
            self.written = False
            self.facts: dict[str, Any] = {}

        # --- throughput: BenchProbe's hooks; the target probe rides along and decides the end instead
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            super().on_fit_start(trainer, pl_module)
            if self.target is not None:
                self.target.on_fit_start(trainer, pl_module)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.facts = model_facts(trainer, pl_module)
            super().on_train_start(trainer, pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            stop = trainer.should_stop
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            if self.target is not None:
                trainer.should_stop = stop  # the target run ends at the target, not after the timed steps
                self.target.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            if self.target is not None:
                self.target.on_validation_start(trainer, pl_module)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if self.target is not None:
                self.target.on_validation_end(trainer, pl_module)
            if not trainer.sanity_checking and self._prev_end is not None:
                self._prev_end = self._mark()  # a step's time holds no validation that ran after it

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self._window:  # the fit's own plan ended inside the timed window: what was timed counts
                self._close_window()

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self.write(trainer, None)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            super().on_exception(trainer, pl_module, exception)
            if isinstance(exception, KeyboardInterrupt):
                return
            line = str(exception).strip().splitlines()[0][:300] if str(exception).strip() else ""
            self.write(trainer, f"{type(exception).__name__}: {line}" if line else type(exception).__name__)

        def write(self, trainer: Any, error: Optional[str]) -> None:
            if self.written or not getattr(trainer, "is_global_zero", True):
                return
            self.written = True
            from lightning_speedups.bench.worker import parts_of

            result: dict[str, Any] = {"status": "failed" if error else "ok", "trainer": _BUILT[0]}
            result.update(self.results())
            if self.target is not None:
                result.update(self.target.results())
            result["parts"] = parts_of(trainer)
            result["facts"] = self.facts
            if error:
                result["reason"] = error
            path = self.out / "result.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(result, default=str))
            os.replace(tmp, path)

    return ScriptTimer()


def model_facts(trainer: Any, pl_module: Any) -> dict[str, Any]:
    """What decides which presets apply: the accelerator, the device count, convolutions, attention."""
    import torch

    convs = attention = 0
    for module in pl_module.modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d)):
            convs += 1
        name = type(module).__name__.lower()
        if isinstance(module, torch.nn.MultiheadAttention) or "attention" in name or "transformer" in name:
            attention += 1
    return {
        "accelerator": trainer.strategy.root_device.type,
        "devices": int(getattr(trainer, "num_devices", 1) or 1),
        "convolutions": convs,
        "attention": attention,
        "package": type(trainer).__module__.split(".")[0],
        "model": type(pl_module).__name__,
    }
