"""Overhead of the pack's callbacks when they have nothing to do, measured directly.

Wall-clock A/B runs on a shared 2-core machine have about +-5% noise, too much to show a 1% overhead.
This script measures it directly instead: Lightning's SimpleProfiler times every callback hook, so the
time spent inside the pack's per-step hooks (batch start/end, before/after backward and optimizer
step) is summed and divided by the time of the training steps (`run_training_batch` + the data fetch)
of the same run. One-off hooks (setup, fit start, teardown) are reported apart. Both numerators and denominators come from one
run, so machine noise scales both alike.

Run:  python benchmarks/bench_overhead.py [--steps 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.profilers import SimpleProfiler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # the reference workloads' class_path: benchmarks.cnn_workload...
from helpers import QUIET, TinyCNN, TinyTransformer  # noqa: E402

from lightning_speedups import (  # noqa: E402
    ChannelsLast,
    ConvBiasRemoval,
    CudnnBenchmark,
    DataWaitMonitor,
    GradsToNoneCheck,
    InputStatsCheck,
    LoaderTuning,
    MatmulPrecision,
    NoGradEvalCheck,
    ShapeWatch,
    SpeedupsSummary,
)


def idle_parts():
    """Parts that find nothing to change on a CPU transformer (plus the monitors a preset turns on)."""
    return [
        ChannelsLast(),
        ConvBiasRemoval(),
        CudnnBenchmark("auto"),
        MatmulPrecision("auto"),
        LoaderTuning(num_workers=None, pin_memory="auto", persistent_workers=None),
        DataWaitMonitor(),
        InputStatsCheck(),
        GradsToNoneCheck(),
        NoGradEvalCheck(),
        ShapeWatch(),
        SpeedupsSummary(),
    ]


def measure(model, steps: int, config: str | None = None) -> tuple[float, float, float, int]:
    parts = idle_parts()
    names = {type(cb).__name__ for cb in parts}
    if config is None:
        profiler = SimpleProfiler()
        trainer = Trainer(
            **{**QUIET, "max_steps": steps, "limit_val_batches": 0, "profiler": profiler}, callbacks=parts
        )
        trainer.fit(model)
    else:  # a reference workload, built exactly as `fit --config` builds it
        from lightning_speedups.session import build

        overrides = {k: v for k, v in QUIET.items() if k not in ("accelerator", "devices")}
        cli = build(
            ["--config", config],
            callbacks=parts,
            trainer_overrides={**overrides, "max_steps": steps, "limit_val_batches": 0, "profiler": "simple"},
        )
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        trainer, profiler = cli.trainer, cli.trainer.profiler
    per_step = once = total = 0.0
    for action, durations in profiler.recorded_durations.items():
        if action.startswith("[Callback]") and action.split("]")[1].split(".")[0] in names:
            hook = action.rsplit(".", 1)[1]
            if "batch" in hook or hook.startswith(("on_before_", "on_after_")):
                per_step += sum(durations)
            else:
                once += sum(durations)
        if action in ("run_training_batch", "[_TrainingEpochLoop].train_dataloader_next"):
            total += sum(durations)
    return per_step, once, total, trainer.global_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--config", nargs="*", default=[], help="also measure these workloads (YAML configs)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {args.steps} steps, 1 thread")
    print(
        "| model | per-step hooks of the pack | training steps | per-step overhead | one-off hooks (setup, fit start, ...) |"
    )
    print("|---|---|---|---|---|")
    runs = [
        ("TinyTransformer (2 layers, d=32)", lambda: TinyTransformer(n=64, batch_size=8), None),
        ("TinyCNN (2 convs, 8x8)", lambda: TinyCNN(n=256, batch_size=16), None),
    ]
    runs += [(config, lambda: None, config) for config in args.config]
    for label, make, config in runs:
        per_step, once, total, steps = measure(make(), args.steps, config)
        print(
            f"| {label} | {per_step * 1e3:.1f} ms | {total * 1e3:.0f} ms over {steps} steps |"
            f" {per_step / total:.2%} | {once * 1e3:.0f} ms |"
        )


if __name__ == "__main__":
    main()
