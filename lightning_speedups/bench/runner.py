"""Plan and run the bench: variants interleaved over repeats, each run in its own process, in budget.

Phase 1 runs the baseline, each applicable tip alone, the packaged presets, the static all-on
combination and the idle parts, round-robin: repeat 1 of every variant, then repeat 2 of every
variant (in a rotated order), and so on, so machine noise hits all of them alike. Phase 2 is the
combination search (:func:`~lightning_speedups.bench.variants.greedy_search`): each candidate is run
interleaved with a fresh baseline, and its speed-up is taken over that baseline.

Every run is a separate process: by default forked from a server process that has only imported
torch and Lightning (``isolation="forkserver"``: no interpreter start per run), or a fresh
``python -m lightning_speedups.bench.worker`` (``isolation="subprocess"``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from lightning_speedups.bench.measure import VariantSummary, compare, summarize
from lightning_speedups.bench.variants import (
    BASELINE,
    PRESETS_NOT_TIMED,
    TIP_VARIANTS,
    BudgetExhausted,
    SearchResult,
    SetupInfo,
    Variant,
    build_variants,
    combo_variant,
    greedy_search,
    inspect_setup,
    plan_tips,
)

ISOLATIONS = ("forkserver", "subprocess")
DEVICES = ("auto", "cpu", "cuda")
#: the smallest --budget that can hold a baseline run and one variant (process start, build, steps)
MIN_BUDGET_S = 20.0


class BenchError(Exception):
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

    def validate(self) -> None:
        def positive_int(name: str, value: Any, minimum: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise BenchError(f"--{name} must be an integer >= {minimum}, got {value!r}.")

        positive_int("steps", self.steps, 1)
        positive_int("warmup", self.warmup, 0)
        positive_int("repeats", self.repeats, 1)
        if self.device not in DEVICES:
            raise BenchError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}.")
        if self.isolation not in ISOLATIONS:
            raise BenchError(f"--isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}.")
        if self.compile_cache not in ("fresh", "shared"):
            raise BenchError(f"--compile-cache must be 'fresh' or 'shared', got {self.compile_cache!r}.")
        if self.budget is not None:
            if not math.isfinite(self.budget) or self.budget < MIN_BUDGET_S:
                raise BenchError(
                    f"--budget {self.budget:g} s is too small to run one variant: a run costs at least a process"
                    f" start, the build and {self.warmup + self.steps} batches, and the baseline must run too."
                    f" Give at least {MIN_BUDGET_S:g} s (a few minutes for a real model), or leave --budget out."
                )
        if self.threads is not None:
            positive_int("threads", self.threads, 1)
        if self.min_gain < 0 or self.loss_tolerance <= 0:
            raise BenchError("--min-gain must be >= 0 and --loss-tolerance > 0.")


@dataclass
class VariantRecord:
    """A variant, the raw results of its runs, and its summary."""

    variant: Variant
    phase: int = 1
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: Optional[VariantSummary] = None
    skipped: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.variant.to_dict(),
            "phase": self.phase,
            "skipped": self.skipped,
            "summary": self.summary.to_dict() if self.summary else None,
            "runs": self.runs,
        }


@dataclass
class BenchResult:
    """All a bench found: what ran, the raw runs, the search, the pick, and the context."""

    options: BenchOptions
    meta: dict[str, Any]
    info: SetupInfo
    skipped_tips: dict[str, str]
    skipped_presets: dict[str, str]
    records: list[VariantRecord]
    baselines: dict[int, VariantRecord]
    search: Optional[SearchResult]
    pick: Optional[VariantRecord]
    notes: list[str]
    user_speedups_keys: list[str]

    def record(self, name: str) -> Optional[VariantRecord]:
        return next((r for r in self.records if r.variant.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        opts = dataclasses.asdict(self.options)
        return {
            "meta": self.meta,
            "options": opts,
            "setup": dataclasses.asdict(self.info),
            "memory_figure": MEMORY_FIGURE[self.info.device],
            "skipped_tips": self.skipped_tips,
            "skipped_presets": self.skipped_presets,
            "variants": [r.to_dict() for r in self.records],
            "extra_baselines": [
                {"phase": p, "summary": r.summary.to_dict() if r.summary else None, "runs": r.runs}
                for p, r in sorted(self.baselines.items())
                if p != 1
            ],
            "search": None
            if self.search is None
            else {
                "helpful": self.search.helpful,
                "best": list(self.search.best),
                "speedup": self.search.speedup,
                "steps": [dataclasses.asdict(s) for s in self.search.steps],
            },
            "pick": None if self.pick is None else self.pick.variant.name,
            "notes": self.notes,
        }


MEMORY_FIGURE = {
    "cpu": "train memory = peak live bytes of the CPU allocator during one profiled training batch, above what was"
    " live when it started (torch.profiler); the memory ratio uses this figure",
    "cuda": "train memory = torch.cuda peak allocated during the timed steps, above what was allocated when they"
    " started; the memory ratio uses this figure",
}


# ----------------------------------------------------------------------------- building the argv


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v and k != "init_args":
                out.update(_flatten(v, key))
            else:
                out[key] = v
    return out


def speedups_defaults() -> dict[str, Any]:
    """Every leaf of the ``speedups:`` section with its default, as dotted keys."""
    from lightning_speedups.config import Speedups

    return _flatten(dataclasses.asdict(Speedups()))


def user_speedups_keys(args: Sequence[str]) -> list[str]:
    """The ``speedups`` keys the user's configs and command-line arguments set (dotted, no prefix)."""
    import yaml

    keys: list[str] = []
    defaults = speedups_defaults()

    def add(key: str) -> None:
        matches = [k for k in defaults if k == key or k.startswith(key + ".")]
        for k in matches or [key]:
            if k not in keys:
                keys.append(k)

    args = list(args)
    for i, arg in enumerate(args):
        path = None
        if arg in ("--config", "-c") and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg.startswith("--speedups."):
            add(arg[len("--speedups."):].split("=", 1)[0])
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    data = yaml.safe_load(fh) or {}
            except Exception:
                continue
            section = data.get("speedups") if isinstance(data, dict) else None
            if isinstance(section, dict):
                for key in _flatten(section):
                    add(key)
    return keys


def reset_args(keys: Sequence[str]) -> list[str]:
    """Command-line arguments that put the given ``speedups`` keys back to their defaults."""
    from lightning_speedups.bench.worker import override_args

    defaults = speedups_defaults()
    return override_args("speedups", {k: defaults[k] for k in keys if k in defaults})


def variant_args(user_args: Sequence[str], reset: Sequence[str], variant: Variant) -> list[str]:
    """The ``fit`` arguments of a variant: the user's, the reset (not for ``yours``), then the presets."""
    from lightning_speedups.presets import resolve_config

    out = list(user_args)
    if variant.kind != "yours":
        out += list(reset)
    for p in variant.presets:
        out += ["--config", resolve_config(p)]
    return out


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is available here (use --device cpu or auto).")
    return device


def trainer_overrides(options: BenchOptions, device: str, root: str) -> dict[str, Any]:
    """Trainer settings of every bench run: one device, no validation, logging or checkpoints."""
    return {
        "accelerator": device,
        "devices": 1,
        "max_epochs": -1,
        "max_steps": options.warmup + options.steps + 3,
        "max_time": None,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root,
    }


def machine_meta(device: str) -> dict[str, Any]:
    import lightning
    import torch

    from lightning_speedups.functional.precision import cpuinfo_field

    cpu = cpuinfo_field("model name") or platform.processor() or ""
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "command": "python -m lightning_speedups " + " ".join(sys.argv[1:]) if sys.argv else "",
    }
    try:
        meta["load_average"] = os.getloadavg()
    except OSError:
        pass
    if device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    return meta


# ----------------------------------------------------------------------------- running processes


class Launcher:
    """Starts one run in its own process and returns its result (never raises for a failed run)."""

    def __init__(self, isolation: str, workdir: str, timeout: float) -> None:
        self.isolation = isolation
        self.workdir = workdir
        self.timeout = timeout
        self._ctx: Any = None
        if isolation == "forkserver":
            if "forkserver" not in multiprocessing.get_all_start_methods():
                self.isolation = "subprocess"
            else:
                self._ctx = multiprocessing.get_context("forkserver")
                self._ctx.set_forkserver_preload(["lightning_speedups.bench.worker", "torch", "lightning.pytorch"])

    def warm(self) -> None:
        """Start the fork server (it imports torch and Lightning once) so no run's time includes it."""
        if self.isolation == "forkserver":
            proc = self._ctx.Process(target=_noop)
            proc.start()
            proc.join(self.timeout)

    def run(self, spec: dict[str, Any], name: str, timeout: Optional[float] = None) -> dict[str, Any]:
        os.makedirs(self.workdir, exist_ok=True)
        spec_path = os.path.join(self.workdir, f"{name}.spec.json")
        result_path = os.path.join(self.workdir, f"{name}.result.json")
        log_path = os.path.join(self.workdir, f"{name}.log")
        with open(spec_path, "w", encoding="utf-8") as fh:
            json.dump(spec, fh, default=str)
        limit = self.timeout if timeout is None else min(self.timeout, timeout)
        t0 = time.perf_counter()
        exit_code: Optional[int] = None
        timed_out = False
        if self.isolation == "forkserver":
            proc = self._ctx.Process(target=_child_entry, args=(spec_path, result_path, log_path), daemon=False)
            proc.start()
            proc.join(limit)
            if proc.is_alive():
                timed_out = True
                proc.kill()
                proc.join(10)
            exit_code = proc.exitcode
        else:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")]).strip(os.pathsep)
            with open(log_path, "ab") as log:
                proc2 = subprocess.Popen(
                    [sys.executable, "-m", "lightning_speedups.bench.worker", spec_path, result_path],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
                try:
                    exit_code = proc2.wait(limit)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(proc2)
                    exit_code = proc2.wait(10)
        wall = time.perf_counter() - t0
        result: dict[str, Any]
        if os.path.exists(result_path) and not timed_out:
            with open(result_path, encoding="utf-8") as fh:
                result = json.load(fh)
        else:
            why = f"timed out after {limit:.0f} s" if timed_out else f"the run's process died (exit code {exit_code})"
            result = {"status": "failed", "reason": why}
        result["wall_s"] = wall
        result["log"] = log_path
        if result.get("status") != "ok":
            result["log_tail"] = _tail(log_path)
        return result


class _quiet_lightning:
    """Lightning's info lines (devices, seeds, tips) off while the parent builds the setup once."""

    names = ("lightning.pytorch", "lightning.fabric", "lightning_fabric", "pytorch_lightning")

    def __enter__(self) -> None:
        import logging

        import warnings

        self._levels = [(logging.getLogger(n), logging.getLogger(n).level) for n in self.names]
        for logger, _ in self._levels:
            logger.setLevel(logging.WARNING)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")  # "No seed found", logger advice: the runs report what matters

    def __exit__(self, *exc: Any) -> None:
        self._warnings.__exit__(*exc)
        for logger, level in self._levels:
            logger.setLevel(level)


def _noop() -> None:
    pass


def _child_entry(spec_path: str, result_path: str, log_path: str) -> None:
    from lightning_speedups.bench.worker import child_main

    child_main(spec_path, result_path, log_path)


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except Exception:
        proc.kill()


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return ""


# ----------------------------------------------------------------------------- the bench


class Bench:
    """Plans and runs one bench. ``prepare()`` checks the input and the config; ``run()`` measures.

    Args:
        options: what to do.
        console: a rich console for messages and the progress bar (stderr by default).
        launcher: starts runs (tests may pass a fake one with the same ``run(spec, name, timeout)``).
        clock: seconds, read for the budget (tests pass a fake one).
    """

    def __init__(
        self,
        options: BenchOptions,
        console: Any = None,
        launcher: Optional[Launcher] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rich.console import Console

        self._clock = clock
        self.options = options
        self.console = console or Console(stderr=True)
        self.notes: list[str] = []
        self._own_tmp: Optional[str] = None
        self._launcher = launcher
        self.records: list[VariantRecord] = []
        self.baselines: dict[int, VariantRecord] = {}
        self._t0 = 0.0
        self._run_counter = 0
        self._progress: Any = None
        self._task: Any = None

    # --- preparation
    def prepare(self) -> None:
        """Validate the options, build the user's setup once and decide the variants.

        Raises:
            BenchError: bad options, an unknown tip or preset, or a config that does not build.
        """
        from lightning_speedups.bench.variants import resolve_tips
        from lightning_speedups.presets import list_presets

        o = self.options
        o.validate()
        try:
            self.selected = resolve_tips(o.tips)
        except KeyError as err:
            raise BenchError(str(err.args[0]) if err.args else str(err)) from None
        available = list(list_presets())
        if o.presets is None:
            names = [p for p in available if p != "baseline"]
        else:
            names = []
            for p in o.presets:
                for name in str(p).split(","):
                    name = name.strip()
                    if not name or name == "none":
                        continue
                    if name not in available and not os.path.isfile(name):
                        raise BenchError(f"unknown preset {name!r}; presets: {', '.join(available)}")
                    if name not in names and name != "baseline":
                        names.append(name)
        self.skipped_presets = {p: PRESETS_NOT_TIMED[p] for p in names if p in PRESETS_NOT_TIMED}
        self.presets = [p for p in names if p not in PRESETS_NOT_TIMED]
        self.device = resolve_device(o.device)
        self.root = o.log_dir or tempfile.mkdtemp(prefix="lightning_speedups_bench_")
        if o.log_dir is None:
            self._own_tmp = self.root
        os.makedirs(self.root, exist_ok=True)
        self.trainer_overrides = trainer_overrides(o, self.device, os.path.join(self.root, "trainer"))
        self.user_keys = user_speedups_keys(o.args)
        self.reset = reset_args(self.user_keys)
        model = self._build_once()
        self.info = inspect_setup(model, self.device)
        self.timed_tips, self.skipped_tips = plan_tips(self.info, self.selected)
        for part, err in self.info.errors.items():
            self.notes.append(f"the {part} part could not inspect the model: {err}")
        self.variants = build_variants(
            self.info, self.timed_tips, self.skipped_tips, self.presets, extras=o.extras, yours=bool(self.user_keys)
        )
        if self._launcher is None:
            self._launcher = Launcher(o.isolation, os.path.join(self.root, "runs"), o.timeout)

    def _build_once(self) -> Any:
        from lightning_speedups.session import UsageError, build

        from lightning_speedups.bench.worker import override_args

        args = list(self.options.args) + self.reset
        overrides = dict(self.trainer_overrides)
        overrides["default_root_dir"] = os.path.join(self.root, "inspect")
        try:
            with _quiet_lightning():
                try:
                    cli = build(args + override_args("trainer", overrides))
                except Exception as err:
                    if "enable_checkpointing" not in str(err):
                        raise
                    overrides.pop("enable_checkpointing")
                    cli = build(args + override_args("trainer", overrides))
        except UsageError as err:
            raise BenchError(str(err)) from None
        except SystemExit:
            raise BenchError("the config does not build (the parser's message above says why).") from None
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise BenchError(f"the config does not build: {type(err).__name__}: {first}") from None
        return cli.model

    # --- time and budget
    def _elapsed(self) -> float:
        return self._clock() - self._t0

    def _remaining(self) -> float:
        return math.inf if self.options.budget is None else self.options.budget - self._elapsed()

    def _estimate(self, variant: Variant) -> float:
        """Expected wall time of one run of ``variant`` from what has run so far."""
        own = [r["wall_s"] for rec in self._all_records() if rec.variant.name == variant.name for r in rec.runs]
        if own:
            return statistics.median(own)
        base = [r["wall_s"] for rec in self._all_records() if rec.variant.kind == "baseline" for r in rec.runs]
        guess = statistics.median(base) if base else 30.0
        def on(value: Any) -> bool:
            return value is True or (value == "auto" and self.device == "cuda")

        compiles = on(variant.overrides.get("compile.enabled")) or any(
            on((v.get("compile") or {}).get("enabled")) for v in self._preset_speedups(variant)
        )
        if compiles:
            compiled = [
                r["wall_s"]
                for rec in self._all_records()
                if "compile.enabled" in rec.variant.overrides
                for r in rec.runs
            ]
            guess = statistics.median(compiled) if compiled else guess * 3
        return guess

    def _preset_speedups(self, variant: Variant) -> list[dict[str, Any]]:
        import yaml

        from lightning_speedups.presets import resolve_config

        out = []
        for p in variant.presets:
            try:
                with open(resolve_config(p), encoding="utf-8") as fh:
                    out.append((yaml.safe_load(fh) or {}).get("speedups") or {})
            except Exception:
                pass
        return out

    def _all_records(self) -> list[VariantRecord]:
        return self.records + [b for p, b in self.baselines.items() if p != 1]

    # --- one run
    def _spec(self, variant: Variant) -> dict[str, Any]:
        o = self.options
        self._run_counter += 1
        env: dict[str, str] = {}
        cache = "inductor" if o.compile_cache == "shared" else f"inductor-{self._run_counter}"
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.root, "cache", cache)
        env["TRITON_CACHE_DIR"] = os.path.join(self.root, "cache", cache, "triton")
        return {
            "variant": variant.name,
            "args": variant_args(o.args, self.reset, variant),
            "speedups_overrides": dict(variant.overrides),
            # a root of its own per run: LightningCLI's SaveConfigCallback refuses an existing config.yaml
            "trainer_overrides": {
                **self.trainer_overrides,
                "default_root_dir": os.path.join(self.root, "trainer", f"run-{self._run_counter}"),
            },
            "warmup": o.warmup,
            "steps": o.steps,
            "seed": o.seed,
            "memory_step": o.memory_step,
            "threads": o.threads,
            "sys_path": [p for p in sys.path if p],
            "cwd": os.getcwd(),
            "env": env,
        }

    def _run_one(self, record: VariantRecord, repeat: int) -> dict[str, Any]:
        variant = record.variant
        if self._progress is not None:
            self._progress.update(self._task, description=f"{variant.name} (repeat {repeat + 1})")
        safe = "".join(ch if ch.isalnum() else "_" for ch in variant.name)
        timeout = None if self.options.budget is None else max(30.0, self._remaining() + 5.0)
        result = self._launcher.run(self._spec(variant), f"p{record.phase}-{safe}-r{repeat}", timeout)  # type: ignore[union-attr]
        result["repeat"] = repeat
        result["phase"] = record.phase
        if self.options.compile_cache == "fresh":
            shutil.rmtree(os.path.join(self.root, "cache", f"inductor-{self._run_counter}"), ignore_errors=True)
        record.runs.append(result)
        if self._progress is not None:
            self._progress.advance(self._task)
            if result.get("status") != "ok":
                self._progress.console.print(f"[yellow]{variant.name}[/] (repeat {repeat + 1}) failed: {result.get('reason')}")
        return result

    def _add_total(self, n: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=(self._progress.tasks[0].total or 0) + n)

    # --- phases
    def _phase_one(self) -> None:
        o = self.options
        self.records = [VariantRecord(v, phase=1) for v in self.variants]
        base = self.records[0]
        self.baselines[1] = base
        self._add_total(len(self.records) * o.repeats)
        warm = getattr(self._launcher, "warm", None)
        if warm is not None:
            if self._progress is not None:
                self._progress.update(self._task, description="starting the fork server (imports torch, Lightning)")
            warm()
        first = self._run_one(base, 0)
        if first.get("status") != "ok":
            raise BenchError(
                f"the baseline does not train: {first.get('reason')}\n{first.get('log_tail', '')}".rstrip()
            )
        repeats = o.repeats
        if o.budget is not None:
            if first["wall_s"] * 2 > o.budget:
                raise BenchError(
                    f"--budget {o.budget:g} s is too small to run one variant: one baseline run took"
                    f" {first['wall_s']:.1f} s and a variant needs at least as long; give at least"
                    f" {math.ceil(first['wall_s'] * 2 * 1.2)} s (or fewer --steps)."
                )
            per_sweep = sum(self._estimate(r.variant) for r in self.records)
            speed_tips = [t for t in self.timed_tips if TIP_VARIANTS[t].goal == "speed"]
            share = 0.7 if (o.search and len(speed_tips) >= 2) else 1.0  # keep time for the search
            fits = int((self._remaining() * share + first["wall_s"]) // max(per_sweep, 1e-9))
            if fits < repeats:
                repeats = max(1, fits)
                self.notes.append(
                    f"--budget {o.budget:g} s: {repeats} repeat(s) instead of {o.repeats}"
                    f" (one sweep of {len(self.records)} variants takes about {per_sweep:.0f} s)"
                )
                self._add_total((repeats - o.repeats) * len(self.records))
        self.repeats_used = repeats
        order = list(self.records)
        for repeat in range(repeats):
            shift = repeat % len(order)
            sweep = order[shift:] + order[:shift]
            for record in sweep:
                if record is base and repeat == 0:
                    continue
                if record.skipped:
                    continue
                est = self._estimate(record.variant)
                if est > self._remaining():
                    if not record.runs:
                        record.skipped = f"not run: its run (about {est:.0f} s) did not fit in the --budget"
                    self._add_total(-1)
                    continue
                self._run_one(record, repeat)
        for record in self.records:
            record.summary = summarize(record.runs) if record.runs else None
        base.summary = summarize(base.runs)
        for record in self.records:
            if record.summary is not None:
                compare(record.summary, record.runs, base.summary, base.runs, o.loss_tolerance)

    def _measure_combo(self, tips: tuple[str, ...]) -> Optional[float]:
        o = self.options
        # a combination already measured in phase 1 (e.g. the all-on one) is not run again
        for rec in self.records:
            if rec.variant.kind in ("all-on", "combo") and tuple(sorted(rec.variant.tips)) == tips and rec.summary:
                s = rec.summary
                return s.speedup if (s.runs_ok and s.sane) else None
        variant = combo_variant(tips)
        phase = max([1, *self.baselines]) + 1
        record = VariantRecord(variant, phase=phase)
        base = VariantRecord(dataclasses.replace(BASELINE, name=f"baseline (phase {phase})"), phase=phase)
        repeats = getattr(self, "repeats_used", o.repeats)
        cost = (self._estimate(variant) + self._estimate(BASELINE)) * repeats
        if cost > self._remaining():
            raise BudgetExhausted()
        self.records.append(record)
        self.baselines[phase] = base
        self._add_total(2 * repeats)
        for repeat in range(repeats):
            pair = (record, base) if repeat % 2 == 0 else (base, record)
            for rec in pair:
                self._run_one(rec, repeat)
        base.summary = summarize(base.runs)
        record.summary = summarize(record.runs)
        compare(base.summary, base.runs, base.summary, base.runs, o.loss_tolerance)
        compare(record.summary, record.runs, base.summary, base.runs, o.loss_tolerance)
        # sanity against the phase-1 baseline's loss too (same seed, same data: it must agree)
        if record.summary.sane and self.baselines[1].summary is not None:
            from lightning_speedups.bench.measure import sanity_check

            record.summary.sane, record.summary.sanity = sanity_check(
                record.summary.loss.median, self.baselines[1].summary.loss.median, o.loss_tolerance
            )
        s = record.summary
        return s.speedup if (s.runs_ok and s.sane) else None

    def _phase_two(self) -> Optional[SearchResult]:
        o = self.options
        if not o.search:
            return None
        singles: dict[str, Optional[float]] = {}
        for rec in self.records:
            if rec.variant.kind == "tip" and TIP_VARIANTS[rec.variant.tips[0]].goal == "speed" and rec.summary:
                s = rec.summary
                singles[rec.variant.tips[0]] = s.speedup if (s.runs_ok and s.sane) else None
        return greedy_search(singles, self._measure_combo, o.min_gain)

    def pick(self) -> Optional[VariantRecord]:
        """The fastest variant that completed and passed the sanity check, if it beats the baseline
        by at least ``min_gain``; else the baseline."""
        best: Optional[VariantRecord] = None
        dropped = set()
        search = getattr(self, "search_result", None)
        if search is not None:  # a combination the search dropped did not beat its subset by min_gain
            dropped = {s.tips for s in search.steps if not s.accepted}
        for rec in self.records:
            s = rec.summary
            if rec.variant.kind in ("idle", "baseline") or s is None or not s.runs_ok or not s.sane or s.speedup is None:
                continue
            if rec.variant.kind == "combo" and tuple(sorted(rec.variant.tips)) in dropped:
                continue
            if s.speedup < 1.0 + self.options.min_gain:
                continue
            if best is None or s.speedup > best.summary.speedup:  # type: ignore[union-attr]
                best = rec
        return best or (self.records[0] if self.records else None)

    def run(self, progress_factory: Optional[Callable[[], Any]] = None) -> BenchResult:
        """Run every phase and return the result (``prepare()`` is called if it was not)."""
        if not hasattr(self, "variants"):
            self.prepare()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._t0 = self._clock()
        meta = machine_meta(self.device)
        if self.options.threads:
            meta["torch_threads"] = self.options.threads  # what every run used (--threads)
        progress = None
        if self.options.progress:
            progress = (progress_factory or (lambda: Progress(
                TextColumn("[bold]bench[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )))()
        try:
            if progress is not None:
                progress.start()
                self._progress = progress
                self._task = progress.add_task("baseline", total=0)
            self._phase_one()
            search = self.search_result = self._phase_two()
        finally:
            if progress is not None:
                progress.stop()
            self._progress = None
        meta["wall_s"] = round(self._elapsed(), 1)
        try:
            load = os.getloadavg()[0]
            cpus = meta.get("cpus_usable") or 1
            meta["load_average_end"] = os.getloadavg()
            if max(load, meta.get("load_average", (0,))[0]) > cpus:
                self.notes.append(
                    f"the machine was busy (load average {max(load, meta['load_average'][0]):.1f} on {cpus} CPUs):"
                    " other processes shared the cores, so the figures are noisier than on a quiet machine"
                )
        except OSError:
            pass
        return BenchResult(
            options=self.options,
            meta=meta,
            info=self.info,
            skipped_tips=self.skipped_tips,
            skipped_presets=self.skipped_presets,
            records=self.records,
            baselines=self.baselines,
            search=search,
            pick=self.pick(),
            notes=self.notes,
            user_speedups_keys=self.user_keys,
        )

    def cleanup(self) -> None:
        if self._own_tmp:
            shutil.rmtree(self._own_tmp, ignore_errors=True)
