"""T21 non-blocking: Non-blocking copies from pinned memory.

Card:
    Seeds: B#7 (claim: -).
    What it does: NonBlockingCheck (monitors.non_blocking) says when batches are copied with
    non_blocking=True from unpinned memory (no overlap) or blocking from pinned memory;
    loaders.pin_memory (T03) pins them.
    Expected gain: the copy of the next batch overlaps the current step.
    When it hurts: non_blocking only overlaps from pinned memory; reading the copied tensor on the
    host needs a sync.
"""

from __future__ import annotations

from typing import Any

from lightning_speedups.callbacks import NonBlockingCheck
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import names_text
from lightning_speedups.tips.record import BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
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
                f"{where} hands over {names_text(names, 3)} from unpinned memory: Lightning's non_blocking copies to"
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


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T21 adds, each at its place in the callback list."""
    return [(at("non_blocking"), NonBlockingCheck())] if s.monitors.non_blocking else []


TIP = Tip(
    id="T21",
    slug="non-blocking",
    title="Non-blocking copies from pinned memory",
    seeds=("B#7",),
    claim="-",
    does="NonBlockingCheck (monitors.non_blocking) says when batches are copied with non_blocking=True from unpinned memory (no overlap) or blocking from pinned memory; loaders.pin_memory (T03) pins them.",
    gain="the copy of the next batch overlaps the current step",
    hurts="non_blocking only overlaps from pinned memory; reading the copied tensor on the host needs a sync",
    check=check,
    settings=(
        Setting("monitors.non_blocking", bool, False, doc="T21. Check non-blocking copies from unpinned memory."),
    ),
    uses=("loaders.pin_memory",),
    callbacks=callbacks,
    parts=(NonBlockingCheck,),
    lint_rules=("LS104",),
    not_timed="covered by T03: non-blocking copies only overlap from pinned memory",
    suite=(SuiteCase("check", settings={"monitors.non_blocking": True}, kinds=()),),
)
