"""What ``bench`` was asked to do (:class:`BenchOptions`) and its one error type (:class:`BenchError`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.errors import BadInput

__all__ = ["BASELINES", "DEVICES", "ISOLATIONS", "MIN_BUDGET_S", "BenchError", "BenchOptions"]

ISOLATIONS = ("forkserver", "subprocess")
#: what the baseline is: ``reset`` every speed-up off (plain Lightning), ``yours`` the config as given
BASELINES = ("reset", "yours")
DEVICES = ("auto", "cpu", "cuda")
#: the smallest --budget that can hold a baseline run and one variant (process start, build, steps)
MIN_BUDGET_S = 20.0


class BenchError(BadInput):
    """Bad input or a setup that cannot be benched: printed as one message, exit code 2."""


@dataclass
class BenchOptions:
    """Everything ``bench`` was asked to do (see ``python -m lightning_speedups bench --help``)."""

    args: list[str] = field(default_factory=list)
    tips: Optional[list[str]] = None
    presets: Optional[list[str]] = None
    steps: int = 20
    warmup: int = 3
    repeats: int = 3
    budget: Optional[float] = None
    device: str = "auto"
    seed: int = 0
    min_gain: float = 0.02
    loss_tolerance: float = 0.25
    search: bool = True
    extras: bool = True
    isolation: str = "forkserver"
    timeout: float = 900.0
    compile_cache: str = "fresh"
    memory_step: bool = True
    threads: Optional[int] = None
    progress: bool = True
    log_dir: Optional[str] = None
    #: time-to-target mode: ``"val_acc=0.90"`` (``None``: rank by samples/s, as before)
    target: Optional[str] = None
    #: ``"max"`` / ``"min"``; ``None``: from the target or the metric's name
    target_mode: Optional[str] = None
    #: seconds of training after which a target run gives up (a miss)
    target_max_time: float = 600.0
    #: training batches between validation checks in target mode (``None``: the config's own)
    target_every: Optional[int] = None
    #: the A/A pair of baselines that measures the run's noise floor
    noise_pair: bool = True
    #: time-to-target mode: time the throughput tips by samples/s first and stack those that pay onto the
    #: candidates that change the optimisation (``--no-stack``: each tip run to the target on its own)
    stack: bool = True
    #: ``reset``: the baseline turns every ``speedups:`` key the config sets back off; ``yours``: the
    #: baseline is the config as given and each variant adds its tip on top (what ``doctor --verify`` times)
    baseline: str = "reset"
    #: the names the caller's own command gives bench's flags in messages (``doctor --verify``:
    #: ``{"budget": "--verify-budget"}``); a flag not named here is ``--<name>``
    flags: dict[str, str] = field(default_factory=dict)

    def flag(self, name: str) -> str:
        """The command-line flag of option ``name`` as the user's command spells it."""
        return self.flags.get(name, f"--{name}")

    @property
    def target_mode_on(self) -> bool:
        return self.target is not None

    def parsed_target(self) -> Any:
        from lightning_speedups.bench.target import parse_target

        try:
            return parse_target(str(self.target), self.target_mode)
        except ValueError as err:
            raise BenchError(str(err)) from None

    def validate(self) -> None:
        def positive_int(name: str, value: Any, minimum: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise BenchError(f"{self.flag(name)} must be an integer >= {minimum}, got {value!r}.")

        positive_int("steps", self.steps, 1)
        positive_int("warmup", self.warmup, 0)
        positive_int("repeats", self.repeats, 1)
        if self.device not in DEVICES:
            raise BenchError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}.")
        if self.isolation not in ISOLATIONS:
            raise BenchError(f"--isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}.")
        if self.baseline not in BASELINES:
            raise BenchError(f"--baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}.")
        if self.compile_cache not in ("fresh", "shared"):
            raise BenchError(f"--compile-cache must be 'fresh' or 'shared', got {self.compile_cache!r}.")
        if self.budget is not None:
            if not math.isfinite(self.budget) or self.budget < MIN_BUDGET_S:
                raise BenchError(
                    f"{self.flag('budget')} {self.budget:g} s is too small to run one variant: a run costs at least a"
                    f" process start, the build and {self.warmup + self.steps} batches, and the baseline must run"
                    f" too. Give at least {MIN_BUDGET_S:g} s (a few minutes for a real model), or leave"
                    f" {self.flag('budget')} out."
                )
        if self.threads is not None:
            positive_int("threads", self.threads, 1)
        if self.target is not None:
            if self.target_mode not in (None, "max", "min"):
                raise BenchError(f"--target-mode must be 'max' or 'min', got {self.target_mode!r}.")
            self.parsed_target()
            if not math.isfinite(self.target_max_time) or self.target_max_time <= 0:
                raise BenchError(
                    f"--target-max-time must be a positive number of seconds, got {self.target_max_time!r}."
                )
            if self.target_every is not None:
                positive_int("target-every", self.target_every, 1)
        if self.min_gain < 0 or self.loss_tolerance <= 0:
            raise BenchError(f"{self.flag('min-gain')} must be >= 0 and {self.flag('loss-tolerance')} > 0.")
