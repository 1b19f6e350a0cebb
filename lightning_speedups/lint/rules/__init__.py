"""The lint rules, one module per rule or family of rules: ``data`` (LS1xx); ``host_reads`` (LS201, LS206),
``formatting`` (LS202, LS204), ``create_move`` (LS203, its numpy variant in ``cuda_class``), ``explicit_sync``
(LS205, LS207) and ``sync_dist`` (LS208), the LS2xx helpers they share in ``device_common``; ``loop`` (LS3xx)."""

from __future__ import annotations

from lightning_speedups.lint.rules import create_move, data, explicit_sync, formatting, host_reads, loop, sync_dist
from lightning_speedups.lint.rules.base import Rule

#: Every rule, ordered by code.
RULES: tuple[Rule, ...] = tuple(
    sorted(
        [
            *data.RULES,
            *host_reads.RULES,
            *formatting.RULES,
            *create_move.RULES,
            *explicit_sync.RULES,
            *sync_dist.RULES,
            *loop.RULES,
        ],
        key=lambda r: r.code,
    )
)


__all__ = ["RULES", "Rule"]
