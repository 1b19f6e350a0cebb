"""T22 fusion: Fuse element-wise ops with torch.compile.

Card:
    Seeds: B#8 (claim: gelu 4x faster from 5 kernels in 1).
    What it does: CompileModules compiles the model's inner modules with torch.compile (state-dict
    keys unchanged), falling back to eager per module with the compiler's first line; enabled: auto
    compiles on CUDA only.
    Expected gain: fused element-wise kernels on GPUs; on a 2-core CPU the compiled small
    transformer measured 1.5x slower (bench it).
    When it hurts: compile time (31-58 s here), recompiles on new shapes, slower on small CPU
    models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from lightning_speedups.callbacks import CompileModules
from lightning_speedups.functional import compile_modules
from lightning_speedups.functional.precision import accelerator_is_cuda
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.words import missing_reason, names_text, plural
from lightning_speedups.tips.record import (
    FROM_PART,
    BenchVariant,
    BuildContext,
    Placed,
    Setting,
    SuiteCase,
    Tip,
    at,
    part_kwargs,
    settings_of,
)


@dataclass
@settings_of(CompileModules)
class CompileSettings:
    """T22: ``torch.compile`` of the model's inner modules, falling back to eager on failure.

    ``enabled: auto`` compiles on CUDA only: on a 2-core CPU the compiled step of a small transformer
    measured 1.5x slower than eager (benchmarks/model_parts.md); ``bench`` measures it on your setup.
    ``backend`` is torch.compile's backend (default inductor)."""

    enabled: Union[bool, Literal["auto"]] = False
    mode: Optional[str] = FROM_PART
    dynamic: Optional[bool] = FROM_PART
    fullgraph: bool = FROM_PART
    modules: Optional[list[str]] = FROM_PART
    backend: Optional[str] = None


_ELEMENTWISE = (
    "ReLU", "ReLU6", "GELU", "SiLU", "Mish", "Hardswish", "Hardsigmoid", "Sigmoid", "Tanh", "LeakyReLU", "ELU",
    "Softplus", "Dropout", "Dropout1d", "Dropout2d", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d",
)  # fmt: skip


def check(facts: Facts) -> Finding:
    """T22 fusion: whether element-wise work is compiled (``torch.compile``) or runs op by op."""
    tip = "T22"
    if why := missing_reason(facts, "compile"):
        return Finding.not_checked(tip, why)
    if facts.model is None:
        return Finding.not_checked(tip, facts.run_note() or "the model was not inspected")
    compiled = [n for n, s in facts.compile_status.items() if s == "compiled"]
    fallback = {n: s for n, s in facts.compile_status.items() if s.startswith("eager")}
    if fallback:
        name, why = next(iter(fallback.items()))
        return Finding.from_items(
            tip,
            [
                Item(
                    "low",
                    f"compilation fell back to eager for {names_text(list(fallback))} ({name}: {why})",
                    "fix the graph break named in the reason, or leave that module out: speedups.compile.modules: [...]",
                    "runtime",
                )
            ],
            [f"{len(compiled)} module(s) compiled"] if compiled else [],
        )
    if compiled:
        return Finding.ok(tip, f"{plural(len(compiled), 'module')} compiled ({names_text(compiled)})")
    elementwise = {t: n for t, n in facts.module_counts.items() if t in _ELEMENTWISE}
    total = sum(elementwise.values())
    desc = ", ".join(f"{t} x{n}" for t, n in sorted(elementwise.items(), key=lambda kv: -kv[1])[:4])
    if not facts.on_cuda:
        return Finding.not_checked(
            tip,
            f"whether torch.compile pays off on {facts.device_type} depends on the model and is measured, not predicted"
            f" ({plural(total, 'element-wise / normalisation module')} run eagerly{': ' + desc if desc else ''})",
            "`python -m lightning_speedups bench --config <yours>` times speedups.compile.enabled: true against eager",
        )
    if not total:
        return Finding.ok(tip, "no element-wise or normalisation modules to fuse")
    return Finding.from_items(
        tip,
        [
            Item(
                "low",
                f"not compiled: {plural(total, 'element-wise / normalisation module')} ({desc}) run as separate kernels",
                "speedups.compile.enabled: true (CompileModules callback; compile time is paid in the first steps: bench it)",
            )
        ],
    )


def callbacks(s: Any, ctx: BuildContext) -> list[Placed]:
    """The callbacks T22 adds, each at its place in the callback list."""
    c = s.compile
    if not c.enabled:
        return []
    if c.enabled == "auto" and not accelerator_is_cuda(ctx.accelerator):
        ctx.note(
            "compile (T22)",
            False,
            "skipped, `auto` compiles on CUDA only (on CPU it measured slower"
            " on a small transformer); set compile.enabled: true to force it, or bench it",
        )
        return []
    kwargs = part_kwargs(c, CompileModules)
    if not c.backend:  # the part's own default backend (inductor)
        del kwargs["backend"]
    return [
        (
            at("compile"),
            CompileModules(**kwargs),
        )
    ]


TIP = Tip(
    id="T22",
    slug="fusion",
    title="Fuse element-wise ops with torch.compile",
    seeds=("B#8",),
    claim="gelu 4x faster from 5 kernels in 1",
    does="CompileModules compiles the model's inner modules with torch.compile (state-dict keys unchanged), falling back to eager per module with the compiler's first line; enabled: auto compiles on CUDA only.",
    gain="fused element-wise kernels on GPUs; on a 2-core CPU the compiled small transformer measured 1.5x slower (bench it)",
    hurts="compile time (31-58 s here), recompiles on new shapes, slower on small CPU models",
    check=check,
    settings=(
        Setting(
            "compile",
            CompileSettings,
            factory=CompileSettings,
            doc="T22. ``torch.compile`` of inner modules.",
            on=lambda v: bool(v.enabled),
        ),
    ),
    callbacks=callbacks,
    parts=(
        CompileModules,
        compile_modules,
    ),
    bench=BenchVariant({"compile.enabled": True}, needs=("compile",)),
    suite=(
        SuiteCase(
            "aot_eager",
            settings={"compile.enabled": True, "compile.backend": "aot_eager"},
            maths="unchanged",
            kinds=("cnn", "transformer"),
            compose=False,
        ),
    ),
)
