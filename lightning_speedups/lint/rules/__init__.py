"""The lint rules, one module per rule (``ls201_sync_in_step.py`` holds LS201; each module's ``RULE``), and the
helpers several rules share: ``base`` (the :class:`Rule` record and the hit a rule yields), ``loaders`` (DataLoaders
and their batches: LS102-LS104, LS2xx), ``device_common`` (host reads, tensor factories, synchronizes, host tensors:
LS2xx), ``host_reads`` (the per-step host reads LS201 and LS206 report) and ``cuda_class`` (LS203's numpy
variant)."""

from __future__ import annotations

from lightning_speedups.lint.rules import (
    ls101_tensor_from_numpy,
    ls102_loader_no_workers,
    ls103_loader_no_pin_memory,
    ls104_non_blocking_from_pageable,
    ls105_tensor_of_tensors,
    ls201_sync_in_step,
    ls202_print_tensor_in_step,
    ls203_create_then_move,
    ls204_format_tensor_in_step,
    ls205_synchronize_in_step,
    ls206_sync_in_step_helper,
    ls207_empty_cache_in_step,
    ls208_sync_dist_per_step,
    ls301_data_parallel,
    ls302_zero_grad_keep,
    ls303_grad_zeroed_in_place,
    ls304_cudnn_benchmark_off,
    ls305_anomaly_detection_on,
    ls306_profiler_on,
)
from lightning_speedups.lint.rules.base import Rule

#: Every rule, ordered by code.
RULES: tuple[Rule, ...] = tuple(
    sorted(
        [
            ls101_tensor_from_numpy.RULE,
            ls102_loader_no_workers.RULE,
            ls103_loader_no_pin_memory.RULE,
            ls104_non_blocking_from_pageable.RULE,
            ls105_tensor_of_tensors.RULE,
            ls201_sync_in_step.RULE,
            ls202_print_tensor_in_step.RULE,
            ls203_create_then_move.RULE,
            ls204_format_tensor_in_step.RULE,
            ls205_synchronize_in_step.RULE,
            ls206_sync_in_step_helper.RULE,
            ls207_empty_cache_in_step.RULE,
            ls208_sync_dist_per_step.RULE,
            ls301_data_parallel.RULE,
            ls302_zero_grad_keep.RULE,
            ls303_grad_zeroed_in_place.RULE,
            ls304_cudnn_benchmark_off.RULE,
            ls305_anomaly_detection_on.RULE,
            ls306_profiler_on.RULE,
        ],
        key=lambda r: r.code,
    )
)


__all__ = ["RULES", "Rule"]
