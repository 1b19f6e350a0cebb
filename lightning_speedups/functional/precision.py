"""T05 amp and TF32: pick the precision that is fastest (or leanest) on the hardware at hand.

What it does: ``resolve_precision("auto")`` returns a Lightning ``precision`` value with a one-line reason. On
CPUs it depends on the bf16 units: with Intel AMX bf16 is fast; on AMD Zen 4+ (avx512_bf16) bf16 autocast
measured 1.31x on a small transformer and 1.74x on a small CNN (benchmarks/RESULTS.md, 2-core EPYC); on an
Intel Xeon with avx512_bf16 but no AMX it measured 0.83x (slower) on a small transformer. So ``auto`` picks
bf16 on CPUs with AMX or with AMD's avx512_bf16, and keeps fp32 elsewhere. ``bench`` measures it on your own
setup.

Card: tip T05 ``amp``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from functools import lru_cache
from typing import Literal, Optional, get_args

import torch

from lightning_speedups.errors import SettingError

#: values the ``speedups.precision`` setting accepts besides Lightning's own precision strings
#: (``fp8``: torchao float8 linears on top of bf16-mixed, where the GPU has float8 tensor cores)
PrecisionChoice = Literal[
    "off", "auto", "half", "fp8", "bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true", "64-true"
]
PRECISION_CHOICES: tuple[str, ...] = get_args(PrecisionChoice)

#: the lowest compute capability with float8 tensor cores (Ada Lovelace, sm_89; Hopper is 9.0)
FLOAT8_MIN_CAPABILITY = (8, 9)


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
    except (RuntimeError, TypeError):  # pragma: no cover - private API, failing on some builds
        return False


def cpu_vendor() -> str:
    """The CPU vendor string (``GenuineIntel``, ``AuthenticAMD``, ...) from ``/proc/cpuinfo``, or ``""``."""
    return cpuinfo_field("vendor_id")


#: the pack's view of this CPU's bf16 kernels, forced: ``1`` as if it had them (AMX, AMD avx512_bf16), ``0`` as if
#: not; for trying the other precision path on one machine (the test suite runs both)
CPU_BF16_ENV = "LIGHTNING_SPEEDUPS_CPU_BF16"


def cpu_fast_bf16() -> Optional[str]:
    """Why bf16 autocast is faster than fp32 on this CPU, or ``None`` when it is not expected to be.

    ``LIGHTNING_SPEEDUPS_CPU_BF16=1`` (or ``0``) forces the answer: the start-up probe still times bf16 and the
    Safeguard still tries it on the first batch, so a forced view never makes a run crash or slower than fp32.
    """
    forced = os.environ.get(CPU_BF16_ENV, "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return f"forced by {CPU_BF16_ENV}={os.environ[CPU_BF16_ENV]}"
    if forced in ("0", "false", "no", "off"):
        return None
    if forced:
        raise SettingError(f"{CPU_BF16_ENV}={os.environ[CPU_BF16_ENV]!r}: expected 1 or 0 (or unset it)")
    if cpu_has_amx_bf16():
        return "the CPU has AMX bf16 matrix units"
    if "avx512_bf16" in cpu_flags() and cpu_vendor() == "AuthenticAMD":
        return "AMD CPU with avx512_bf16 (measured 1.3x-1.7x faster than fp32 on a 2-core EPYC)"
    return None


_PROBE = (
    "import json, torch; print(json.dumps([torch.cuda.get_device_name(0), list(torch.cuda.get_device_capability(0))]))"
)


def _nvml_facts() -> Optional[tuple[str, tuple[int, int]]]:
    """Device 0's name and compute capability from NVML (``pynvml``), which creates no CUDA context."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # swallowed on purpose: no pynvml, no driver, or an old NVML (pynvml's errors
        # have no common base beside Exception): the caller tries the next way
        return None
    return (name.decode() if isinstance(name, bytes) else str(name)), (int(major), int(minor))


@lru_cache(maxsize=1)
def _uninitialised_facts() -> tuple[str, tuple[int, int]]:
    facts = _nvml_facts()
    if facts is not None:
        return facts
    try:  # a child process pays the CUDA initialisation, not this one
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
        name, cap = json.loads(out.stdout.strip().splitlines()[-1])
        return str(name), (int(cap[0]), int(cap[1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, TypeError):  # cannot tell: no bf16 / fp8
        return "CUDA device", (0, 0)


def cuda_device_facts(device: Optional[int] = None) -> tuple[str, tuple[int, int]]:
    """``(name, (major, minor))`` of a CUDA device **without initialising CUDA in this process**.

    ``torch.cuda.get_device_name`` / ``get_device_capability`` create a CUDA context, after which
    Lightning's fork-based launchers (``ddp_fork``, ``ddp_notebook``) refuse to start. So while the
    config is read: when CUDA is already initialised, torch answers; otherwise NVML (``pynvml``)
    does, or else a short child process. Call only where ``torch.cuda.is_available()`` (which does
    not initialise CUDA).
    """
    if torch.cuda.is_initialized():
        name = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        return name, (major, minor)
    return _uninitialised_facts()


def cuda_supports_bf16(device: Optional[int] = None) -> bool:
    """Whether the CUDA device runs bf16 natively (compute capability 8.0, Ampere, or newer).

    Does not initialise CUDA (see :func:`cuda_device_facts`).
    """
    if not torch.cuda.is_available():
        return False
    major, _ = cuda_device_facts(device)[1]
    return major >= 8


def torchao_float8_available() -> bool:
    """Whether ``torchao.float8`` can be imported (found without importing it)."""
    try:
        return (
            importlib.util.find_spec("torchao") is not None and importlib.util.find_spec("torchao.float8") is not None
        )
    except (ImportError, ValueError):
        return False


def resolve_float8(accelerator: Optional[str] = "auto") -> tuple[bool, str]:
    """Whether float8 training (torchao's float8 linears) can run here, with a one-line reason.

    Needs a CUDA device of compute capability 8.9 or newer (Ada, Hopper, Blackwell) and
    ``torchao`` importable. Does not initialise CUDA.

    Example::

        ok, why = resolve_float8("cpu")   # (False, "float8 needs a CUDA GPU of compute capability 8.9+ ...")
    """
    if not accelerator_is_cuda(accelerator) or not torch.cuda.is_available():
        return False, "float8 needs a CUDA GPU of compute capability 8.9+ (batches go elsewhere here)"
    name, cap = cuda_device_facts()
    if tuple(cap) < FLOAT8_MIN_CAPABILITY:
        return False, f"{name} (compute capability {cap[0]}.{cap[1]}) has no float8 tensor cores (needs 8.9+)"
    if not torchao_float8_available():
        return False, "torchao is not installed (pip install torchao)"
    return True, f"{name} has float8 tensor cores (compute capability {cap[0]}.{cap[1]}); torchao float8 linears"


def accelerator_is_cuda(accelerator: Optional[str]) -> bool:
    if accelerator in (None, "auto"):
        return torch.cuda.is_available()
    return str(accelerator) in ("cuda", "gpu")


def resolve_precision(mode: str, accelerator: Optional[str] = "auto") -> tuple[Optional[str], str]:
    """Turn a ``speedups.precision`` value into a Lightning ``precision`` and a one-line reason.

    Args:
        mode: ``"off"`` (leave Lightning's default), ``"auto"`` (fastest: bf16-mixed on Ampere or
            newer, 16-mixed on older GPUs, bf16-mixed on CPUs with AMX, fp32 elsewhere),
            ``"fp8"`` (bf16-mixed, with float8 linears added by the ``Float8Training`` callback
            where :func:`resolve_float8` allows; else what ``auto`` picks, the reason saying why),
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
    if mode == "fp8":
        ok, why = resolve_float8(accelerator)
        if ok:
            return "bf16-mixed", f"fp8: {why}, bf16-mixed around them"
        value, reason = resolve_precision("auto", accelerator)
        return value, f"fp8 skipped ({why}); auto instead: {reason}"
    if mode not in ("auto", "half"):
        if mode not in PRECISION_CHOICES:
            raise SettingError(f"`speedups.precision` must be one of {', '.join(PRECISION_CHOICES)}; got {mode!r}.")
        return mode, "set explicitly"
    if accelerator_is_cuda(accelerator):
        name = cuda_device_facts()[0] if torch.cuda.is_available() else "CUDA device"
        if cuda_supports_bf16():
            return "bf16-mixed", f"{name} supports bf16 (compute capability 8.0+), no loss scaler needed"
        return "16-mixed", f"{name} has no native bf16: fp16 with a gradient scaler"
    if str(accelerator) not in ("cpu", "auto", "None"):
        return None, f"left to Lightning on accelerator {accelerator!r}"
    fast = cpu_fast_bf16()
    if mode == "half":
        return "bf16-mixed", "bf16 autocast on CPU halves saved activations" + (
            f"; {fast}" if fast else " (it may be slower here)"
        )
    if fast:
        return "bf16-mixed", fast
    return (
        "32-true",
        "no AMX or AMD avx512_bf16 units: bf16 autocast would be slower (measured 0.83x on a Xeon without AMX)",
    )


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
        raise SettingError(f"`speedups.tf32` must be one of off, auto, highest, high, medium; got {mode!r}.")
    if accelerator_is_cuda(accelerator) and cuda_supports_bf16():
        return "high", "the GPU has TF32 tensor cores (compute capability 8.0+)"
    return None, "no TF32 hardware here (needs an Ampere or newer GPU)"
