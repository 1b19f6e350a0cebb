"""Time the realistic workloads (ResNet-50, GPT-2 small) as ``baseline`` vs ``fast`` vs bench's pick.

Per variant: samples/s over the timed window (the device synchronised at its two ends only), the
ratio to ``baseline``, CUDA peak allocated memory, the data-wait share (``DataWaitMonitor``: CUDA
events on a GPU) and the MFU from Lightning's own tools: FLOPs of one training batch by
``measure_flops`` (on the meta device), FLOPs/s and MFU by ``ThroughputMonitor`` against the GPU's
dense bf16 peak, passed explicitly (Lightning's table has no entry for a plain "NVIDIA H200").
A variant without an MFU figure fails the run.

    python -m benchmarks.gpu.workloads --device cuda --size full --out OUT [--pick resnet50=pick.yaml]

Writes ``OUT/workloads.json``; ``benchmarks/gpu/summary.py`` turns it into the table and the chart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from typing import Any, Optional

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import Callback, ThroughputMonitor
from lightning.pytorch.loggers.logger import Logger

from benchmarks.gpu.models import IMAGENET_MEAN, IMAGENET_STD, build, example_batch, param_count
from lightning_speedups import preset
from lightning_speedups.callbacks import AutoProbe, DataWaitMonitor

#: dense (no sparsity) bf16 tensor-core peak per GPU, FLOP/s, from the vendors' datasheets
DENSE_BF16_PEAK = (
    ("h100 pcie", 756e12),
    ("h100 nvl", 835e12),
    ("h200 nvl", 835e12),
    ("h100", 989.4e12),  # SXM; also what a plain "NVIDIA H100 80GB HBM3" is
    ("h200", 989.4e12),  # SXM: nvidia-smi names it plainly "NVIDIA H200"
    ("gh200", 989.4e12),
    ("a100", 312e12),
    ("l40s", 362e12),
    ("l4", 121e12),
    ("a10g", 70e12),
    ("rtx 4090", 165e12),
)
#: a nominal peak for the CPU dry run (MFU there only proves the code path; it is not a figure)
CPU_NOMINAL_PEAK = 1e12


def peak_flops(device_name: str, override: Optional[float] = None) -> tuple[Optional[float], str]:
    """Dense bf16 peak FLOP/s for a device name (``PEAK_FLOPS`` / ``override`` wins), with its source."""
    if override:
        return float(override), "given"
    name = device_name.lower()
    for key, value in DENSE_BF16_PEAK:
        if key in name:
            return value, f"datasheet dense bf16 for {key!r}"
    if name == "cpu":
        return CPU_NOMINAL_PEAK, "nominal 1 TFLOP/s (CPU dry run: not a real MFU)"
    return None, f"no dense bf16 peak known for {device_name!r}: pass PEAK_FLOPS"


class MemoryLogger(Logger):
    """Keeps the last value of every metric (ThroughputMonitor logs through the trainer's loggers)."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, float] = {}

    @property
    def name(self) -> str:
        return "memory"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        self.metrics.update({k: float(v) for k, v in metrics.items()})

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class PeakThroughputMonitor(ThroughputMonitor):
    """Lightning's ``ThroughputMonitor`` with the device's peak FLOP/s passed in, not looked up by name."""

    def __init__(self, peak: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.peak = peak

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self.available_flops = int(self.peak)
        for throughput in self._throughputs.values():  # built in super().setup() with the table's None
            throughput.available_flops = self.peak


class WindowTimer(Callback):
    """Samples/s over the timed steps, synchronising the device only at the window's two ends; peak memory."""

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps
        self.n = 0
        self.samples = 0
        self.t0 = self.t1 = None
        self.peak: Optional[int] = None

    def _sync(self, pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.n == self.warmup:
            self._sync(pl_module)
            self.t0 = time.perf_counter()
        if self.n >= self.warmup:
            first = batch[0] if isinstance(batch, (list, tuple)) else batch
            self.samples += int(first.shape[0])

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.n += 1
        if self.n == self.warmup + self.steps:
            self._sync(pl_module)
            self.t1 = time.perf_counter()
            if pl_module.device.type == "cuda":
                self.peak = int(torch.cuda.max_memory_allocated(pl_module.device))

    @property
    def samples_per_s(self) -> Optional[float]:
        if self.t0 is None or self.t1 is None or self.t1 <= self.t0:
            return None
        return self.samples / (self.t1 - self.t0)


def flops_per_batch(workload: str, size: str) -> int:
    """Forward + backward FLOPs of one training batch, counted by Lightning's ``measure_flops`` on the meta device."""
    with torch.device("meta"):
        model, _, s = build(workload, size)
        batch = example_batch(workload, s, "meta")
    with warnings.catch_warnings():  # training_step's self.log() outside a Trainer: a no-op with a warning
        warnings.simplefilter("ignore")
        return int(measure_flops(model, lambda: model.training_step(batch, 0), loss_fn=lambda loss: loss))


def _variant_preset(workload: str, variant: str, pick: Optional[str]) -> Optional[Any]:
    if variant == "baseline":
        return preset("baseline")
    if variant == "fast":
        p = preset("fast")
    elif variant == "fp8":
        p = preset("fast")
        p.speedups.precision = "fp8"
    elif variant == "pick":
        if not pick:
            return None
        p = preset(pick)
    else:
        raise ValueError(variant)
    if workload == "resnet50" and variant != "baseline" and not p.speedups.device_normalize.mean:
        p.speedups.device_normalize.mean = list(IMAGENET_MEAN)  # uint8 images normalised on the device
        p.speedups.device_normalize.std = list(IMAGENET_STD)
    return p


def run_variant(
    workload: str, variant: str, args: argparse.Namespace, flops: int, peak: float, pick: Optional[str]
) -> dict[str, Any]:
    p = _variant_preset(workload, variant, pick)
    if p is None:
        return {"variant": variant, "status": "skipped", "reason": "no pick from bench"}
    pl.seed_everything(0, verbose=False)
    model, data, s = build(workload, args.size)
    model.flops_per_batch = flops  # read by ThroughputMonitor every batch
    timer = WindowTimer(args.warmup, args.steps)
    monitor = PeakThroughputMonitor(peak, batch_size_fn=lambda b: int(b[0].shape[0]), window_size=max(2, args.steps))
    parts = p.callbacks()
    probe = next((cb for cb in parts if isinstance(cb, AutoProbe)), None)
    if probe is not None:
        # the run is warmup + steps long: the probe of fast's auto parts runs anyway (its cost is in the
        # warm-up), so the timed steps are what a real fit runs after it
        probe.max_fraction = None
    wait = next((cb for cb in parts if isinstance(cb, DataWaitMonitor)), None)
    if wait is None:
        wait = DataWaitMonitor(log=False)
        parts.append(wait)
    logger = MemoryLogger()
    kwargs = p.trainer_kwargs(accelerator=args.device)
    kwargs.update(
        accelerator=args.device,
        devices=1,
        max_steps=args.warmup + args.steps,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    notes = [f"{name}: {'on' if on else 'off'} ({why})" for name, on, why in getattr(p, "_notes", [])]
    trainer = pl.Trainer(**kwargs, callbacks=[*parts, monitor, timer])
    t_start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    wall = time.perf_counter() - t_start
    mfu = logger.metrics.get("train/device/mfu")
    statuses = {getattr(cb, "part", type(cb).__name__): cb.status for cb in parts if getattr(cb, "status", None)}
    out = {
        "variant": variant,
        "status": "ok" if mfu is not None else "failed",
        "reason": None if mfu is not None else "ThroughputMonitor logged no MFU",
        "precision": str(trainer.precision),
        "samples_per_s": timer.samples_per_s,
        "peak_mem_bytes": timer.peak,
        "data_wait_fraction": wait.data_wait_fraction,
        "data_wait_timer": wait.timed_with,
        "mfu": mfu,
        "flops_per_sec": logger.metrics.get("train/device/flops_per_sec"),
        "loss": float(trainer.callback_metrics["train_loss"]) if "train_loss" in trainer.callback_metrics else None,
        "wall_s": wall,
        "parts": {k: f"{v[0]}: {v[1]}" for k, v in statuses.items()},
        "probe": None
        if probe is None or probe.result is None
        else {
            "seconds": probe.result.seconds,
            "steps": probe.result.steps,
            "skipped": probe.result.skipped,
            "decisions": {k: v[0] for k, v in probe.result.decisions.items()},
            "reasons": {k: v[1] for k, v in probe.result.decisions.items()},
        },
        "notes": notes,
    }
    del trainer, model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--size", default="full", choices=("full", "tiny"))
    ap.add_argument("--workloads", nargs="+", default=["resnet50", "gpt2"])
    ap.add_argument("--variants", nargs="+", default=["baseline", "fast", "pick"])
    ap.add_argument("--fp8", action="store_true", help="also time speedups.precision: fp8 on gpt2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pick", action="append", default=[], help="WORKLOAD=PATH of bench's --write-preset")
    ap.add_argument("--peak-flops", type=float, default=float(os.environ.get("PEAK_FLOPS") or 0) or None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("workloads: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    peak, peak_source = peak_flops(name, args.peak_flops)
    extras = {}
    for mod in ("jsonargparse", "torchao"):
        try:
            extras[mod] = __import__(mod).__version__
        except Exception as ex:  # a missing optional package is a line in the report, not a failure
            extras[mod] = f"missing ({type(ex).__name__})"
    cap = torch.cuda.get_device_capability() if args.device == "cuda" else None
    print(
        f"python {sys.version.split()[0]} | torch {torch.__version__} | lightning {pl.__version__} | cuda"
        f" {torch.version.cuda} | {name} {cap or ''} | " + " | ".join(f"{k} {v}" for k, v in extras.items()),
        flush=True,
    )
    picks = dict(item.split("=", 1) for item in args.pick)
    report: dict[str, Any] = {
        "device": name,
        "peak_flops": peak,
        "peak_source": peak_source,
        "size": args.size,
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "cuda": torch.version.cuda,
        "steps": args.steps,
        "warmup": args.warmup,
        "capability": cap,
        "packages": extras,
        "workloads": {},
    }
    failed = peak is None
    if peak is None:
        print(f"workloads: {peak_source}", file=sys.stderr)
    for workload in args.workloads:
        flops = flops_per_batch(workload, args.size)
        with torch.device("meta"):
            params = param_count(build(workload, args.size)[0])
        rows = []
        variants = list(args.variants) + (["fp8"] if args.fp8 and workload == "gpt2" else [])
        for variant in variants:
            print(f"== {workload} {variant}", flush=True)
            try:
                row = run_variant(workload, variant, args, flops, peak or 0.0, picks.get(workload))
            except Exception as ex:
                traceback.print_exc()
                row = {"variant": variant, "status": "failed", "reason": f"{type(ex).__name__}: {str(ex)[:300]}"}
            failed = failed or row["status"] == "failed"
            rows.append(row)
            print(json.dumps(row, default=str), flush=True)
        base = next((r for r in rows if r["variant"] == "baseline" and r.get("samples_per_s")), None)
        for r in rows:
            if base and r.get("samples_per_s"):
                r["ratio"] = r["samples_per_s"] / base["samples_per_s"]
        report["workloads"][workload] = {"params": params, "flops_per_batch": flops, "rows": rows}
    report["failed"] = failed
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "workloads.json"), "w") as fh:
        json.dump(report, fh, indent=1, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
