"""LS3xx: the training loop and its global switches (tips T07, T11, T12, T14)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import DEF_TYPES, TRAINER, is_const, keyword, snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import AnyHit, Hit, Rule, hit_at

_DATA_PARALLEL = ("torch.nn.DataParallel", "torch.nn.parallel.data_parallel")
_DEBUG_WORDS = ("debug",)
_PROFILE_WORDS = ("debug", "profil", "bench")
_LIGHTNING_PROFILERS = ("simple", "advanced", "pytorch", "xla")


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


def _zero_grad_keep(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr != "zero_grad":
            continue
        kw = keyword(call, "set_to_none")
        value = kw.value if kw is not None else (call.args[0] if call.args else None)
        if is_const(value, False):
            if ctx.facts.grads_used_in_place:
                continue  # p.grad += g later: with set_to_none=True that raises on None
            runs = ctx.where.runs(call)
            h = hit_at(
                call,
                f"zero_grad(set_to_none=False) writes zeros into every gradient (a memset per parameter), {runs.how}",
                runs,
            )
            if h is not None:
                yield h


def _is_grad(node: ast.AST) -> bool:
    """``p.grad`` or ``p.grad.data``."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _zeroing_context(ctx: FileContext, node: ast.AST) -> bool:
    """Inside a ``*zero_grad*`` function or a loop over ``.parameters()`` / ``group["params"]``."""
    for anc, _ in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES):
            args = anc.args
            if any(a.arg == "set_to_none" for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]):
                return False  # implements the set_to_none=False option itself (like torch's zero_grad)
            break
    for anc, _ in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES) and "zero_grad" in anc.name:
            return True
        if isinstance(anc, (ast.For, ast.AsyncFor)):
            it = anc.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                if it.func.attr in ("parameters", "named_parameters"):
                    return True
            if isinstance(it, ast.Subscript) and is_const(it.slice, "params"):
                return True
    return False


def _grad_zeroed_in_place(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or not _is_grad(func.value):
            continue
        zeroes = (func.attr == "zero_" and not call.args) or (
            func.attr in ("fill_", "mul_")
            and len(call.args) == 1
            and (is_const(call.args[0], 0) or is_const(call.args[0], 0.0))
        )
        if zeroes and _zeroing_context(ctx, call) and not ctx.facts.grads_used_in_place:
            yield Hit(call, f"{snippet(call)} writes zeros into the gradient instead of dropping it")


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


def _anomaly_on(ctx: FileContext) -> Iterator[AnyHit]:
    for call in ctx.calls:
        name = ctx.call_name(call)
        hit = None
        if name == "torch.autograd.set_detect_anomaly":
            kw = keyword(call, "mode")
            value = kw.value if kw is not None else (call.args[0] if call.args else None)
            if is_const(value, True):
                hit = "torch.autograd.set_detect_anomaly(True) re-runs checks on every backward op"
        elif name == "torch.autograd.detect_anomaly":
            hit = "torch.autograd.detect_anomaly() re-runs checks on every backward op"
        elif name == TRAINER:
            kw = keyword(call, "detect_anomaly")
            if kw is not None and is_const(kw.value, True):
                hit = "Trainer(detect_anomaly=True) re-runs checks on every backward op"
        if hit and not ctx.purpose.is_exempt(call, _DEBUG_WORDS, ("anomaly",)):
            yield call, hit + " (outside debugging code)"


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


RULES = [
    Rule(
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
    ),
    Rule(
        "LS302",
        "T12",
        "zero-grad-keep",
        "zero_grad(set_to_none=False)",
        "zero_grad() (set_to_none=True, the default since torch 2.0)",
        _zero_grad_keep,
        (r"zero_grad\s*\(\s*(?:set_to_none\s*=\s*)?False",),
    ),
    Rule(
        "LS303",
        "T12",
        "grad-zeroed-in-place",
        "p.grad.zero_() / p.grad.data.zero_() in a zero_grad override or a loop over parameters",
        "p.grad = None (what optimizer.zero_grad() does by default); code that reads p.grad afterwards "
        "(grad-norm logging, copying gradients to fp32 master weights) must then skip a parameter whose grad "
        "is None (one that got no gradient this step)",
        _grad_zeroed_in_place,
        (r"grad\s*(?:\.\s*data\s*)?\.\s*(?:zero_|fill_|mul_)\s*\(",),
    ),
    Rule(
        "LS304",
        "T07",
        "cudnn-benchmark-off",
        "torch.backends.cudnn.benchmark = False / Trainer(benchmark=False) without deterministic mode in the file",
        "cudnn.benchmark = True (Trainer(benchmark=True)) when input shapes stay fixed; remove the line otherwise",
        _benchmark_off,
        (r"benchmark\s*=\s*False",),
    ),
    Rule(
        "LS305",
        "T14",
        "anomaly-detection-on",
        "set_detect_anomaly(True) / detect_anomaly() / Trainer(detect_anomaly=True) outside debugging code",
        "remove it, or turn it on only while hunting a NaN (behind a --debug flag, or the debug preset)",
        _anomaly_on,
        ("anomaly",),
    ),
    Rule(
        "LS306",
        "T14",
        "profiler-on",
        "torch.autograd.profiler.profile / emit_nvtx / Trainer(profiler=...) outside debugging or profiling code",
        "remove it from training runs, or enable it behind a flag (profile a few steps, not the whole fit)",
        _profiler_on,
        ("profile|nvtx",),
    ),
]
