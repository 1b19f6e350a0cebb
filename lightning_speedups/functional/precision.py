"""T05 amp and TF32: pick the precision that is fastest (or leanest) on the hardware at hand.

Card:
    What: ``resolve_precision("auto")`` returns a Lightning ``precision`` value with a one-line reason.
    Seed tip: A#4 / B#11, automatic mixed precision ("2.75x faster, 37% less memory" on BERT-size
    models, on GPUs with tensor cores).
    Expected gain: 1.5x to 3x on tensor-core GPUs. On CPUs it depends on the bf16 units: with Intel
    AMX bf16 is fast; on AMD Zen 4+ (avx512_bf16) bf16 autocast measured 1.31x on a small
    transformer and 1.74x on a small CNN (benchmarks/RESULTS.md, 2-core EPYC); on an Intel Xeon with
    avx512_bf16 but no AMX it measured 0.83x (slower) on a small transformer. So ``auto`` picks bf16
    on CPUs with AMX or with AMD's avx512_bf16, and keeps fp32 elsewhere. ``bench`` measures it on
    your own setup.
    When it hurts: fp16 without a loss scaler underflows (Lightning's ``16-mixed`` brings one);
    ops with no low-precision kernel fall back and add casts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import torch

#: values the ``speedups.precision`` setting accepts besides Lightning's own precision strings
PRECISION_CHOICES = ("off", "auto", "half", "bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true", "64-true")


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first value of each key of ``/proc/cpuinfo`` (empty where the file does not exist)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpuinfo_field(*keys: str) -> str:
    """The value of the first of ``keys`` that ``/proc/cpuinfo`` has (e.g. ``"model name"``), or ``""``."""
    info = _cpuinfo()
    return next((info[key] for key in keys if key in info), "")


def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of this machine (from ``/proc/cpuinfo``; empty where it does not exist)."""
    return frozenset(cpuinfo_field("flags", "Features").split())


def cpu_has_amx_bf16() -> bool:
    """Whether the CPU has AMX tiles for bf16 matrix products (Sapphire Rapids and newer)."""
    if "amx_bf16" in cpu_flags():
        return True
    probe = getattr(getattr(torch._C, "_cpu", None), "_is_amx_tile_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # pragma: no cover - private API, absent or failing on some builds
        return False


def cpu_vendor() -> str:
    """The CPU vendor string (``GenuineIntel``, ``AuthenticAMD``, ...) from ``/proc/cpuinfo``, or ``""``."""
    return cpuinfo_field("vendor_id")


def cpu_fast_bf16() -> Optional[str]:
    """Why bf16 autocast is faster than fp32 on this CPU, or ``None`` when it is not expected to be."""
    if cpu_has_amx_bf16():
        return "the CPU has AMX bf16 matrix units"
    if "avx512_bf16" in cpu_flags() and cpu_vendor() == "AuthenticAMD":
        return "AMD CPU with avx512_bf16 (measured 1.3x-1.7x faster than fp32 on a 2-core EPYC)"
    return None


def cuda_supports_bf16(device: Optional[int] = None) -> bool:
    """Whether the CUDA device runs bf16 natively (compute capability 8.0, Ampere, or newer)."""
    if not torch.cuda.is_available():
        return False
    major, _ = torch.cuda.get_device_capability(device)
    return major >= 8


def accelerator_is_cuda(accelerator: Optional[str]) -> bool:
    if accelerator in (None, "auto"):
        return torch.cuda.is_available()
    return str(accelerator) in ("cuda", "gpu")


def resolve_precision(mode: str, accelerator: Optional[str] = "auto") -> tuple[Optional[str], str]:
    """Turn a ``speedups.precision`` value into a Lightning ``precision`` and a one-line reason.

    Args:
        mode: ``"off"`` (leave Lightning's default), ``"auto"`` (fastest: bf16-mixed on Ampere or
            newer, 16-mixed on older GPUs, bf16-mixed on CPUs with AMX, fp32 elsewhere),
            ``"half"`` (leanest: a 16-bit mixed precision that works here, even where it is not
            faster, e.g. bf16-mixed on any CPU), or any Lightning precision string.
        accelerator: the trainer's accelerator (``"auto"``, ``"cpu"``, ``"gpu"``, ``"cuda"``, ...).

    Returns:
        ``(precision or None, reason)``; ``None`` means "do not set it".

    Example::

        precision, why = resolve_precision("auto", "cpu")   # ("32-true", "CPU has no AMX ...")
    """
    if mode == "off":
        return None, "off (Lightning's default precision)"
    if mode not in ("auto", "half"):
        if mode not in PRECISION_CHOICES:
            raise ValueError(
                f"`speedups.precision` must be one of {', '.join(PRECISION_CHOICES)}; got {mode!r}."
            )
        return mode, "set explicitly"
    if accelerator_is_cuda(accelerator):
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CUDA device"
        if cuda_supports_bf16():
            return "bf16-mixed", f"{name} supports bf16 (compute capability 8.0+), no loss scaler needed"
        return "16-mixed", f"{name} has no native bf16: fp16 with a gradient scaler"
    if str(accelerator) not in ("cpu", "auto", "None"):
        return None, f"left to Lightning on accelerator {accelerator!r}"
    fast = cpu_fast_bf16()
    if mode == "half":
        return "bf16-mixed", "bf16 autocast on CPU halves saved activations" + (f"; {fast}" if fast else " (it may be slower here)")
    if fast:
        return "bf16-mixed", fast
    return "32-true", "no AMX or AMD avx512_bf16 units: bf16 autocast would be slower (measured 0.83x on a Xeon without AMX)"


def resolve_matmul_precision(mode: str, accelerator: Optional[str] = "auto") -> tuple[Optional[str], str]:
    """Pick ``torch.set_float32_matmul_precision``: ``"high"`` (TF32) on Ampere or newer GPUs.

    Args:
        mode: ``"off"`` (leave it), ``"auto"`` (TF32 where the GPU has it), or ``"highest"`` /
            ``"high"`` / ``"medium"``.
        accelerator: the trainer's accelerator.
    """
    if mode == "off":
        return None, "off"
    if mode in ("highest", "high", "medium"):
        return mode, "set explicitly"
    if mode != "auto":
        raise ValueError(f"`speedups.tf32` must be one of off, auto, highest, high, medium; got {mode!r}.")
    if accelerator_is_cuda(accelerator) and cuda_supports_bf16():
        return "high", "the GPU has TF32 tensor cores (compute capability 8.0+)"
    return None, "no TF32 hardware here (needs an Ampere or newer GPU)"


