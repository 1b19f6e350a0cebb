"""The machine a bench runs on: which device, what to record about it, how busy it was; and Lightning
kept quiet while the parent process builds the setup once."""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
import warnings
from typing import Any, Optional

import lightning
import torch

from lightning_speedups.bench.options import BenchError
from lightning_speedups.functional import cpuinfo_field

__all__ = ["busy_note", "machine_meta", "quiet_lightning", "resolve_device"]


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is there, else ``cpu``; ``cuda`` without one is a :class:`BenchError`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is available here (use --device cpu or auto).")
    return device


def machine_meta(device: str) -> dict[str, Any]:
    """The machine and software a bench ran on (date, versions, CPU, threads, load, GPU, command)."""
    cpu = cpuinfo_field("model name") or platform.processor() or ""
    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "command": "python -m lightning_speedups " + " ".join(sys.argv[1:]) if sys.argv else "",
    }
    try:
        meta["load_average"] = os.getloadavg()
    except OSError:
        pass
    if device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    return meta


def busy_note(meta: dict[str, Any]) -> Optional[str]:
    """Record the load average at the end in ``meta``; a note when other processes kept the machine busier than its
    CPUs. At the end the 1-minute load average still counts the bench's own last run, its ``torch_threads`` busy
    until then (a bench alone on 2 cores ended at 2.2 and called itself busy): they are taken out of it."""
    try:
        load = os.getloadavg()[0]
        cpus = meta.get("cpus_usable") or 1
        meta["load_average_end"] = os.getloadavg()
        others = max(load - int(meta.get("torch_threads") or 0), meta.get("load_average", (0.0,))[0])
        if others > cpus:
            return (
                f"the machine was busy (a load average of {others:.1f} from other processes on {cpus} CPUs):"
                " they shared the cores, so the figures are noisier than on a quiet machine"
            )
    except OSError:
        pass
    return None


class quiet_lightning:
    """Lightning's info lines (devices, seeds, tips) off while the parent builds the setup once."""

    names = ("lightning.pytorch", "lightning.fabric", "lightning_fabric", "pytorch_lightning")

    def __enter__(self) -> None:
        self._levels = [(logging.getLogger(n), logging.getLogger(n).level) for n in self.names]
        for logger, _ in self._levels:
            logger.setLevel(logging.WARNING)
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.simplefilter("ignore")  # "No seed found", logger advice: the runs report what matters

    def __exit__(self, *exc: Any) -> None:
        self._warnings.__exit__(*exc)
        for logger, level in self._levels:
            logger.setLevel(level)
