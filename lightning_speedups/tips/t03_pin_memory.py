"""T03 pin-memory: Pinned host memory for loaders feeding a GPU.

Card:
    Seeds: A#2, B#3 (claim: skips the pageable-to-pinned copy).
    What it does: loaders.pin_memory (LoaderTuning, owned by T02) pins the loaders' batches when
    they go to a CUDA device; auto leaves CPU runs alone.
    Expected gain: faster host-to-device copies, and the precondition of non-blocking copies (T21).
    When it hurts: only helps when batches go to CUDA; on CPU pinning only costs; pinning a dataset
    that already lives on the GPU fails.
"""

from __future__ import annotations

from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import loader_label, names_text
from lightning_speedups.tips.record import BenchVariant, SuiteCase, Tip


def check(facts: Facts) -> Finding:
    """T03 pin-memory: pinned loaders when batches go to CUDA, never on the CPU."""
    tip = "T03"
    if not facts.train_loaders:
        return Finding.not_checked(tip, facts.run_note() or "no train DataLoader found")
    n = len(facts.train_loaders)
    pins = [bool(getattr(dl, "pin_memory", False)) for dl in facts.train_loaders]
    if facts.on_cuda:
        unpinned = [loader_label(i, n) for i, p in enumerate(pins) if not p]
        if unpinned:
            return Finding.from_items(
                tip,
                [
                    Item(
                        "medium",
                        f"{names_text(unpinned)} hand(s) batches to {facts.device_name} from pageable memory (pin_memory=False):"
                        " every copy goes through a staging buffer first",
                        "speedups.loaders.pin_memory: auto (LoaderTuning callback), or DataLoader(..., pin_memory=True)",
                    )
                ],
            )
        return Finding.ok(tip, f"batches go to {facts.device_name} from pinned memory (pin_memory=True)")
    if any(pins):
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"pin_memory=True while batches stay on {facts.device_type}: pinning only costs a copy and locked memory there",
                    "speedups.loaders.pin_memory: auto (pins only for CUDA), or DataLoader(..., pin_memory=False)",
                )
            ],
        )
    return Finding.not_checked(
        tip,
        f"batches stay on {facts.device_type}: pinned memory only matters for copies to a CUDA device (pin_memory=False is right here)",
        "run the doctor on the GPU machine",
    )


TIP = Tip(
    id="T03",
    slug="pin-memory",
    title="Pinned host memory for loaders feeding a GPU",
    seeds=("A#2", "B#3"),
    claim="skips the pageable-to-pinned copy",
    does="loaders.pin_memory (LoaderTuning, owned by T02) pins the loaders' batches when they go to a CUDA device; auto leaves CPU runs alone.",
    gain="faster host-to-device copies, and the precondition of non-blocking copies (T21)",
    hurts="only helps when batches go to CUDA; on CPU pinning only costs; pinning a dataset that already lives on the GPU fails",
    check=check,
    uses=("loaders.pin_memory",),
    lint_rules=("LS103",),
    bench=BenchVariant({"loaders.pin_memory": True}, needs=("cuda",)),
    suite=(SuiteCase("pin_auto", settings={"loaders.pin_memory": "auto"}, kinds=(), compose=False),),
)
