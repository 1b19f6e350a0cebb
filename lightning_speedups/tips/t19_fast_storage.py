"""T19 fast-storage: Data on fast local storage.

Card:
    Seeds: B#1 (claim: -).
    What it does: StorageCheck (monitors.storage) finds where the dataset's files live, what file
    system that is and how fast it reads, and says when a network or rotational disk starves the
    loader; the data-wait share (T02) shows whether it matters.
    Expected gain: an input-bound run goes as fast as its storage allows.
    When it hurts: never; the read test reads a few files once.
"""

from __future__ import annotations

from typing import Any, Optional

from lightning_speedups.callbacks import StorageCheck
from lightning_speedups.functional import storage_report
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason
from lightning_speedups.tips.record import BuildContext, Placed, Setting, SuiteCase, Tip, at


def check(facts: Facts) -> Finding:
    """T19 fast-storage: where the data lives, its measured read rate, and the data-wait share."""
    tip = "T19"
    f = facts.data_wait_fraction
    wait = f"; {f:.0%} of step time waiting for data" if f is not None else ""
    if why := missing_reason(facts, "storage"):
        return Finding.not_checked(tip, why)
    rep = facts.storage
    if rep is not None:
        if rep.problems:
            sev = (
                "high"
                if (f is not None and f > 0.3)
                else "medium"
                if (rep.is_network or rep.is_fuse or rep.rotational)
                else "low"
            )
            return Finding.from_items(
                tip,
                [
                    Item(
                        sev,
                        f"{rep.summary()}: " + "; ".join(rep.problems) + wait,
                        "copy the data to a local SSD (or node-local scratch) before training",
                        "static",
                    )
                ],
            )
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


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T19 adds, each at its place in the callback list."""
    return [(at("storage"), StorageCheck(root=s.monitors.storage_root))] if s.monitors.storage else []


TIP = Tip(
    id="T19",
    slug="fast-storage",
    title="Data on fast local storage",
    seeds=("B#1",),
    claim="-",
    does="StorageCheck (monitors.storage) finds where the dataset's files live, what file system that is and how fast it reads, and says when a network or rotational disk starves the loader; the data-wait share (T02) shows whether it matters.",
    gain="an input-bound run goes as fast as its storage allows",
    hurts="never; the read test reads a few files once",
    check=check,
    settings=(
        Setting("monitors.storage", bool, False, doc="T19. Where the data lives and how fast it reads."),
        Setting(
            "monitors.storage_root",
            Optional[str],
            None,
            doc="T19. The data folder to check (default: the dataset's root attribute).",
        ),
    ),
    uses=("monitors.data_wait",),
    callbacks=callbacks,
    parts=(
        StorageCheck,
        storage_report,
    ),
    not_timed="a storage check; the data-wait column shows whether loading limits the step",
    suite=(SuiteCase("storage", settings={"monitors.storage": True, "monitors.storage_root": "."}),),
)
