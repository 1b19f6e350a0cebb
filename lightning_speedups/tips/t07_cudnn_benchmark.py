"""T07 cudnn-benchmark: cudnn.benchmark for fixed input shapes, restored afterwards.

Card:
    Seeds: A#6, B#15 (claim: 1.27x to 1.70x forward+backward).
    What it does: CudnnBenchmark turns torch.backends.cudnn.benchmark on for CUDA runs, watches the
    input shapes (ShapeWatch) and turns it back off when they keep changing; the flag is restored
    after the fit.
    Expected gain: 1.27x-1.70x forward+backward on convolutional models with fixed shapes.
    When it hurts: re-tunes at every new input shape: slower with variable shapes; nothing on CPU.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_speedups.callbacks import CudnnBenchmark, ShapeWatch
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import plural
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at

Toggle = Literal["off", "auto", "on"]


def check(facts: Facts) -> Finding:
    """T07 cudnn-benchmark: benchmark mode against convolutions and changing input shapes."""
    tip = "T07"
    tracker = facts.shape_tracker
    shapes = (
        f"{plural(tracker.distinct_shapes, 'distinct input shape')} in {plural(tracker.steps, 'step')}"
        if tracker is not None and tracker.steps
        else None
    )
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"cuDNN is only used on CUDA devices (this run: {facts.device_type})" + (f"; {shapes}" if shapes else ""),
            "run the doctor on the GPU machine",
        )
    convs = sum(n for t, n in facts.module_counts.items() if t.startswith("Conv"))
    if not convs:
        return Finding.ok(tip, "the model has no convolution: cudnn.benchmark does not matter")
    if tracker is not None and facts.cudnn_benchmark:
        found = tracker.finding(benchmark=True)
        if found is not None:
            return Finding.from_items(tip, [Item(found["severity"], found["evidence"], found["fix"], "runtime")])
        return Finding.ok(tip, f"cudnn.benchmark is on and input shapes are fixed ({shapes or 'not measured'})")
    if facts.cudnn_benchmark:
        return Finding.ok(tip, "cudnn.benchmark is on")
    varying = tracker is not None and tracker.varying
    if varying:
        return Finding.ok(tip, f"cudnn.benchmark is off, and rightly: {shapes}")
    return Finding.from_items(
        tip,
        [
            Item(
                "medium",
                f"cudnn.benchmark is off with {plural(convs, 'convolution')} and fixed input shapes ({shapes or 'first batch only'})",
                "speedups.cudnn_benchmark: auto (CudnnBenchmark callback: on for CUDA, off again if shapes start changing)",
            )
        ],
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T07 adds, each at its place in the callback list."""
    return [(at("cudnn_benchmark"), CudnnBenchmark(s.cudnn_benchmark))] if s.cudnn_benchmark != "off" else []


TIP = Tip(
    id="T07",
    slug="cudnn-benchmark",
    title="cudnn.benchmark for fixed input shapes, restored afterwards",
    seeds=("A#6", "B#15"),
    claim="1.27x to 1.70x forward+backward",
    does="CudnnBenchmark turns torch.backends.cudnn.benchmark on for CUDA runs, watches the input shapes (ShapeWatch) and turns it back off when they keep changing; the flag is restored after the fit.",
    gain="1.27x-1.70x forward+backward on convolutional models with fixed shapes",
    hurts="re-tunes at every new input shape: slower with variable shapes; nothing on CPU",
    check=check,
    settings=(Setting("cudnn_benchmark", Toggle, "off", doc="T07. ``auto`` turns it on when training on CUDA."),),
    callbacks=callbacks,
    parts=(
        CudnnBenchmark,
        ShapeWatch,
    ),
    lint_rules=("LS304",),
    bench=BenchVariant({"cudnn_benchmark": "on"}, needs=("cuda",)),
    suite=(
        SuiteCase("auto", settings={"cudnn_benchmark": "auto"}, kinds=()),
        SuiteCase("shape_watch", callback=ShapeWatch),
    ),
)
