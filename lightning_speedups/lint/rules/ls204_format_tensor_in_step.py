"""LS204 (tip T08), format-tensor-in-step: a tensor formatted into a string (f-string, %, .format, a logging call's
arguments) or handed to a logger that reads it on the host (SummaryWriter.add_scalar, wandb.log, tqdm's set_postfix)
on a line that runs per step (print is LS202)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import is_string_format, keyword, snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import HOT_TRIGGER

#: Logging calls that format their arguments: ``logger.info("loss %s", loss)``.
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})


def _is_logging_call(ctx: FileContext, call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _LOG_METHODS:
        return False
    name = ctx.qualname(func) or ""
    if name.startswith("logging."):
        return True
    owner = terminal_name(func.value).lower()
    return "log" in owner and owner not in ("self",) and not name


#: TensorBoard's SummaryWriter methods that read a tensor value on the host (``make_np``: ``.cpu().numpy()``).
_WRITER_METHODS = {
    "add_scalar": (1, "scalar_value"),
    "add_scalars": (1, "tag_scalar_dict"),
    "add_histogram": (1, "values"),
}

_WRITER_OWNERS = ("writer", "tb", "summary", "experiment", "board")


def _values(node: Optional[ast.AST]) -> list[ast.AST]:
    """The values a logged argument holds: a dict literal's values, or the argument itself."""
    if node is None:
        return []
    return [v for v in node.values if v is not None] if isinstance(node, ast.Dict) else [node]


def _logger_reads(ctx: FileContext, call: ast.Call) -> Optional[tuple[ast.AST, str]]:
    """``writer.add_scalar("loss", t, step)``, ``wandb.log({"loss": t})``, ``pbar.set_postfix(loss=t)``:
    a tensor handed to a logger that reads it on the host (the tensor, and the call's words)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    attr = func.attr
    given: list[ast.AST] = []
    if attr in _WRITER_METHODS:
        owner = terminal_name(func.value).lower()
        if not any(w in owner for w in _WRITER_OWNERS):
            return None
        pos, key = _WRITER_METHODS[attr]
        kw = keyword(call, key)
        given = _values(call.args[pos] if len(call.args) > pos else (kw.value if kw is not None else None))
        words = f"SummaryWriter.{attr}(...) reads"
    elif attr == "log" and (ctx.qualname(func) or "").startswith("wandb."):
        given = _values(call.args[0] if call.args else None)
        words = "wandb.log(...) reads"
    elif attr == "set_postfix":
        given = [k.value for k in call.keywords if k.arg is not None] + [v for a in call.args for v in _values(a)]
        words = "a progress bar's set_postfix(...) formats"
    else:
        return None
    for value in given:
        if ctx.classify.is_tensor(value):
            return value, words
    return None


def _in_print(ctx: FileContext, node: ast.AST) -> bool:
    for anc, _ in ctx.ancestors(node):
        if isinstance(anc, ast.stmt):
            return False
        if isinstance(anc, ast.Call) and isinstance(anc.func, ast.Name) and anc.func.id == "print":
            return True  # LS202's
    return False


def _format_tensor(ctx: FileContext) -> Iterator[Hit]:
    reported: set[ast.AST] = set()
    candidates: list[tuple[ast.expr, ast.AST, str]] = []
    for node in ctx.parents:
        if is_string_format(node):
            if isinstance(node, ast.JoinedStr) and isinstance(ctx.parents.get(node), ast.FormattedValue):
                continue  # a format spec inside an f-string
            if not ctx.where.maybe_hot(node):
                continue
            shown = ctx.classify.formatted_tensor(node)
            if shown is not None:
                kind = (
                    "an f-string"
                    if isinstance(node, ast.JoinedStr)
                    else ("%-formatting" if isinstance(node, ast.BinOp) else "str.format")
                )
                candidates.append((node, shown, kind))
    for call in ctx.calls:
        if _is_logging_call(ctx, call) and len(call.args) > 1:
            first = call.args[0]
            percent = not (isinstance(first, ast.Constant) and isinstance(first.value, str) and "%" not in first.value)
            for a in call.args[1:]:
                if ctx.classify.is_tensor(a):
                    # logging.info("loss %s", t) is a %-format; logger.log("train/loss", t, step) hands the
                    # tensor to a logger that formats it or reads it with .item()
                    kind = "(a %-format)" if percent else "(a key and a value: the logger formats or reads it)"
                    candidates.append((call, a, f"{snippet(call.func, 30)}(...) {kind}"))
                    break
        else:
            read = _logger_reads(ctx, call)
            if read is not None and ctx.where.maybe_hot(call):
                candidates.append((call, read[0], read[1]))
    for node, shown, kind in sorted(candidates, key=lambda c: (c[0].lineno, c[0].col_offset)):
        if node in reported or _in_print(ctx, node):
            continue
        r = ctx.where.hot_runs(node)
        if r is None:
            continue
        reported.add(node)
        if kind.endswith(("reads", "formats")):  # a logger given the tensor itself
            message = f"{kind} the tensor `{snippet(shown, 30)}` on the host in {r.where}: a device sync on every batch"
        else:
            message = (
                f"{kind} formats the tensor `{snippet(shown, 30)}` in {r.where}: turning it into text reads it on "
                "the host, a device sync on every batch"
            )
        yield Hit(node, message)


RULE = Rule(
    "LS204",
    "T08",
    "format-tensor-in-step",
    "a tensor formatted into a string (f-string, %, .format, a logging call's arguments) or handed to a logger "
    "that reads it on the host (SummaryWriter.add_scalar, wandb.log, tqdm's set_postfix) on a line that runs "
    "per step (print is LS202)",
    "log the tensor with self.log (Lightning reads logged tensors only every log_every_n_steps), or format it or "
    "hand it to a writer only every N steps (`if step % N == 0:`); to format a value you already need on the "
    "host, read it once with .item()",
    _format_tensor,
    (HOT_TRIGGER,),
)
