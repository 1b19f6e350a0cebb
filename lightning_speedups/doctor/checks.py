"""One check per tip T01-T24: :class:`~lightning_speedups.doctor.facts.Facts` in, one
:class:`~lightning_speedups.doctor.findings.Finding` out.

Every check returns exactly one result for its tip: ``finding`` (with evidence in numbers and the
exact fix: a ``speedups:`` preset key, a callback, or a code change), ``ok`` (checked, nothing to
change, and what was checked), or ``not-checked`` (the check cannot run here, with the reason and
where it can). Lint findings of the user's source files are added to the tip they belong to by
:func:`~lightning_speedups.doctor.runner.run_checks`, not here.

Checks never raise on missing facts: a fact that could not be read (a part of the pack that is not
available, a model that could not be inspected) turns into ``not-checked`` with its reason.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from lightning_speedups.callbacks.trainer import fused_devices, optimizer_accepts
from lightning_speedups.doctor.facts import Facts
from lightning_speedups.doctor.findings import Finding, Item

__all__ = ["CHECKS"] + [f"check_t{i:02d}" for i in range(1, 25)]

# ---------------------------------------------------------------------------------------- helpers

#: Element-wise and normalisation modules that run as separate kernels in eager mode (T22).
_ELEMENTWISE = (
    "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Hardswish", "Hardsigmoid", "Sigmoid", "Tanh", "LeakyReLU", "ELU",
    "Softplus", "Dropout", "Dropout1d", "Dropout2d", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d",
)  # fmt: skip
_BATCHNORMS = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")


def _bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _names(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(n or "<root>" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _counted(types: list[str]) -> str:
    return ", ".join(f"{n} {t}" for t, n in Counter(types).most_common())


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def _missing(facts: Facts, key: str) -> str | None:
    return facts.unavailable.get(key)


def _device_words(facts: Facts) -> str:
    return facts.device_name if facts.on_cuda else facts.device_type


def _has_cb(facts: Facts, *names: str) -> Any:
    for name in names:
        cb = facts.callback_of(name)
        if cb is not None:
            return cb
    return None


def _loader_label(i: int, n: int) -> str:
    return "train loader" if n == 1 else f"train loader {i}"


# ------------------------------------------------------------------------------------------ T01


def check_t01(facts: Facts) -> Finding:
    """T01 lr-schedule: a one-cycle / cyclic schedule stepped per epoch; a constant learning rate."""
    tip = "T01"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    if _has_cb(facts, "LRSchedule") is not None and facts.callback_of("LRSchedule").active:
        return Finding.ok(tip, "speedups.lr_schedule: " + facts.callback_of("LRSchedule").status[1])
    bad = [(name, interval) for name, interval, cyclic in facts.schedulers if cyclic and interval != "step"]
    if bad:
        name, interval = bad[0]
        return Finding.from_items(tip, [Item(
            "medium",
            f"{name} is stepped once per {interval} (interval='{interval}'): a one-cycle/cyclic schedule"
            " is meant to move every optimizer step, so over a short run it barely changes the learning rate",
            "return {'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'interval': 'step'}} from"
            " configure_optimizers, or drop it and set speedups.lr_schedule.name: onecycle (LRSchedule callback,"
            " total steps from the trainer)",
        )])
    if facts.schedulers:
        desc = ", ".join(f"{n} (interval={i})" for n, i, _ in facts.schedulers)
        return Finding.ok(tip, f"the learning rate is scheduled: {desc}")
    if not facts.optimizers:
        return Finding.ok(tip, "the model has no optimizer: nothing to schedule")
    opt = type(facts.optimizers[0]).__name__
    lrs = sorted({g.get("lr") for o in facts.optimizers for g in o.param_groups if isinstance(g.get("lr"), (int, float))})
    lr = ", ".join(f"{x:.3g}" for x in lrs) or "?"
    return Finding.from_items(tip, [Item(
        "low",
        f"constant learning rate: {opt} at lr {lr} with no scheduler",
        "try speedups.lr_schedule.name: onecycle (LRSchedule callback: peak = the optimizer's lr, stepped per"
        " optimizer step); it changes the optimisation, so compare accuracy per epoch with"
        " `python -m lightning_speedups bench`",
    )])


# ------------------------------------------------------------------------------------------ T02


def _auto_workers(facts: Facts, loader: Any) -> Any:
    from lightning_speedups.functional.loaders import auto_num_workers

    acc = "cuda" if facts.on_cuda else facts.device_type
    return auto_num_workers(
        accelerator=acc, devices=max(1, facts.num_devices), cpus=facts.cpus, dataset=getattr(loader, "dataset", None)
    )


def check_t02(facts: Facts) -> Finding:
    """T02 loader-workers: measured data wait, workers against the CPUs really available."""
    tip = "T02"
    if not facts.train_loaders:
        return Finding.not_checked(tip, facts.run_note() or "no train DataLoader found", "pass a DataLoader to fit")
    items: list[Item] = []
    notes: list[str] = []
    f = facts.data_wait_fraction
    wait = (
        f"{f:.0%} of step time waiting for data over {_plural(facts.data_wait_steps, 'step')}" if f is not None else None
    )
    n = len(facts.train_loaders)
    for i, loader in enumerate(facts.train_loaders):
        nw = int(getattr(loader, "num_workers", 0) or 0)
        label = _loader_label(i, n)
        try:
            choice = _auto_workers(facts, loader)
        except Exception as err:  # noqa: BLE001
            choice = None
            notes.append(f"could not decide an automatic worker count: {err}")
        auto = f"num_workers='auto' picks {choice.num_workers} here ({choice.reason})" if choice else ""
        if f is not None and f > 0.3:
            sev = "high" if f > 0.5 else "medium"
            if choice is not None and choice.num_workers > nw:
                fix = "speedups.loaders.num_workers: auto (LoaderTuning callback) and speedups.loaders.persistent_workers: true"
            else:
                fix = (
                    "make per-sample work cheaper (decode or augment on the device, cache decoded samples), use"
                    " more CPUs, or faster storage (T19); more workers than the CPUs only compete"
                )
            items.append(Item(sev, f"{wait}; {label} has num_workers={nw}" + (f"; {auto}" if auto else ""), fix, "runtime"))
            continue
        per_process = None
        if facts.cpus:
            per_process = max(1, facts.cpus // max(1, facts.num_devices if facts.on_cuda else 1))
        if per_process is not None and nw > per_process:
            items.append(Item(
                "medium",
                f"{label} has num_workers={nw}, more than the {per_process} CPU(s) this process may use ({facts.cpus_reason}):"
                " workers compete with each other and with the training step",
                "speedups.loaders.num_workers: auto (LoaderTuning callback)",
            ))
            continue
        if choice is not None and nw == 0 and choice.num_workers > 0:
            items.append(Item(
                "low",
                f"{label} loads in the main process (num_workers=0)" + (f" while {wait}" if wait else "") + f"; {auto}",
                "speedups.loaders.num_workers: auto (LoaderTuning callback)",
            ))
            continue
        if nw > 0 and not getattr(loader, "persistent_workers", False):
            items.append(Item(
                "low",
                f"{label} restarts its {nw} worker processes every epoch (persistent_workers=False)",
                "speedups.loaders.persistent_workers: true (or DataLoader(..., persistent_workers=True))",
            ))
            continue
        notes.append(f"{label}: num_workers={nw}" + (f" ({auto})" if auto else ""))
    if items:
        return Finding.from_items(tip, items, notes)
    head = wait or (facts.run_note() and f"data wait not measured: {facts.run_note()}") or "data wait not measured"
    return Finding.ok(tip, f"{head}; " + "; ".join(notes))


# ------------------------------------------------------------------------------------------ T03


def check_t03(facts: Facts) -> Finding:
    """T03 pin-memory: pinned loaders when batches go to CUDA, never on the CPU."""
    tip = "T03"
    if not facts.train_loaders:
        return Finding.not_checked(tip, facts.run_note() or "no train DataLoader found")
    n = len(facts.train_loaders)
    pins = [bool(getattr(dl, "pin_memory", False)) for dl in facts.train_loaders]
    if facts.on_cuda:
        unpinned = [_loader_label(i, n) for i, p in enumerate(pins) if not p]
        if unpinned:
            return Finding.from_items(tip, [Item(
                "medium",
                f"{_names(unpinned)} hand(s) batches to {facts.device_name} from pageable memory (pin_memory=False):"
                " every copy goes through a staging buffer first",
                "speedups.loaders.pin_memory: auto (LoaderTuning callback), or DataLoader(..., pin_memory=True)",
            )])
        return Finding.ok(tip, f"batches go to {facts.device_name} from pinned memory (pin_memory=True)")
    if any(pins):
        return Finding.from_items(tip, [Item(
            "low",
            f"pin_memory=True while batches stay on {facts.device_type}: pinning only costs a copy and locked memory there",
            "speedups.loaders.pin_memory: auto (pins only for CUDA), or DataLoader(..., pin_memory=False)",
        )])
    return Finding.not_checked(
        tip,
        f"batches stay on {facts.device_type}: pinned memory only matters for copies to a CUDA device (pin_memory=False is right here)",
        "run the doctor on the GPU machine",
    )


# ------------------------------------------------------------------------------------------ T04


def check_t04(facts: Facts) -> Finding:
    """T04 max-batch: peak device memory against the device's, at the current batch size."""
    tip = "T04"
    lb = facts.callback_of("LargestBatch")
    if lb is not None and lb.status is not None:
        return Finding.ok(tip, "LargestBatch: " + lb.status[1])
    bs = f"batch size {facts.batch_size}" if facts.batch_size else "the current batch size"
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"the largest batch is bounded by GPU memory; on {facts.device_type} a larger batch rarely shortens an"
            f" epoch ({bs} now)",
            "run the doctor on the GPU machine; on CPU speedups.largest_batch.memory_budget bounds the search",
        )
    if facts.peak_memory is None or not facts.total_memory:
        return Finding.not_checked(tip, facts.run_note() or "peak memory was not measured")
    share = facts.peak_memory / facts.total_memory
    ev = f"peak memory {_bytes(facts.peak_memory)} of {_bytes(facts.total_memory)} ({share:.0%}) at {bs}"
    if share < 0.5:
        return Finding.from_items(tip, [Item(
            "medium" if share < 0.25 else "low",
            ev + ": a larger batch fits",
            "speedups.largest_batch.enabled: true (LargestBatch callback: the largest batch that fits, rounded to a"
            " multiple of 8, learning rate scaled by the linear rule)",
            "runtime",
        )])
    return Finding.ok(tip, ev)


# ------------------------------------------------------------------------------------------ T05


def check_t05(facts: Facts) -> Finding:
    """T05 amp: the precision against what is fastest on this hardware."""
    tip = "T05"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    try:
        from lightning_speedups.functional.precision import resolve_precision
    except ImportError as err:
        return Finding.not_checked(tip, f"part not available: functional.precision ({err})")
    acc = "cuda" if facts.on_cuda else facts.device_type
    best, why = resolve_precision("auto", acc)
    current = facts.precision
    full = current in ("32-true", "32", "64-true", "64")
    if full and best not in (None, "32-true", "32"):
        items = [Item(
            "high" if facts.on_cuda else "medium",
            f"training in {current} on {_device_words(facts)}, where {best} is faster ({why})",
            f"speedups.precision: auto ({best} here), or trainer.precision: {best}",
        )]
        if facts.on_cuda and facts.matmul_precision == "highest":
            try:
                from lightning_speedups.functional.precision import cuda_supports_bf16

                if cuda_supports_bf16():
                    items.append(Item(
                        "medium",
                        "fp32 matmuls run at full precision (float32_matmul_precision='highest') on a GPU with TF32 units",
                        "speedups.tf32: auto",
                    ))
            except Exception:  # noqa: BLE001, S110 - TF32 is a bonus line; the precision finding stands alone
                pass
        return Finding.from_items(tip, items)
    if not facts.on_cuda and "bf16" in current and best in ("32-true", "32"):
        return Finding.from_items(tip, [Item(
            "low",
            f"{current} on a CPU where bf16 is not expected to be faster ({why}): autocast adds casts",
            "speedups.precision: auto (32-true here); keep bf16 only if you need the memory (speedups.precision: half)",
        )])
    if full:
        return Finding.ok(tip, f"{current} is the fastest here: {why}")
    return Finding.ok(tip, f"{current} on {_device_words(facts)} (mixed / low precision already)")


# ------------------------------------------------------------------------------------------ T06


def check_t06(facts: Facts) -> Finding:
    """T06 optimizer: fused / foreach implementations of the built-in optimizers."""
    tip = "T06"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    if not facts.optimizers:
        return Finding.ok(tip, "the model has no optimizer")
    items: list[Item] = []
    oks: list[str] = []
    scaler = "16-mixed" in facts.precision or facts.precision in ("16", "16-true")
    for opt in facts.optimizers:
        name = type(opt).__name__
        params = [p for g in opt.param_groups for p in g["params"]]
        if type(opt).__module__.split(".")[0] != "torch" or not params:
            oks.append(f"{name} is not a torch built-in: nothing to switch")
            continue
        groups = opt.param_groups
        fused = any(g.get("fused") for g in groups)
        foreach = any(g.get("foreach") for g in groups)
        devices = {p.device.type for p in params}
        can_fuse = (
            optimizer_accepts(opt, "fused") and len(devices) == 1 and devices <= set(fused_devices())
            and all(p.is_floating_point() for p in params) and not opt.defaults.get("differentiable", False)
        )
        dev = next(iter(devices)) if len(devices) == 1 else "several devices"
        if fused:
            if scaler and (facts.gradient_clip_val or _has_cb(facts, "AdaptiveGradientClipping")):
                items.append(Item(
                    "high",
                    f"{name}(fused=True) under {facts.precision} with gradient clipping: a fused optimizer unscales"
                    " inside its step, so Lightning cannot clip (it raises, or AGC sees scaled gradients)",
                    "speedups.optimizer: auto (picks foreach here), or foreach=True instead of fused=True",
                ))
            else:
                oks.append(f"{name} is fused")
            continue
        default_foreach = (
            not foreach and all(g.get("foreach") is None for g in groups) and optimizer_accepts(opt, "foreach")
            and devices <= {"cuda", "xpu", "mtia"}
        )
        impl = "foreach" if foreach else ("foreach (torch's default on CUDA)" if default_foreach else "per-parameter for-loop")
        n = len(params)
        if can_fuse:
            sev = "low" if (foreach or default_foreach or not facts.on_cuda) else "medium"
            items.append(Item(
                sev,
                f"{name} runs the {impl} implementation over {_plural(n, 'parameter tensor')} on {dev};"
                f" a fused kernel exists for {dev}",
                f"speedups.optimizer: auto (FusedOptimizer callback), or {name}(..., fused=True)",
            ))
        elif not (foreach or default_foreach) and optimizer_accepts(opt, "foreach") and n > 1:
            items.append(Item(
                "low",
                f"{name} runs a per-parameter for-loop over {_plural(n, 'parameter tensor')} on {dev}",
                f"speedups.optimizer: auto (FusedOptimizer callback), or {name}(..., foreach=True)",
            ))
        else:
            oks.append(f"{name} uses {impl}")
    if items:
        return Finding.from_items(tip, items, oks)
    return Finding.ok(tip, "; ".join(oks))


# ------------------------------------------------------------------------------------------ T07


def check_t07(facts: Facts) -> Finding:
    """T07 cudnn-benchmark: benchmark mode against convolutions and changing input shapes."""
    tip = "T07"
    tracker = facts.shape_tracker
    shapes = (
        f"{_plural(tracker.distinct_shapes, 'distinct input shape')} in {_plural(tracker.steps, 'step')}"
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
    return Finding.from_items(tip, [Item(
        "medium",
        f"cudnn.benchmark is off with {_plural(convs, 'convolution')} and fixed input shapes ({shapes or 'first batch only'})",
        "speedups.cudnn_benchmark: auto (CudnnBenchmark callback: on for CUDA, off again if shapes start changing)",
    )])


# ------------------------------------------------------------------------------------------ T08


def check_t08(facts: Facts) -> Finding:
    """T08 no-sync: device synchronisations in the training step (counted on CUDA)."""
    tip = "T08"
    watcher = facts.sync_watcher
    if not facts.on_cuda or watcher is None:
        linted = f"; lint read {_plural(len(facts.lint_files), 'source file')} for .item()/.cpu()/print(tensor) in steps" if facts.lint_ran and facts.lint_files else ""
        reason = (
            f"device synchronisations exist only with a CUDA device (this run: {facts.device_type})"
            if not facts.on_cuda
            else (facts.run_note() or "the sync watcher did not run")
        )
        return Finding.not_checked(tip, reason + linted, "run the doctor on the GPU machine (SyncGuard counts them there)")
    found = watcher.findings()
    if found:
        items = [Item(f["severity"], f["evidence"], f["fix"], "runtime") for f in found[:8]]
        notes = [watcher.summary()]
        return Finding.from_items(tip, items, notes)
    return Finding.ok(tip, watcher.summary() if watcher.total else f"no device synchronisation in {_plural(watcher.windows, 'training step')}")


# ------------------------------------------------------------------------------------------ T09


def check_t09(facts: Facts) -> Finding:
    """T09 activation-checkpointing: memory pressure and the repeated blocks that could be checkpointed."""
    tip = "T09"
    if _missing(facts, "checkpointing") and not facts.checkpointed:
        return Finding.not_checked(tip, _missing(facts, "checkpointing"))
    if facts.checkpointed:
        return Finding.ok(tip, f"{_plural(len(facts.checkpointed), 'module')} checkpointed ({_names(facts.checkpointed)})")
    cands = facts.checkpoint_candidates
    cand = f"{_plural(len(cands), 'repeated block')} could be checkpointed ({_names(cands)})" if cands else "no repeated blocks to checkpoint automatically"
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"memory pressure is measured on a CUDA device (this run: {facts.device_type}); {cand}",
            "run the doctor on the GPU machine; speedups.checkpointing.targets: [auto] when memory runs short",
        )
    if facts.peak_memory is None or not facts.total_memory:
        return Finding.not_checked(tip, facts.run_note() or "peak memory was not measured")
    share = facts.peak_memory / facts.total_memory
    ev = f"peak memory {_bytes(facts.peak_memory)} of {_bytes(facts.total_memory)} ({share:.0%})"
    if share > 0.85:
        fix = (
            "speedups.checkpointing.targets: [auto] (ActivationCheckpointing callback)" if cands
            else "speedups.checkpointing.targets: [<block class name>] for the largest blocks (ActivationCheckpointing)"
        )
        return Finding.from_items(tip, [Item("medium", f"{ev}: memory is the limit; {cand}", fix, "runtime")])
    return Finding.ok(tip, f"{ev}: memory is not the limit, checkpointing would only add compute")


# ------------------------------------------------------------------------------------------ T10


def check_t10(facts: Facts) -> Finding:
    """T10 grad-accumulation: samples per optimizer step, and BatchNorm on small micro-batches."""
    tip = "T10"
    if facts.batch_size is None:
        return Finding.not_checked(tip, facts.run_note() or "the train loader has no batch size")
    acc = facts.accumulate_grad_batches
    eff = facts.batch_size * facts.world_size * acc
    ev = f"{facts.batch_size} per batch x {facts.world_size} process(es) x {acc} accumulated = {eff:,} samples per optimizer step"
    bns = sum(n for t, n in facts.module_counts.items() if t in _BATCHNORMS)
    if acc > 1 and bns and facts.batch_size < 16:
        return Finding.from_items(tip, [Item(
            "low",
            f"{ev}, but {_plural(bns, 'BatchNorm layer')} normalise each micro-batch of {facts.batch_size}: their"
            " statistics stay those of the small batch",
            "a larger micro-batch (speedups.largest_batch.enabled: true) with speedups.effective_batch_size, or"
            " GroupNorm / LayerNorm instead of BatchNorm",
        )])
    cb = facts.callback_of("EffectiveBatchSize")
    if cb is not None and cb.status is not None:
        return Finding.ok(tip, "EffectiveBatchSize: " + cb.status[1])
    return Finding.ok(
        tip,
        ev + ("" if acc > 1 else "; accumulation is for a batch that does not fit (speedups.effective_batch_size)"),
    )


# ------------------------------------------------------------------------------------------ T11


def check_t11(facts: Facts) -> Finding:
    """T11 ddp: DataParallel in the model, unused GPUs, DDP without its fast settings."""
    tip = "T11"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    items: list[Item] = []
    if facts.data_parallel_modules:
        items.append(Item(
            "high",
            f"the model wraps {_names(facts.data_parallel_modules)} in nn.DataParallel: one process drives every GPU"
            " through the GIL and copies the model each step",
            "remove nn.DataParallel and train with DDP: trainer.devices: N with --config ddp.yaml (speedups.ddp.enabled: true)",
        ))
    used = facts.num_devices * facts.num_nodes
    if facts.configured_devices is not None:
        used_note = f" (the config asks for devices={facts.configured_devices}; the doctor ran one)"
    else:
        used_note = ""
    if facts.on_cuda and facts.cuda_count > facts.num_devices and facts.configured_devices is None:
        items.append(Item(
            "medium",
            f"{facts.cuda_count} CUDA devices visible, training uses {facts.num_devices}",
            f"trainer.devices: {facts.cuda_count} with --config ddp.yaml (speedups.ddp.enabled: true)",
        ))
    strategy = facts.strategy_obj
    if strategy is not None and "DDP" in facts.strategy and (used > 1 or facts.configured_devices is not None):
        kwargs = getattr(strategy, "_ddp_kwargs", {}) or {}
        if not kwargs.get("gradient_as_bucket_view"):
            items.append(Item(
                "low",
                f"{facts.strategy} without gradient_as_bucket_view{used_note}: gradients are copied into the"
                " communication buckets every step",
                "speedups.ddp.enabled: true (bucket views, static graph, compression hooks on CUDA)",
            ))
    if items:
        return Finding.from_items(tip, items)
    if used > 1 or facts.configured_devices is not None:
        return Finding.ok(tip, f"{facts.strategy} over {facts.configured_devices or used} device(s){used_note}")
    return Finding.ok(tip, f"one process on one {facts.device_type} device ({facts.strategy}): nothing to distribute")


# ------------------------------------------------------------------------------------------ T12


def check_t12(facts: Facts) -> Finding:
    """T12 grads-to-none: gradients zeroed instead of set to None after the zero-grad step."""
    tip = "T12"
    if _missing(facts, "grads"):
        return Finding.not_checked(tip, _missing(facts, "grads"))
    z = facts.zeroed_grads
    if z is not None and z.found:
        try:
            from lightning_speedups.functional.grads import FIX
        except ImportError:
            FIX = "optimizer.zero_grad(set_to_none=True)"
        examples = _names(z.names, 3)
        culprit = f"; likely source: {facts.zeroed_culprit}" if facts.zeroed_culprit else ""
        return Finding.from_items(tip, [Item("low", f"after the zero-grad step {z.summary()} (e.g. {examples}){culprit}", FIX, "runtime")])
    if facts.grads_checked:
        return Finding.ok(tip, f"gradients were None after the zero-grad step in {_plural(facts.grads_checked, 'checked step')}")
    return Finding.not_checked(tip, facts.run_note() or "no zero-grad step was watched")


# ------------------------------------------------------------------------------------------ T13 / T20: lint


def _lint_only(tip: str, facts: Facts, what: str) -> Finding:
    if facts.lint_error:
        return Finding.not_checked(tip, f"lint could not run: {facts.lint_error}")
    if not facts.lint_ran:
        return Finding.not_checked(tip, "lint was turned off (--no-lint)", "run without --no-lint, or `python -m lightning_speedups lint PATH`")
    if not facts.lint_files:
        return Finding.not_checked(
            tip,
            "no source file of the model or data classes was found to lint",
            "`python -m lightning_speedups lint PATH` on your training code",
        )
    return Finding.ok(tip, f"lint found no {what} in {_names([_short(p) for p in facts.lint_files], 3)}")


def _short(path: str) -> str:
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    return rel if not rel.startswith("..") else path


def check_t13(facts: Facts) -> Finding:
    """T13 zero-copy: ``torch.tensor(<numpy array>)`` copies (lint of the model's and data's source)."""
    return _lint_only("T13", facts, "torch.tensor(<numpy array>) or torch.tensor([tensors])")


# ------------------------------------------------------------------------------------------ T14


def check_t14(facts: Facts) -> Finding:
    """T14 debug-off: anomaly detection, profilers, NVTX, deterministic mode and friends left on."""
    tip = "T14"
    if _missing(facts, "debug_tools"):
        return Finding.not_checked(tip, _missing(facts, "debug_tools"))
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    items = [Item(t.severity, f"{t.name}: {t.evidence}; cost: {t.cost}", t.fix) for t in facts.debug_tools]
    deliberate = [t.name for t in facts.deliberate_tools]
    notes = [f"turned on deliberately (debug preset): {', '.join(deliberate)}"] if deliberate else []
    if items:
        return Finding.from_items(tip, items, notes)
    text = "no debugging tool left on (anomaly detection, profilers, NVTX, deterministic mode, CUDA_LAUNCH_BLOCKING, tracers)"
    if deliberate:
        text += f"; on deliberately through the debug preset: {', '.join(deliberate)}"
    return Finding.ok(tip, text)


# ------------------------------------------------------------------------------------------ T15


def check_t15(facts: Facts) -> Finding:
    """T15 grad-clipping: gradient norms of the first steps when nothing clips them."""
    tip = "T15"
    if facts.gradient_clip_val:
        return Finding.ok(tip, f"gradients clipped by {facts.gradient_clip_algorithm or 'norm'} at {facts.gradient_clip_val}")
    agc = facts.callback_of("AdaptiveGradientClipping")
    if agc is not None:
        return Finding.ok(tip, "adaptive gradient clipping (AGC) is on")
    norms = facts.grad_norms
    if not norms:
        return Finding.not_checked(tip, facts.run_note() or "no optimizer step was watched")
    finite = [x for x in norms if math.isfinite(x)]
    bad = len(norms) - len(finite)
    scaler = "16-mixed" in facts.precision
    if bad and not scaler:
        first = next(i for i, x in enumerate(norms) if not math.isfinite(x))
        return Finding.from_items(tip, [Item(
            "high",
            f"the gradient norm was not finite in {bad} of {len(norms)} steps (first at step {first}) and nothing clips it",
            "speedups.grad_clip.algorithm: norm (value 1.0), or agc; and look for the cause (learning rate, inputs: T18)",
            "runtime",
        )])
    if not finite:
        return Finding.ok(tip, f"the fp16 grad scaler skipped all {len(norms)} watched steps (overflow while it calibrates)")
    lo, hi = min(finite), max(finite)
    med = sorted(finite)[len(finite) // 2]
    rng = f"gradient norms {lo:.3g} to {hi:.3g} over {_plural(len(finite), 'step')}"
    if hi > 1e3 or (med > 0 and hi > 50 * med):
        return Finding.from_items(tip, [Item(
            "medium",
            f"{rng} with no clipping: a jump to {hi:.3g} (median {med:.3g})",
            "speedups.grad_clip.algorithm: norm (value 1.0), or agc (AdaptiveGradientClipping, no threshold to tune)",
            "runtime",
        )])
    return Finding.ok(tip, f"no clipping; {rng}: no explosion seen")


# ------------------------------------------------------------------------------------------ T16


def check_t16(facts: Facts) -> Finding:
    """T16 conv-bias: convolutions that feed only a BatchNorm and keep a bias."""
    tip = "T16"
    if _missing(facts, "conv_bias"):
        return Finding.not_checked(tip, _missing(facts, "conv_bias"))
    model = facts.model
    plan = facts.conv_bias_plan
    if model is None or plan is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    removal = facts.callback_of("ConvBiasRemoval")
    removed = list(getattr(removal, "removed", []) or []) if removal is not None else []
    if plan.pairs:
        convs = [model.get_submodule(c) for c in plan.pairs]
        n_params = sum(c.bias.numel() for c in convs if getattr(c, "bias", None) is not None)
        kinds = Counter(type(c).__name__ for c in convs)
        kind = " / ".join(kinds)
        pairs = [f"{c} -> {b}" for c, b in plan.pairs.items()]
        return Finding.from_items(tip, [Item(
            "low",
            f"{len(convs)} {kind} layer{'s' if len(convs) != 1 else ''} feed a BatchNorm and keep a bias:"
            f" {n_params:,} parameters ({_names(pairs, 3)})",
            "speedups.conv_bias: true (ConvBiasRemoval callback, outputs unchanged), or bias=False in those convolutions",
        )], [f"{len(plan.skipped)} other biased convolution(s) keep their bias"] if plan.skipped else [])
    if removed:
        return Finding.ok(tip, f"ConvBiasRemoval removed {_plural(len(removed), 'conv bias', 'conv biases')} ({_names(removed, 3)})")
    n_convs = sum(n for t, n in facts.module_counts.items() if t.startswith("Conv"))
    if not n_convs:
        return Finding.ok(tip, "the model has no convolution")
    if plan.skipped:
        first, why = next(iter(plan.skipped.items()))
        return Finding.ok(tip, f"no convolution feeds only a BatchNorm with a bias; {len(plan.skipped)} biased one(s) must keep it (e.g. {first}: {why})")
    return Finding.ok(tip, f"none of the {_plural(n_convs, 'convolution')} keeps a bias in front of a BatchNorm")


# ------------------------------------------------------------------------------------------ T17


def check_t17(facts: Facts) -> Finding:
    """T17 no-grad-eval: validation steps that build autograd graphs."""
    tip = "T17"
    if _missing(facts, "eval"):
        return Finding.not_checked(tip, _missing(facts, "eval"))
    if facts.eval_findings:
        items = [Item(f.get("severity", "medium"), f["evidence"], f["fix"], "runtime") for f in facts.eval_findings]
        return Finding.from_items(tip, items)
    if facts.eval_batches_checked:
        return Finding.ok(tip, f"{_plural(facts.eval_batches_checked, 'validation batch', 'validation batches')} ran without autograd")
    if facts.has_eval_loop is False:
        return Finding.not_checked(
            tip, "the model has no validation loop (no validation_step or no val loader): nothing evaluates during fit",
            "NoGradEvalCheck() on trainer.validate / test / predict",
        )
    return Finding.not_checked(tip, facts.run_note() or "no validation batch ran in the watched steps", "trainer.num_sanity_val_steps > 0")


# ------------------------------------------------------------------------------------------ T18


def check_t18(facts: Facts) -> Finding:
    """T18 input-norm: statistics of the floating-point inputs of the first batches."""
    tip = "T18"
    if _missing(facts, "input_stats"):
        return Finding.not_checked(tip, _missing(facts, "input_stats"))
    if not facts.input_batches:
        return Finding.not_checked(tip, facts.run_note() or "no training batch was seen")
    batches = _plural(facts.input_batches, "batch", "batches")
    items: list[Item] = []
    for name, problems in facts.input_problems.items():
        s = facts.input_stats.get(name)
        stats = f"mean {s.mean:.1f} and std {s.std:.1f} (min {s.min:.4g}, max {s.max:.4g})" if s is not None else ""
        raw = any("0..255" in p for p in problems)
        items.append(Item(
            "medium",
            f"inputs of {name} have {stats} over {batches}: " + "; ".join(problems),
            (
                "hand uint8 images to the loader and add the DeviceNormalize(mean=..., std=...) callback (normalised on"
                " the device, 4x fewer bytes over the bus), or normalise in the dataset: (x / 255 - mean) / std"
                if raw else
                "normalise in the dataset or the DataModule ((x - mean) / std per channel), or with the"
                " DeviceNormalize callback"
            ),
            "runtime",
        ))
    if facts.on_cuda and not items:
        for t in facts.batch:
            if t.floating and len(t.shape) == 4 and t.shape[1] in (1, 3, 4) and t.dtype == "float32":
                items.append(Item(
                    "low",
                    f"{t.name} crosses the bus as float32 images ({_bytes(t.nbytes)} per batch): uint8 is 4x fewer bytes",
                    "return uint8 images from the dataset and add DeviceNormalize(mean=..., std=...) (normalised on the device)",
                    "runtime",
                ))
                break
    if items:
        return Finding.from_items(tip, items)
    if not facts.input_stats:
        kinds = ", ".join(f"{t.name} {t.dtype}" for t in facts.batch[:3]) or "none"
        return Finding.ok(tip, f"no floating-point inputs to normalise ({kinds})")
    desc = "; ".join(f"{n}: mean {s.mean:.2f}, std {s.std:.2f}" for n, s in list(facts.input_stats.items())[:3])
    return Finding.ok(tip, f"inputs look normalised over {batches} ({desc})")


# ------------------------------------------------------------------------------------------ T19


def check_t19(facts: Facts) -> Finding:
    """T19 fast-storage: where the data lives, its measured read rate, and the data-wait share."""
    tip = "T19"
    f = facts.data_wait_fraction
    wait = f"; {f:.0%} of step time waiting for data" if f is not None else ""
    if _missing(facts, "storage"):
        return Finding.not_checked(tip, _missing(facts, "storage"))
    rep = facts.storage
    if rep is not None:
        if rep.problems:
            sev = "high" if (f is not None and f > 0.3) else "medium" if (rep.is_network or rep.is_fuse or rep.rotational) else "low"
            return Finding.from_items(tip, [Item(
                sev,
                f"{rep.summary()}: " + "; ".join(rep.problems) + wait,
                "copy the data to a local SSD (or node-local scratch) before training",
                "static",
            )])
        return Finding.ok(tip, rep.summary() + wait)
    if facts.storage_error:
        return Finding.not_checked(tip, f"could not inspect {facts.storage_root}: {facts.storage_error}")
    if facts.data_in_memory:
        return Finding.ok(tip, "the training data is in memory (TensorDataset): no storage on the input path" + wait)
    return Finding.not_checked(
        tip,
        "no data directory found on the DataModule or dataset (attributes root / data_dir / files)" + wait,
        "StorageCheck(root='/path/to/data') reports the file system and the measured read rate",
    )


# ------------------------------------------------------------------------------------------ T20


def check_t20(facts: Facts) -> Finding:
    """T20 on-device: tensors created on the CPU and then moved (lint of the model's and data's source)."""
    return _lint_only("T20", facts, "tensor created on the CPU and then moved with .cuda()/.to(device)")


# ------------------------------------------------------------------------------------------ T21


def check_t21(facts: Facts) -> Finding:
    """T21 non-blocking: batches reaching CUDA from unpinned memory cannot overlap the copy."""
    tip = "T21"
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"batches stay on {facts.device_type}: there is no host-to-device copy to overlap",
            "run the doctor on the GPU machine",
        )
    if facts.unpinned:
        items = [
            Item(
                "medium",
                f"{where} hands over {_names(names, 3)} from unpinned memory: Lightning's non_blocking copies to"
                f" {facts.device_name} cannot overlap compute",
                "speedups.loaders.pin_memory: auto (LoaderTuning callback), or DataLoader(..., pin_memory=True)",
                "runtime",
            )
            for where, names in facts.unpinned.items()
        ]
        return Finding.from_items(tip, items)
    if facts.pinned_checked:
        return Finding.ok(tip, "the first train batch came from pinned memory: its copy overlaps compute")
    return Finding.not_checked(tip, facts.run_note() or "the first batch was not checked before its transfer")


# ------------------------------------------------------------------------------------------ T22


def check_t22(facts: Facts) -> Finding:
    """T22 fusion: whether element-wise work is compiled (``torch.compile``) or runs op by op."""
    tip = "T22"
    if _missing(facts, "compile"):
        return Finding.not_checked(tip, _missing(facts, "compile"))
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    compiled = [n for n, s in facts.compile_status.items() if s == "compiled"]
    fallback = {n: s for n, s in facts.compile_status.items() if s.startswith("eager")}
    if fallback:
        name, why = next(iter(fallback.items()))
        return Finding.from_items(tip, [Item(
            "low",
            f"compilation fell back to eager for {_names(list(fallback))} ({name}: {why})",
            "fix the graph break named in the reason, or leave that module out: speedups.compile.modules: [...]",
            "runtime",
        )], [f"{len(compiled)} module(s) compiled"] if compiled else [])
    if compiled:
        return Finding.ok(tip, f"{_plural(len(compiled), 'module')} compiled ({_names(compiled)})")
    elementwise = {t: n for t, n in facts.module_counts.items() if t in _ELEMENTWISE}
    total = sum(elementwise.values())
    desc = ", ".join(f"{t} x{n}" for t, n in sorted(elementwise.items(), key=lambda kv: -kv[1])[:4])
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"whether torch.compile pays off on {facts.device_type} depends on the model and is measured, not predicted"
            f" ({_plural(total, 'element-wise / normalisation module')} run eagerly{': ' + desc if desc else ''})",
            "`python -m lightning_speedups bench --config <yours>` times speedups.compile.enabled: true against eager",
        )
    if not total:
        return Finding.ok(tip, "no element-wise or normalisation modules to fuse")
    return Finding.from_items(tip, [Item(
        "low",
        f"not compiled: {_plural(total, 'element-wise / normalisation module')} ({desc}) run as separate kernels",
        "speedups.compile.enabled: true (CompileModules callback; compile time is paid in the first steps: bench it)",
    )])


# ------------------------------------------------------------------------------------------ T23


def check_t23(facts: Facts) -> Finding:
    """T23 multiple-of-8: layer, batch and input sizes that tensor cores cannot use fully."""
    tip = "T23"
    if _missing(facts, "alignment"):
        return Finding.not_checked(tip, _missing(facts, "alignment"))
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    found = facts.misaligned
    listed = "; ".join(str(m) for m in found[:6]) + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
    if not facts.on_cuda:
        text = f"sizes only matter for tensor cores (CUDA with 16-bit precision; this run: {facts.device_type})"
        if found:
            text += f"; {_plural(len(found), 'size')} not a multiple of 8: {listed}"
        return Finding.not_checked(tip, text, "run the doctor on the GPU machine with speedups.precision: auto")
    if not found:
        return Finding.ok(tip, "every Linear / Conv / Embedding size, the batch size and the input sizes are multiples of 8")
    return Finding.from_items(tip, [Item(
        "medium" if facts.half_precision else "low",
        f"{_plural(len(found), 'size')} not a multiple of 8: {listed}",
        "round them up (the suggested value after each ->); for a vocabulary or class count use"
        " lightning_speedups.functional.alignment.pad_embedding / pad_linear_out (outputs unchanged)",
    )])


# ------------------------------------------------------------------------------------------ T24


def check_t24(facts: Facts) -> Finding:
    """T24 channels-last: 4D/5D convolution weights and input batches in NCHW layout."""
    tip = "T24"
    if _missing(facts, "channels_last"):
        return Finding.not_checked(tip, _missing(facts, "channels_last"))
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    mods = facts.channels_last_modules
    if not mods:
        return Finding.ok(tip, "the model has no 4D/5D convolution weights: nothing to convert")
    nchw = [(n, t) for n, t, layout in mods if layout == "nchw"]
    cl = [(n, t) for n, t, layout in mods if layout == "channels_last"]
    inputs = [t for t in facts.batch if t.nchw]
    input_text = f"; inputs {_names([f'{t.name} {t.shape}' for t in inputs], 2)} arrive NCHW" if inputs else ""
    where = (
        "the gain is largest on tensor-core GPUs with AMP (on CPU measure it with bench)"
        if not (facts.on_cuda and facts.half_precision)
        else f"on {facts.device_name} with {facts.precision} the NHWC kernels skip layout transposes"
    )
    sev = "medium" if facts.on_cuda and facts.half_precision else "low"
    fix = "speedups.channels_last: true (ChannelsLast callback: model and 4D/5D batches in NHWC, outputs unchanged)"
    if nchw:
        if not cl:
            kind = _counted([t for _, t, _ in mods])
            text = f"{kind} layer{'s' if len(mods) != 1 else ''} hold 4D/5D weights in NCHW (contiguous) layout, none in channels_last"
        else:
            text = f"{_counted([t for _, t in nchw])} of {len(mods)} layers with 4D/5D weights still hold NCHW weights"
        return Finding.from_items(tip, [Item(sev, f"{text}{input_text}; {where}", fix)])
    if inputs and cl:
        return Finding.from_items(tip, [Item(
            "low",
            f"the model's {len(cl)} layers with 4D/5D weights are channels_last but {input_text[2:]}: the first"
            " convolution converts them every step",
            fix,
            "runtime",
        )])
    if not cl:
        return Finding.ok(tip, f"the {_plural(len(mods), 'layer')} with 4D/5D weights are the same in both layouts (one input channel, 1x1 kernels)")
    return Finding.ok(tip, f"{_plural(len(cl), 'layer')} with 4D/5D weights in channels_last")


#: The check of each tip, in registry order.
CHECKS: dict[str, Callable[[Facts], Finding]] = {f"T{i:02d}": globals()[f"check_t{i:02d}"] for i in range(1, 25)}
