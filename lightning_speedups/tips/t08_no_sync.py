"""T08 no-sync: No needless CPU<->GPU synchronisations in the training step.

Card:
    Seeds: A#7, B#5 (claim: -).
    What it does: SyncGuard counts (or warns about, or fails on) the device synchronisations inside
    the training step, each with the line of user code that caused it; lint rules find .item(),
    .cpu() and print(tensor) in the step.
    Expected gain: keeps the GPU queue full: each sync drains it.
    When it hurts: SyncGuard needs CUDA (torch.cuda.set_sync_debug_mode); elsewhere the doctor
    counts the host reads a GPU run would sync on; a small cost while it watches.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_speedups.callbacks import SyncGuard
from lightning_speedups.functional import SyncWatcher
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import plural
from lightning_speedups.tips.record import BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T08 no-sync: device synchronisations in the training step (counted on CUDA; off CUDA, the host
    reads of device values that would synchronise on a GPU)."""
    tip = "T08"
    watcher = facts.sync_watcher
    if not facts.on_cuda and facts.host_reads is not None and facts.host_reads.windows:
        return _host_reads(facts)
    if not facts.on_cuda or watcher is None:
        linted = (
            f"; lint read {plural(len(facts.lint_files), 'source file')} for .item()/.cpu()/print(tensor) in steps"
            if facts.lint_ran and facts.lint_files
            else ""
        )
        reason = (
            f"device synchronisations exist only with a CUDA device (this run: {facts.device_type})"
            if not facts.on_cuda
            else (facts.run_note() or "the sync watcher did not run")
        )
        return Finding.not_checked(
            tip, reason + linted, "run the doctor on the GPU machine (SyncGuard counts them there)"
        )
    found = watcher.findings()
    if found:
        items = [Item(f["severity"], f["evidence"], f["fix"], "runtime") for f in found[:8]]
        notes = [watcher.summary()]
        return Finding.from_items(tip, items, notes)
    return Finding.ok(
        tip,
        watcher.summary()
        if watcher.total
        else f"no device synchronisation in {plural(watcher.windows, 'training step')}",
    )


def _host_reads(facts: Facts) -> Finding:
    """Off CUDA: the host reads of device values counted during the steps (each a sync on a GPU)."""
    reads = facts.host_reads
    where = f"counted on {facts.device_type}: each would synchronise with a GPU"
    found = reads.findings()
    if found:
        items = [Item(f["severity"], f["evidence"], f["fix"], "runtime") for f in found[:8]]
        return Finding.from_items("T08", items, [f"{reads.summary()} ({where})"])
    if reads.total:
        return Finding.ok("T08", f"none in your code; {reads.summary()} ({where})")
    return Finding.ok("T08", f"no host read of a device value in {plural(reads.windows, 'training step')} ({where})")


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T08 adds, each at its place in the callback list."""
    return [(at("sync_guard"), SyncGuard(mode=s.monitors.sync_guard))] if s.monitors.sync_guard != "off" else []


TIP = Tip(
    id="T08",
    slug="no-sync",
    title="No needless CPU<->GPU synchronisations in the training step",
    seeds=("A#7", "B#5"),
    claim="-",
    does="SyncGuard counts (or warns about, or fails on) the device synchronisations inside the training step, each with the line of user code that caused it; lint rules find .item(), .cpu() and print(tensor) in the step.",
    gain="keeps the GPU queue full: each sync drains it",
    hurts="SyncGuard needs CUDA (torch.cuda.set_sync_debug_mode); elsewhere the doctor counts the host reads a GPU run would sync on; a small cost while it watches",
    check=check,
    settings=(
        Setting(
            "monitors.sync_guard",
            Literal["off", "count", "warn", "error"],
            "off",
            doc="T08. Count, warn about or fail on device syncs in the training step.",
        ),
    ),
    callbacks=callbacks,
    parts=(
        SyncGuard,
        SyncWatcher,
    ),
    lint_rules=("LS201", "LS202", "LS204", "LS205", "LS206", "LS207", "LS208"),
    not_timed="a check or lint rule (doctor / lint), nothing to time",
    suite=(SuiteCase("count", settings={"monitors.sync_guard": "count"}, kinds=()),),
)
