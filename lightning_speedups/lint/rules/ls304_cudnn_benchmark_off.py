"""LS304 (tip T07), cudnn-benchmark-off: torch.backends.cudnn.benchmark = False / Trainer(benchmark=False) without
deterministic mode in the file."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import is_const, keyword, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import AnyHit, Rule

_REPRODUCIBLE_WORDS = ("seed", "determin", "reproduc")


def _in_reproducibility_branch(ctx: FileContext, node: ast.AST) -> bool:
    """``node`` sits in an ``if`` about seeding or determinism, or next to a ``manual_seed`` call in the
    same block: the run asked for reproducible results, which the autotuner would give up."""
    for anc, child in ctx.ancestors(node):
        if isinstance(anc, ast.If) and any(child is s for s in anc.body):
            test = ast.unparse(anc.test).lower()
            if any(w in test for w in _REPRODUCIBLE_WORDS):
                return True
            if any(
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and "seed" in terminal_name(s.value.func)
                for s in anc.body
            ):
                return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            w in anc.name.lower() for w in _REPRODUCIBLE_WORDS
        ):
            return True  # def set_seed(...) / def make_deterministic(...)
    return False


def _benchmark_off(ctx: FileContext) -> Iterator[AnyHit]:
    if ctx.facts.deterministic:
        return
    for node in ctx.assigns:
        if is_const(node.value, False) and any(
            ctx.qualname(t) == "torch.backends.cudnn.benchmark" for t in node.targets
        ):
            if _in_reproducibility_branch(ctx, node):
                continue  # `if args.seed is not None:` ... benchmark = False: asked for, on purpose
            yield (
                node,
                "cudnn.benchmark = False turns off the cuDNN autotuner (set explicitly, without deterministic mode)",
            )
    for call in ctx.calls:
        if ctx.is_trainer(call):
            kw = keyword(call, "benchmark")
            if kw is not None and is_const(kw.value, False):
                yield call, "Trainer(benchmark=False) turns off the cuDNN autotuner (without deterministic=True)"


RULE = Rule(
    "LS304",
    "T07",
    "cudnn-benchmark-off",
    "torch.backends.cudnn.benchmark = False / Trainer(benchmark=False) without deterministic mode in the file",
    "cudnn.benchmark = True (Trainer(benchmark=True)) when input shapes stay fixed; remove the line otherwise",
    _benchmark_off,
    (r"benchmark\s*=\s*False",),
)
