"""T05 amp: Automatic mixed precision chosen for the hardware.

Card:
    Seeds: A#4, B#11 (claim: 2.75x faster, 37% less memory on BERT-size models).
    What it does: precision: auto picks bf16-mixed on Ampere+ GPUs, 16-mixed on older ones; on CPUs
    with AMX or AMD avx512_bf16 the start-up probe times bf16 against fp32 on the model
    (ProbedPrecision), fp32 elsewhere; half picks the leanest; fp8 adds torchao float8 linears
    (Float8Training) on GPUs of compute capability 8.9+ with torchao, else falls back to auto with a
    one-line reason; tf32 sets the float32 matmul precision (MatmulPrecision, restored after the
    fit).
    Expected gain: 1.3x-1.7x measured on an AMD CPU with avx512_bf16; 2x-3x on tensor-core GPUs.
    When it hurts: 0.83x measured on a Xeon without AMX; fp16 needs loss scaling; reduced precision
    can change results.
"""

from __future__ import annotations

from typing import Any, Literal

from lightning_speedups.callbacks import MatmulPrecision, ProbedPrecision
from lightning_speedups.callbacks.float8 import Float8Training
from lightning_speedups.functional import cuda_supports_bf16, resolve_precision
from lightning_speedups.functional.precision import PrecisionChoice, accelerator_is_cuda, cpu_fast_bf16, resolve_float8
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import device_words
from lightning_speedups.tips.record import BenchVariant, BuildContext, Placed, Setting, SuiteCase, Tip, at

PrecisionSetting = PrecisionChoice  # the values speedups.precision accepts, kept in functional.precision


def check(facts: Facts) -> Finding:
    """T05 amp: the precision against what is fastest on this hardware."""
    tip = "T05"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    acc = "cuda" if facts.on_cuda else facts.device_type
    best, why = resolve_precision("auto", acc)
    current = facts.precision
    full = current in ("32-true", "32", "64-true", "64")
    if full and best not in (None, "32-true", "32"):
        items = [
            Item(
                "high" if facts.on_cuda else "medium",
                f"training in {current} on {device_words(facts)}, where {best} is faster ({why})",
                f"speedups.precision: auto ({best} here), or trainer.precision: {best}",
            )
        ]
        if facts.on_cuda and facts.matmul_precision == "highest" and cuda_supports_bf16():
            items.append(
                Item(
                    "medium",
                    "fp32 matmuls run at full precision (float32_matmul_precision='highest') on a GPU with TF32 units",
                    "speedups.tf32: auto",
                )
            )
        return Finding.from_items(tip, items)
    if not facts.on_cuda and "bf16" in current and best in ("32-true", "32"):
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"{current} on a CPU where bf16 is not expected to be faster ({why}): autocast adds casts",
                    "speedups.precision: auto (32-true here); keep bf16 only if you need the memory (speedups.precision: half)",
                )
            ],
        )
    if full:
        return Finding.ok(tip, f"{current} is the fastest here: {why}")
    return Finding.ok(tip, f"{current} on {device_words(facts)} (mixed / low precision already)")


def trainer_kwargs(s: Any, ctx: BuildContext) -> None:
    """The Trainer arguments T05 sets before the Trainer exists."""
    if s.precision == "off":
        return
    if _probed(s, ctx):
        ctx.trainer_kwargs["precision"] = "32-true"
        return  # ProbedPrecision says what the probe decided
    value, reason = resolve_precision(s.precision, ctx.accelerator)
    if value is not None:
        ctx.trainer_kwargs["precision"] = value
        ctx.note("precision (T05)", value != "32-true", f"{value}: {reason}")
    else:
        ctx.note("precision (T05)", False, f"skipped, {reason}")


def _probed(s: Any, ctx: BuildContext) -> bool:
    """``auto`` on a CPU with bf16 units: bf16-mixed is timed against fp32 on the model (ProbedPrecision)."""
    acc = ctx.accelerator
    return (
        s.precision == "auto"
        and not accelerator_is_cuda(acc)
        and str(acc) in ("cpu", "auto", "None")
        and cpu_fast_bf16() is not None
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T05 adds, each at its place in the callback list."""
    out: list[Placed] = [(at("tf32"), MatmulPrecision(s.tf32))] if s.tf32 != "off" else []
    if _probed(s, ctx):
        out.append((at("probed_precision"), ProbedPrecision()))
    if s.precision == "fp8" and resolve_float8(ctx.accelerator)[0]:
        out.append((at("float8"), Float8Training()))
    return out


def _bf16(trainer: Any, model: Any, callbacks: Any) -> None:
    assert trainer.precision == "bf16-mixed", trainer.precision


TIP = Tip(
    id="T05",
    slug="amp",
    title="Automatic mixed precision chosen for the hardware",
    seeds=("A#4", "B#11"),
    claim="2.75x faster, 37% less memory on BERT-size models",
    does="precision: auto picks bf16-mixed on Ampere+ GPUs, 16-mixed on older ones; on CPUs with AMX or AMD avx512_bf16 the start-up probe times bf16 against fp32 on the model (ProbedPrecision), fp32 elsewhere; half picks the leanest; fp8 adds torchao float8 linears (Float8Training) on GPUs of compute capability 8.9+ with torchao, else falls back to auto with a one-line reason; tf32 sets the float32 matmul precision (MatmulPrecision, restored after the fit).",
    gain="1.3x-1.7x measured on an AMD CPU with avx512_bf16; 2x-3x on tensor-core GPUs",
    hurts="0.83x measured on a Xeon without AMX; fp16 needs loss scaling; reduced precision can change results",
    check=check,
    settings=(
        Setting(
            "precision",
            PrecisionSetting,
            "off",
            doc="T05. ``auto`` (fastest here), ``half`` (leanest here), ``fp8`` (torchao float8 linears on GPUs of compute capability 8.9+, else ``auto``) or a Lightning precision.",
        ),
        Setting(
            "tf32",
            Literal["off", "auto", "highest", "high", "medium"],
            "off",
            doc="T05. TF32 matmuls on Ampere+ GPUs (``auto``) or an explicit float32 matmul precision.",
        ),
    ),
    trainer_kwargs=trainer_kwargs,
    callbacks=callbacks,
    parts=(resolve_precision, MatmulPrecision, ProbedPrecision, Float8Training),
    bench=BenchVariant({"precision": "half"}),
    suite=(
        SuiteCase("bf16", settings={"precision": "bf16-mixed"}, maths="dtype", acted=_bf16),
        SuiteCase("tf32", settings={"tf32": "high"}),
    ),
)
