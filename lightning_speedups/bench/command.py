"""``python -m lightning_speedups bench``: its argparse options, :func:`run_bench` and :func:`main`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from rich.console import Console

from lightning_speedups.bench import report
from lightning_speedups.bench.options import (
    BASELINES,
    DEVICES,
    ISOLATIONS,
    BenchError,
    BenchOptions,
)
from lightning_speedups.bench.results import BenchResult
from lightning_speedups.bench.runner import Bench

__all__ = ["main", "options_from_argv", "parser", "run_bench"]

EPILOG = """Every other argument (--config FILE|PRESET, --model.*, --data.*, --trainer.*) describes your setup,
exactly as for `fit`. With no config, the embedded digits CNN is benched.
Exit codes: 0 done; 2 bad input (unknown tip or preset, a budget too small for one variant, a config
that does not build, a baseline that does not train)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lightning_speedups bench",
        description="Time each tip of the pack on your own setup, side by side, and pick the fastest preset.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    _what_to_time(p)
    _how_to_run(p)
    _what_to_write(p)
    _how_to_judge(p)
    _time_to_target(p)
    _the_baseline(p)
    return p


def _what_to_time(p: argparse.ArgumentParser) -> None:
    """--tips, --presets: the variants."""
    p.add_argument(
        "--tips",
        nargs="+",
        default=None,
        metavar="TIP",
        help="only these tips (ids or slugs, e.g. T24 fusion; 'none' for none); default: every applicable one",
    )
    p.add_argument(
        "--presets",
        nargs="+",
        default=None,
        metavar="NAME",
        help="packaged presets to time ('none' for none); default: every single-device preset",
    )


def _how_to_run(p: argparse.ArgumentParser) -> None:
    """--steps, --warmup, --repeats, --budget, --device."""
    p.add_argument("--steps", type=int, default=20, help="timed batches per run (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="batches before the timed ones, reported apart (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="runs of every variant, interleaved (default 3)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="plan within this many seconds: fewer repeats, then fewer variants, then no search",
    )
    p.add_argument("--device", choices=DEVICES, default="auto", help="cpu, cuda or auto (default)")


def _what_to_write(p: argparse.ArgumentParser) -> None:
    """--json, --plot, --markdown, --write-preset."""
    p.add_argument("--json", default=None, metavar="PATH", help="write every raw figure here")
    p.add_argument("--plot", default=None, metavar="PATH", help="write a PNG chart here")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the table as Markdown here")
    p.add_argument(
        "--write-preset",
        default=None,
        metavar="PATH",
        help="write the fastest variant that passed the sanity check as a YAML preset",
    )


def _how_to_judge(p: argparse.ArgumentParser) -> None:
    """--seed, the pick's thresholds, the extras and how each run is isolated, limited and shown."""
    p.add_argument("--seed", type=int, default=0, help="seed of every run (same data order and init)")
    p.add_argument(
        "--min-gain",
        type=float,
        default=0.02,
        help="relative gain a tip, an addition or a pick must bring (default 0.02)",
    )
    p.add_argument(
        "--loss-tolerance",
        type=float,
        default=0.25,
        help="how far (relative) a variant's loss may be from the baseline's (default 0.25)",
    )
    p.add_argument("--no-search", action="store_true", help="skip the combination search")
    p.add_argument(
        "--no-stack",
        action="store_true",
        help="--target: run each throughput tip to the target on its own instead of timing them by samples/s first"
        " and stacking those that pay onto the schedules",
    )
    p.add_argument("--no-extras", action="store_true", help="skip the all-on and idle-parts variants")
    p.add_argument(
        "--isolation",
        choices=ISOLATIONS,
        default="forkserver",
        help="forkserver (default: fork each run from a clean server) or subprocess (new interpreter)",
    )
    p.add_argument(
        "--compile-cache",
        choices=("fresh", "shared"),
        default="fresh",
        help="inductor cache per run (fresh, default: cold compile every run) or shared within the bench",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before one run is stopped (default 900)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads in every run (default: torch's choice, usually the CPU count)",
    )
    p.add_argument("--no-memory-step", action="store_true", help="CPU: skip the profiled batch for the memory figure")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--log-dir", default=None, help="keep every run's spec, result and log here")


def _time_to_target(p: argparse.ArgumentParser) -> None:
    """--target and its options."""
    g = p.add_argument_group("time to target (rank by how soon a metric reaches a goal, not by samples/s)")
    g.add_argument(
        "--target",
        default=None,
        metavar="METRIC=VALUE",
        help="e.g. val_acc=0.90 (any metric the model logs; val_loss<=0.3 / val_acc>=0.9 give the direction):"
        " each variant trains until it reaches it, checked at every validation",
    )
    g.add_argument(
        "--target-mode",
        choices=("max", "min"),
        default=None,
        help="higher (max) or lower (min) is better; default: from the name (loss, error, ... -> min)",
    )
    g.add_argument(
        "--target-max-time",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="training seconds after which a run gives up: a miss (default 600)",
    )
    g.add_argument(
        "--target-every",
        type=int,
        default=None,
        metavar="BATCHES",
        help="training batches between checks (default: the config's val_check_interval)",
    )


def _the_baseline(p: argparse.ArgumentParser) -> None:
    """--no-noise-pair, --baseline."""
    p.add_argument(
        "--no-noise-pair",
        action="store_true",
        help="skip the A/A pair of baselines that measures this run's noise floor",
    )
    p.add_argument(
        "--baseline",
        choices=BASELINES,
        default="reset",
        help="reset (default): every speed-up your config sets is turned off in the baseline;"
        " yours: your config as given is the baseline and each tip is added on top",
    )


def options_from_argv(argv: Sequence[str]) -> tuple[BenchOptions, argparse.Namespace]:
    """Split the bench's own options from the setup arguments (passed through to ``build``)."""
    ns, rest = parser().parse_known_args(list(argv))
    options = BenchOptions(
        args=list(rest),
        tips=ns.tips,
        presets=ns.presets,
        steps=ns.steps,
        warmup=ns.warmup,
        repeats=ns.repeats,
        budget=ns.budget,
        device=ns.device,
        seed=ns.seed,
        min_gain=ns.min_gain,
        loss_tolerance=ns.loss_tolerance,
        search=not ns.no_search,
        extras=not ns.no_extras,
        isolation=ns.isolation,
        timeout=ns.timeout,
        compile_cache=ns.compile_cache,
        memory_step=not ns.no_memory_step,
        threads=ns.threads,
        progress=not ns.no_progress,
        log_dir=ns.log_dir,
        target=ns.target,
        target_mode=ns.target_mode,
        target_max_time=ns.target_max_time,
        target_every=ns.target_every,
        noise_pair=not ns.no_noise_pair,
        stack=not ns.no_stack,
        baseline=ns.baseline,
    )
    return options, ns


def run_bench(options: BenchOptions, console=None) -> BenchResult:
    """Run a bench from Python; raises :class:`BenchError` on bad input."""
    bench = Bench(options, console=console)
    try:
        bench.prepare()
        return bench.run()
    finally:
        bench.cleanup()


#: the output flags: every one is checked writable before the first run
OUTPUTS = ("json", "plot", "markdown", "write_preset", "log_dir")


def check_writable(path: str, flag: str, folder: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be written (missing folders are created later).

    Raises:
        BenchError: the path is a folder (or, for ``folder``, a file), or its nearest existing folder is
            not writable.
    """
    import os

    full = os.path.abspath(path)
    if os.path.exists(full):
        if folder != os.path.isdir(full):
            what = "a file" if folder else "a folder"
            raise BenchError(f"{flag} {path}: that is {what}; give a {'folder' if folder else 'file'} path.")
        if not os.access(full, os.W_OK):
            raise BenchError(f"{flag} {path}: not writable here; give a path in a folder you can write to.")
        return
    parent = os.path.dirname(full)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise BenchError(f"{flag} {path}: {parent} is not a writable folder; give a path in a folder you can write to.")


def _write_outputs(result: BenchResult, ns: argparse.Namespace, complete: bool = True) -> None:
    import os

    for name in ("json", "plot", "markdown", "write_preset"):
        path = getattr(ns, name)
        if path and os.path.dirname(os.path.abspath(path)):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if ns.json:
        report.to_json(result, ns.json)
        print(f"raw figures: {ns.json}")
    if ns.markdown:
        with open(ns.markdown, "w", encoding="utf-8") as fh:
            fh.write(report.markdown(result))
        print(f"markdown: {ns.markdown}")
    if ns.plot:
        report.plot(result, ns.plot)
        print(f"chart: {ns.plot}")
    if ns.write_preset and complete:
        report.write_preset(result, ns.write_preset)
        print(
            f"preset: {ns.write_preset} (python -m lightning_speedups fit --config YOUR.yaml --config {ns.write_preset})"
        )


def _save_partial(bench: Bench, ns: argparse.Namespace, why: str) -> None:
    """An interrupted or failed bench writes what it measured: the JSON (and table files) it was asked
    for, or ``bench-partial.json`` in the working directory; never a preset (nothing was picked)."""
    result = bench.partial_result() if hasattr(bench, "records") else None
    if result is None:
        return
    if not ns.json:
        ns.json = "bench-partial.json"
    try:
        _write_outputs(result, ns, complete=False)
        print(f"{why}: what was measured is in {ns.json} (no preset written)", file=sys.stderr)
    except Exception as err:  # the original error matters more
        print(f"{why}; the measurements could not be saved: {err}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m lightning_speedups bench``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    err = Console(stderr=True)
    try:
        options, ns = options_from_argv(argv)
    except SystemExit as exc:  # argparse printed the message
        return exc.code if isinstance(exc.code, int) else 2
    bench = Bench(options, console=err)
    try:
        for name in OUTPUTS:
            if getattr(ns, name):
                check_writable(getattr(ns, name), "--" + name.replace("_", "-"), folder=name == "log_dir")
        bench.prepare()
        result = bench.run()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        _save_partial(bench, ns, "the bench stopped")
        bench.cleanup()
        return 2
    except KeyboardInterrupt:
        _save_partial(bench, ns, "interrupted")
        bench.cleanup()
        return 130
    report.render_table(result, Console() if sys.stdout.isatty() else Console(width=220))
    _write_outputs(result, ns)
    bench.cleanup()
    return 0
