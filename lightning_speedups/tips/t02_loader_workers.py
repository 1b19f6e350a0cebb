"""T02 loader-workers: DataLoader workers decided from the CPUs really available.

Card:
    Seeds: A#2, B#2 (claim: 2x on one epoch (4 workers + pinned memory)).
    What it does: LoaderTuning rebuilds the user's own DataLoaders (sampler, collate and the rest
    kept) with num_workers from the CPUs this process may use (affinity and cgroup quota),
    persistent workers and prefetch; DataWaitMonitor measures the share of each step spent waiting
    for data.
    Expected gain: up to 2x per epoch when loading is the bottleneck (measured 1.24x from persistent
    workers here).
    When it hurts: on a 2-core CPU machine extra workers compete with the training step (0.75x
    measured); an IterableDataset fed by the training loop would see stale copies.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from lightning_speedups.callbacks import DataWaitMonitor, LoaderTuning
from lightning_speedups.functional import auto_num_workers
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import loader_label, plural
from lightning_speedups.tips.record import (
    FROM_PART,
    BenchVariant,
    BuildContext,
    Placed,
    Setting,
    SuiteCase,
    Tip,
    at,
    bounded,
    settings_of,
)


@dataclass
@settings_of(LoaderTuning)
class LoaderSettings:
    """T02 / T03 / T21: loader settings applied to the user's own DataLoaders (``None`` leaves them as they are).

    Attributes:
        num_workers: worker processes, or ``"auto"`` (decided from the CPUs this process may use, the
            devices and the accelerator).
        pin_memory: page-locked host memory, or ``"auto"`` (only when batches go to a CUDA device).
        persistent_workers: keep workers alive between epochs (only with workers).
        prefetch_factor: batches loaded ahead by each worker (only with workers).
    """

    num_workers: Union[int, Literal["auto"], None] = bounded(None, ge=0)
    pin_memory: Union[bool, Literal["auto"], None] = None
    persistent_workers: Union[bool, Literal["auto"], None] = None
    prefetch_factor: Optional[int] = bounded(FROM_PART, ge=1)

    def enabled(self) -> bool:
        return any(v is not None for v in dataclasses.astuple(self))


def check(facts: Facts) -> Finding:
    """T02 loader-workers: measured data wait, workers against the CPUs really available."""
    tip = "T02"
    if not facts.train_loaders:
        return Finding.not_checked(tip, facts.run_note() or "no train DataLoader found", "pass a DataLoader to fit")
    items: list[Item] = []
    notes: list[str] = []
    f = facts.data_wait_fraction
    wait = (
        f"{f:.0%} of step time waiting for data over {plural(facts.data_wait_steps, 'step')}" if f is not None else None
    )
    n = len(facts.train_loaders)
    for i, loader in enumerate(facts.train_loaders):
        nw = int(getattr(loader, "num_workers", 0) or 0)
        label = loader_label(i, n)
        try:
            choice = _auto_workers(facts, loader)
        except Exception as err:
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
            items.append(
                Item(sev, f"{wait}; {label} has num_workers={nw}" + (f"; {auto}" if auto else ""), fix, "runtime")
            )
            continue
        per_process = None
        if facts.cpus:
            per_process = max(1, facts.cpus // max(1, facts.num_devices if facts.on_cuda else 1))
        if per_process is not None and nw > per_process:
            items.append(
                Item(
                    "medium",
                    f"{label} has num_workers={nw}, more than the {per_process} CPU(s) this process may use ({facts.cpus_reason}):"
                    " workers compete with each other and with the training step",
                    "speedups.loaders.num_workers: auto (LoaderTuning callback)",
                )
            )
            continue
        if choice is not None and nw == 0 and choice.num_workers > 0:
            items.append(
                Item(
                    "low",
                    f"{label} loads in the main process (num_workers=0)"
                    + (f" while {wait}" if wait else "")
                    + f"; {auto}",
                    "speedups.loaders.num_workers: auto (LoaderTuning callback)",
                )
            )
            continue
        if nw > 0 and not getattr(loader, "persistent_workers", False):
            items.append(
                Item(
                    "low",
                    f"{label} restarts its {nw} worker processes every epoch (persistent_workers=False)",
                    "speedups.loaders.persistent_workers: true (or DataLoader(..., persistent_workers=True))",
                )
            )
            continue
        notes.append(f"{label}: num_workers={nw}" + (f" ({auto})" if auto else ""))
    if items:
        return Finding.from_items(tip, items, notes)
    head = wait or (facts.run_note() and f"data wait not measured: {facts.run_note()}") or "data wait not measured"
    return Finding.ok(tip, f"{head}; " + "; ".join(notes))


def _auto_workers(facts: Facts, loader: Any) -> Any:
    from lightning_speedups.functional.loaders import auto_num_workers

    acc = "cuda" if facts.on_cuda else facts.device_type
    return auto_num_workers(
        accelerator=acc, devices=max(1, facts.num_devices), cpus=facts.cpus, dataset=getattr(loader, "dataset", None)
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T02 adds, each at its place in the callback list."""
    out: list[Placed] = []
    if s.loaders.enabled():
        out.append((at("loaders"), LoaderTuning(**dataclasses.asdict(s.loaders))))
    if s.monitors.data_wait:
        out.append((at("data_wait"), DataWaitMonitor()))
    return out


TIP = Tip(
    id="T02",
    slug="loader-workers",
    title="DataLoader workers decided from the CPUs really available",
    seeds=("A#2", "B#2"),
    claim="2x on one epoch (4 workers + pinned memory)",
    does="LoaderTuning rebuilds the user's own DataLoaders (sampler, collate and the rest kept) with num_workers from the CPUs this process may use (affinity and cgroup quota), persistent workers and prefetch; DataWaitMonitor measures the share of each step spent waiting for data.",
    gain="up to 2x per epoch when loading is the bottleneck (measured 1.24x from persistent workers here)",
    hurts="on a 2-core CPU machine extra workers compete with the training step (0.75x measured); an IterableDataset fed by the training loop would see stale copies",
    check=check,
    settings=(
        Setting(
            "loaders",
            LoaderSettings,
            factory=LoaderSettings,
            doc="T02 / T03 / T21. Loader settings applied to the user's DataLoaders.",
            on=lambda v: v.enabled(),
        ),
        Setting("monitors.data_wait", bool, False, doc="T02 / T19. Share of each step spent waiting for data."),
    ),
    callbacks=callbacks,
    parts=(
        LoaderTuning,
        DataWaitMonitor,
        auto_num_workers,
    ),
    lint_rules=("LS102",),
    bench=BenchVariant({"loaders.num_workers": "auto", "loaders.persistent_workers": True}),
    suite=(
        SuiteCase(
            "workers",
            settings={"loaders.num_workers": 1, "loaders.persistent_workers": True},
            kinds=("cnn", "transformer", "configure_model", "scheduler"),
            compose=False,
        ),
        SuiteCase("data_wait", settings={"monitors.data_wait": True}),
    ),
)
