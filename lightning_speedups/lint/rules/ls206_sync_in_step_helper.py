"""LS206 (tip T08), sync-in-step-helper: `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)` or a tensor condition
inside a function of another file that a training step calls (a metric meter's update, a clipping helper), found
through the call graph."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lightning_speedups.lint.astutil import DEF_TYPES, snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule
from lightning_speedups.lint.rules.device_common import SYNC_METHODS
from lightning_speedups.lint.rules.host_reads import host_reads_per_step, with_run


def _HOST_READ_TRIGGER(source: str) -> bool:
    """A host read shows in the text (what LS206 looks for in a helper's file)."""
    return any(w in source for w in (".item(", ".cpu(", ".numpy(", ".tolist(", "bool("))


def _tensor_guarded(ctx: FileContext, node: ast.AST) -> bool:
    """``node`` runs only when an argument is a tensor: ``if isinstance(v, torch.Tensor): v = v.item()``."""
    for anc, child in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES):
            return False
        if isinstance(anc, ast.If) and any(child is s for s in anc.body):
            for n in ast.walk(anc.test):
                if isinstance(n, ast.Call) and terminal_name(n.func) == "isinstance" and len(n.args) == 2:
                    if "Tensor" in snippet(n.args[1], 80):
                        return True
    return False


def _passes_tensor(ctx: FileContext, node: ast.AST) -> bool:
    """A caller of the function around ``node`` passes a visible tensor (``meter.update(loss=loss)``,
    not ``meter.update(loss=loss.item())``)."""
    fn = ctx.enclosing_function(node)
    if fn is None or ctx.project is None:
        return True  # cannot tell: keep the finding
    for other, call in ctx.project.callers(ctx, fn):
        if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return True  # update(**losses): what it passes is not visible, keep the finding
        if any(other.classify.is_tensor(a) for a in [*call.args, *(k.value for k in call.keywords)]):
            return True
    return False


def _read_of_visible_tensor(ctx: FileContext, node: ast.AST) -> bool:
    """The host read ``node`` (``x.item()``, ``x.tolist()``, ...) is of something visibly a tensor: ``x`` is
    one in the helper, or is the helper's parameter and a caller passes a visible tensor. In a helper of
    another file, ``x.tolist()`` of boxes a plotting helper got as numpy must not pass for a sync."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS):
        return True  # bool(t) / a tensor condition: the classifier already saw a tensor
    receiver = node.func.value
    if ctx.classify.is_tensor(receiver) or _tensor_guarded(ctx, node):  # under `if isinstance(v, torch.Tensor):`
        return True
    while True:  # the name the receiver starts from: `targets[:, 2:6].T` -> targets
        if isinstance(receiver, (ast.Attribute, ast.Subscript)):
            receiver = receiver.value
        elif isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
            receiver = receiver.func.value
        else:
            break
    if not isinstance(receiver, ast.Name):
        return False
    prior = ctx.scopes.bindings_before(receiver) or []
    return bool(prior) and all(b.kind == "param" for b in prior) and _passes_tensor(ctx, node)


def _sync_in_helper(ctx: FileContext) -> Iterator[Hit]:
    for node, message, r in host_reads_per_step(ctx):
        if r.via and _tensor_guarded(ctx, node) and not _passes_tensor(ctx, node):
            continue  # the step passes numbers: the guarded host read never runs
        if r.via and not _read_of_visible_tensor(ctx, node):
            continue
        if r.via:
            yield Hit(node, with_run(ctx, node, f"{message} on every batch: the step that calls it is at {r.via}"))


RULE = Rule(
    "LS206",
    "T08",
    "sync-in-step-helper",
    "`.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)` or a tensor condition inside a function of another "
    "file that a training step calls (a metric meter's update, a clipping helper), found through the call graph",
    "pass tensors and keep them on the device in the helper (accumulate with .detach(), return tensors), and "
    "read them on the host once per epoch or every N steps",
    _sync_in_helper,
    (_HOST_READ_TRIGGER,),
    gate=lambda project, path: project.is_hot_file(path),
)
