"""A snapshot of the process-global state a part may touch, to assert that a fit leaves it as it found it.

The suite takes its own snapshot around every fit (it does not rely on ``tests/conftest.py``, which
only restores a few of these between tests).
"""

from __future__ import annotations

import os
from typing import Any

import torch

ENV_VARS = ("CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING")


def snapshot() -> dict[str, Any]:
    """Every global flag the parts of the pack may set, by name."""
    flags: dict[str, Any] = {
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.is_anomaly_check_nan_enabled()": torch.is_anomaly_check_nan_enabled(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.is_deterministic_algorithms_warn_only_enabled()": torch.is_deterministic_algorithms_warn_only_enabled(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
    }
    if torch.cuda.is_available():
        flags["torch.cuda.get_sync_debug_mode()"] = torch.cuda.get_sync_debug_mode()
    for name in ENV_VARS:
        flags[f"os.environ[{name!r}]"] = os.environ.get(name)
    return flags


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """``"name: before -> after"`` for every flag that differs."""
    return [f"{name}: {before[name]!r} -> {after.get(name)!r}" for name in before if after.get(name) != before[name]]


def restore(saved: dict[str, Any]) -> None:
    """Put every flag back as in ``saved`` (so one leaking part does not poison the following tests)."""
    torch.backends.cudnn.benchmark = saved["torch.backends.cudnn.benchmark"]
    torch.backends.cudnn.deterministic = saved["torch.backends.cudnn.deterministic"]
    torch.set_float32_matmul_precision(saved["torch.get_float32_matmul_precision()"])
    torch.autograd.set_detect_anomaly(
        saved["torch.is_anomaly_enabled()"], check_nan=saved["torch.is_anomaly_check_nan_enabled()"]
    )
    torch.use_deterministic_algorithms(
        saved["torch.are_deterministic_algorithms_enabled()"],
        warn_only=saved["torch.is_deterministic_algorithms_warn_only_enabled()"],
    )
    torch.set_grad_enabled(saved["torch.is_grad_enabled()"])
    torch.set_num_threads(saved["torch.get_num_threads()"])
    torch.set_default_dtype(saved["torch.get_default_dtype()"])
    if "torch.cuda.get_sync_debug_mode()" in saved:
        torch.cuda.set_sync_debug_mode(saved["torch.cuda.get_sync_debug_mode()"])
    for name in ENV_VARS:
        value = saved[f"os.environ[{name!r}]"]
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def assert_restored(before: dict[str, Any], when: str) -> None:
    """Fail (after restoring them) if any flag differs from ``before``."""
    after = snapshot()
    leaked = changes(before, after)
    if leaked:
        restore(before)
        raise AssertionError(f"global state not restored {when}: " + "; ".join(leaked))
