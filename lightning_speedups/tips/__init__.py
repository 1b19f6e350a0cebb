"""The tip registry: one record per tip T01-T24 of the seed documents, one module per tip.

Each ``tNN_slug.py`` module holds a tip's record (:class:`~lightning_speedups.tips.record.Tip`): its
card, its ``speedups:`` settings, how they become Trainer arguments and callbacks, its bench variant,
its doctor check and its shared-suite cases. Everything central is derived from :data:`TIPS`:

- :class:`lightning_speedups.config.Speedups` (the ``speedups:`` section) and its callback list,
- bench's variants (:mod:`lightning_speedups.bench.variants`),
- the doctor's checks (:func:`lightning_speedups.advisor.run_checks`),
- the ``tips`` command and the README's parts table (:func:`parts_table`, tested against the README).

Adding a tip means adding its module here (and its parts in ``functional/`` / ``callbacks/``), then
naming it in :data:`TIPS` below.

Examples:
    >>> from lightning_speedups.tips import get_tip
    >>> get_tip("conv-bias").id
    'T16'
    >>> get_tip("T16").preset_keys
    ('speedups.conv_bias',)
"""

from __future__ import annotations

from typing import Any, Optional

from lightning_speedups.errors import UnknownNameError
from lightning_speedups.tips import (
    t01_lr_schedule,
    t02_loader_workers,
    t03_pin_memory,
    t04_max_batch,
    t05_amp,
    t06_optimizer,
    t07_cudnn_benchmark,
    t08_no_sync,
    t09_activation_checkpointing,
    t10_grad_accumulation,
    t11_ddp,
    t12_grads_to_none,
    t13_zero_copy,
    t14_debug_off,
    t15_grad_clipping,
    t16_conv_bias,
    t17_no_grad_eval,
    t18_input_norm,
    t19_fast_storage,
    t20_on_device,
    t21_non_blocking,
    t22_fusion,
    t23_multiple_of_8,
    t24_channels_last,
)
from lightning_speedups.tips.record import BenchVariant, BuildContext, Setting, SuiteCase, Tip

#: Every tip, in id order.
TIPS: tuple[Tip, ...] = (
    t01_lr_schedule.TIP,
    t02_loader_workers.TIP,
    t03_pin_memory.TIP,
    t04_max_batch.TIP,
    t05_amp.TIP,
    t06_optimizer.TIP,
    t07_cudnn_benchmark.TIP,
    t08_no_sync.TIP,
    t09_activation_checkpointing.TIP,
    t10_grad_accumulation.TIP,
    t11_ddp.TIP,
    t12_grads_to_none.TIP,
    t13_zero_copy.TIP,
    t14_debug_off.TIP,
    t15_grad_clipping.TIP,
    t16_conv_bias.TIP,
    t17_no_grad_eval.TIP,
    t18_input_norm.TIP,
    t19_fast_storage.TIP,
    t20_on_device.TIP,
    t21_non_blocking.TIP,
    t22_fusion.TIP,
    t23_multiple_of_8.TIP,
    t24_channels_last.TIP,
)

BY_ID: dict[str, Tip] = {tip.id: tip for tip in TIPS}
BY_SLUG: dict[str, Tip] = {tip.slug: tip for tip in TIPS}


def get_tip(key: str) -> Tip:
    """A tip by id (``"T16"``, ``"t16"``) or slug (``"conv-bias"``).

    Raises:
        KeyError: with the list of valid ids.
    """
    tip = BY_ID.get(key.upper()) or BY_SLUG.get(key.lower())
    if tip is None:
        raise UnknownNameError(f"unknown tip {key!r}; tips are {', '.join(BY_ID)} (or their slugs, e.g. 'conv-bias').")
    return tip


def part_names(tip: Tip) -> list[str]:
    """The names of a tip's parts (classes and functions), then its lint rules."""
    return [getattr(p, "__name__", str(p)) for p in tip.parts] + list(tip.lint_rules)


def parts_table() -> str:
    """The README's parts table (Markdown), generated from the records."""
    rows = ["| tip | what | turned on by | parts |", "| --- | --- | --- | --- |"]
    for tip in TIPS:
        keys = ", ".join(f"`{k.removeprefix('speedups.')}`" for k in tip.preset_keys) or "lint / doctor"
        parts = ", ".join(f"`{p}`" for p in part_names(tip))
        rows.append(f"| {tip.id} {tip.slug} | {tip.title} | {keys} | {parts} |")
    return "\n".join(rows)


def catalog_rows() -> tuple[tuple[str, str, str, str, str], ...]:
    """The ``tips`` command's table, one row per tip: id, slug, title, the keys that turn it on, how
    bench times it. :data:`lightning_speedups.catalog.ROWS` is this, written out (a test keeps them equal)
    so that ``tips`` answers without importing the records (and torch and Lightning with them)."""
    rows = []
    for tip in TIPS:
        modes = sorted({v.mode for v in tip.bench_variants})
        bench = ", ".join(f"{m}: {sum(v.mode == m for v in tip.bench_variants)}" for m in modes) or "-"
        if tip.not_timed:
            bench += f"; not timed by samples/s: {tip.not_timed}"
        rows.append((tip.id, tip.slug, tip.title, "\n".join(tip.preset_keys) or "lint / doctor", bench))
    return tuple(rows)


def print_tips(console: Optional[Any] = None) -> None:
    """Print the registry as a table."""
    from lightning_speedups.catalog import print_rows

    print_rows(catalog_rows(), console)


__all__ = [
    "BY_ID",
    "BY_SLUG",
    "TIPS",
    "BenchVariant",
    "BuildContext",
    "Setting",
    "SuiteCase",
    "Tip",
    "catalog_rows",
    "get_tip",
    "part_names",
    "parts_table",
    "print_tips",
]
