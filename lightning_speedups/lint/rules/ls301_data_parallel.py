"""LS301 (tip T11), data-parallel: nn.DataParallel / data_parallel (one process drives all GPUs)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import AnyHit, Rule

_DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.data_parallel")

_GPU_WORDS = ("cuda", "gpu")


def _without_gpu(ctx: FileContext, node: ast.AST) -> bool:
    """``node`` runs only when no GPU is there: the ``else`` of ``if torch.cuda.is_available():`` (or of
    ``if use_gpu:`` / ``if args.cuda:``), or the body of ``if not torch.cuda.is_available():``."""
    for anc, child in ctx.ancestors(node):
        if not isinstance(anc, ast.If):
            continue
        test, negated = anc.test, False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, True
        if isinstance(test, ast.Call):
            if terminal_name(test.func) != "is_available" or "cuda" not in snippet(test.func).lower():
                continue
        elif not (
            isinstance(test, (ast.Name, ast.Attribute)) and any(w in terminal_name(test).lower() for w in _GPU_WORDS)
        ):
            continue
        in_body = any(child is s for s in anc.body)
        if in_body == negated:
            return True
    return False


def _data_parallel(ctx: FileContext) -> Iterator[AnyHit]:
    for call in ctx.calls:
        if ctx.call_name(call) in _DATA_PARALLEL:
            cls = ctx.enclosing_class(call)
            if cls is not None and "DataParallel" in cls.name:
                continue  # the implementation of a DataParallel option (a Lightning strategy), not a use
            if _without_gpu(ctx, call) or ctx.purpose.for_inference(call):
                continue  # on the CPU DataParallel drives nothing; evaluation scripts do not train
            yield call, f"{snippet(call.func)}(...) runs one process for all GPUs (GIL, replicas rebuilt each step)"
    for cls in ctx.classes:
        for base in cls.bases:
            if ctx.qualname(base) == "torch.nn.DataParallel":
                yield base, f"class {cls.name} subclasses DataParallel (one process for all GPUs)"


RULE = Rule(
    "LS301",
    "T11",
    "data-parallel",
    "nn.DataParallel / data_parallel (one process drives all GPUs)",
    'DistributedDataParallel, one process per GPU: in Lightning Trainer(strategy="ddp", devices=N) (or the ddp '
    "preset); in a plain script torchrun --nproc_per_node=N and DDP(model, device_ids=[local_rank]). A loss "
    "over the whole batch (contrastive, batch statistics) then sees one rank's slice: gather the features "
    "across ranks (torch.distributed.nn.all_gather) to keep it the same",
    _data_parallel,
    ("DataParallel|data_parallel",),
)
