"""LS306 (tip T14), profiler-on: torch.autograd.profiler.profile / emit_nvtx / Trainer(profiler=...) outside debugging
or profiling code."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import TRAINER, is_const, keyword, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import AnyHit, Rule

_PROFILE_WORDS = ("debug", "profil", "bench")

_LIGHTNING_PROFILERS = ("simple", "advanced", "pytorch", "xla")


def _profiler_on(ctx: FileContext) -> Iterator[AnyHit]:
    for call in ctx.calls:
        name = ctx.call_name(call)
        hit = None
        if name in ("torch.autograd.profiler.profile", "torch.autograd.profiler.emit_nvtx"):
            kw = keyword(call, "enabled")
            if kw is None or is_const(kw.value, True):  # enabled=<flag>: cannot tell
                hit = f"{name.rsplit('.', 1)[1]}() records every autograd op"
        elif name == TRAINER:
            kw = keyword(call, "profiler")
            if kw is not None:
                v = kw.value
                if isinstance(v, ast.Constant) and v.value in _LIGHTNING_PROFILERS:
                    hit = f"Trainer(profiler={v.value!r}) times every hook"
                elif isinstance(v, ast.Call) and (ctx.call_name(v) or "").endswith("Profiler"):
                    hit = f"Trainer(profiler={snippet(v.func)}(...)) times every hook"
        if hit and not ctx.purpose.is_exempt(call, _PROFILE_WORDS, ("profile",)):
            yield call, hit + " (outside debugging/profiling code)"


RULE = Rule(
    "LS306",
    "T14",
    "profiler-on",
    "torch.autograd.profiler.profile / emit_nvtx / Trainer(profiler=...) outside debugging or profiling code",
    "remove it from training runs, or enable it behind a flag (profile a few steps, not the whole fit)",
    _profiler_on,
    ("profile|nvtx",),
)
