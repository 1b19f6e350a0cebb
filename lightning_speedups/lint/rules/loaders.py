"""DataLoaders and their batches, as far as a file shows: the loaders it builds, the dataset each is given,
whether a loader pins memory or is only read a batch at a time, and whether a name is a batch straight from
a plain loader. Shared by LS102-LS104 and the LS2xx rules (``host_tensor``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional, Union

from lightning_speedups.lint.astutil import DATALOADER, argument, is_const, keyword, terminal_name
from lightning_speedups.lint.context import FileContext

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_PIN_MEMORY_POS = 7


def dataloader_calls(ctx: FileContext) -> Iterator[ast.Call]:
    for call in ctx.calls:
        if ctx.call_name(call) == DATALOADER:
            yield call


def dataset_call(ctx: FileContext, node: Optional[ast.AST], at: ast.AST) -> Optional[ast.Call]:
    """The call that made the dataset ``node`` (``Cls(...)``; through a name or ``self.attr``), if visible."""
    if isinstance(node, ast.Name):
        prior = ctx.scopes.bindings_before(node) or ctx.scopes.bindings(ctx.tree).get(node.id)
        if not prior or any(b.kind != "value" or b.value is None for b in prior):
            return None
        node = prior[-1].value
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        cls = ctx.enclosing_class(at)
        values = ctx.scopes.self_attrs(cls)[0].get(node.attr, []) if cls is not None else []
        if len(values) != 1:
            return None
        node = values[0]
    return node if isinstance(node, ast.Call) else None


def loader_uses(ctx: FileContext, call: ast.Call) -> Optional[list[ast.AST]]:
    """The reads of the name (or ``self.<attr>``) the loader is assigned to, in this file; ``None`` when
    it is not assigned to one. Remembered per loader: LS102 and LS103 both ask, for every loader of the file."""
    memo: dict[ast.Call, Optional[list[ast.AST]]] = ctx.memo("loader_uses", dict)
    if call not in memo:
        memo[call] = _find_loader_uses(ctx, call)
    return memo[call]


def _find_loader_uses(ctx: FileContext, call: ast.Call) -> Optional[list[ast.AST]]:
    parent = ctx.parents.get(call)
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1):
        return None
    target = parent.targets[0]
    if isinstance(target, ast.Name):

        def is_use(n: ast.AST) -> bool:
            return isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)

    elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":

        def is_use(n: ast.AST) -> bool:
            return (
                isinstance(n, ast.Attribute)
                and n.attr == target.attr
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and isinstance(n.ctx, ast.Load)
            )

    else:
        return None
    return [n for n in ctx.parents if is_use(n)]


def _one_batch_reads(ctx: FileContext, call: ast.Call) -> bool:
    """The loader is only ever read one batch at a time with ``next(iter(loader))`` (a validation loader
    sampled for a grid of images every N batches, a test batch fixed before training): no epoch is loaded
    through it. Workers would be started anew by every ``iter()``, and pinning one small batch saves nothing."""
    uses = loader_uses(ctx, call)
    if uses is None:
        return False
    for use in uses:
        wrap = ctx.parents.get(use)
        outer = ctx.parents.get(wrap) if wrap is not None else None
        if not (
            isinstance(wrap, ast.Call)
            and isinstance(wrap.func, ast.Name)
            and wrap.func.id == "iter"
            and wrap.args[:1] == [use]
            and isinstance(outer, ast.Call)
            and isinstance(outer.func, ast.Name)
            and outer.func.id == "next"
        ):
            return False
    return bool(uses)


def _unread(ctx: FileContext, call: ast.Call) -> bool:
    """The loader's name is never read in the file while another loader's is (a validation loader built
    beside the training one, while evaluation indexes the dataset itself): it loads nothing."""
    if loader_uses(ctx, call) != []:
        return False
    return any(other is not call and loader_uses(ctx, other) for other in dataloader_calls(ctx))


def quiet_loader(ctx: FileContext, call: ast.Call) -> bool:
    """A loader whose workers or pinned memory would not speed up a training run."""
    return _one_batch_reads(ctx, call) or _unread(ctx, call)


def pin_state(call: ast.Call) -> Optional[str]:
    """``"missing"`` / ``"False"`` when the loader visibly does not pin, else ``None``."""
    state, value = argument(call, "pin_memory", _PIN_MEMORY_POS)
    if state == "missing":
        return "missing"
    if state == "given" and is_const(value, False):
        return "False"
    return None


_LOOP_WRAPPERS = ("enumerate", "tqdm", "iter")


def unwrap_iter(node: ast.AST) -> ast.AST:
    """``enumerate(tqdm(loader))`` -> ``loader``."""
    while (
        isinstance(node, ast.Call)
        and node.args
        and (
            (isinstance(node.func, ast.Name) and node.func.id in _LOOP_WRAPPERS)
            or (isinstance(node.func, ast.Attribute) and node.func.attr in _LOOP_WRAPPERS)
        )
    ):
        node = node.args[0]
    return node


def root_name(node: ast.AST) -> Optional[ast.Name]:
    """``batch["x"][0]`` -> ``batch``; ``x`` -> ``x``; anything else -> ``None``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def batch_loop(ctx: FileContext, name: ast.Name, at: ast.Call, hops: int = 0) -> Optional[Union[ast.For, ast.AsyncFor]]:
    """The ``for`` loop around ``at`` whose target is ``name`` (or holds the one name ``name`` was unpacked
    from in the loop: ``x, y = batch``), not rebound in the loop before ``at``: where the batch comes from."""
    scope = ctx.scope_of(name)
    for anc, child in ctx.ancestors(at):
        if anc is scope:
            return None
        if not isinstance(anc, (ast.For, ast.AsyncFor)) or not any(child is s for s in anc.body):
            continue
        later = [b for b in ctx.scopes.bindings(scope).get(name.id, ()) if anc.lineno < b.line < at.lineno]
        if name.id in _target_names(anc.target):
            return None if later else anc  # rebound inside the loop before `at`: cannot tell
        if hops == 0 and len(later) == 1 and later[0].kind in ("value", "unpack") and later[0].value is not None:
            root = root_name(later[0].value)
            if root is not None and root.id in _target_names(anc.target):
                return batch_loop(ctx, root, at, hops + 1)
    return None


def loader_batch(ctx: FileContext, name: ast.Name, at: ast.Call) -> bool:
    """``name`` is (a part of) the target of a ``for ... in <DataLoader>`` loop around ``at``, not
    rebound in the loop before it: a batch as the loader made it, on the host. Only a plain
    ``DataLoader(...)`` of this file without a ``collate_fn`` (a collate function may move the batch),
    whose dataset is not a class of this file that mentions a device (a dataset kept on the GPU)."""
    loop = batch_loop(ctx, name, at)
    return loop is not None and _target_loop_is_host(ctx, loop, at)


def _target_loop_is_host(ctx: FileContext, anc: Union[ast.For, ast.AsyncFor], at: ast.Call) -> bool:
    """The loop ``anc`` iterates plain DataLoaders of this file (through enumerate / tqdm / zip)."""
    source: ast.AST = unwrap_iter(anc.iter)
    sources: list[ast.AST] = [source]
    if isinstance(source, ast.Call) and terminal_name(source.func) == "zip":
        sources = [unwrap_iter(a) for a in source.args]  # zip(loader_a, loader_b): both plain
    return bool(sources) and all(_host_loader(ctx, s, at) for s in sources)


def _host_loader(ctx: FileContext, source: ast.AST, at: ast.AST) -> bool:
    if not isinstance(source, ast.Name):
        return False
    prior = ctx.scopes.bindings_before(source)
    if prior is None:
        prior = ctx.scopes.bindings(ctx.tree).get(source.id)
    if not prior or any(b.kind != "value" or b.value is None for b in prior):
        return False
    for b in prior:
        value = b.value
        if not (isinstance(value, ast.Call) and ctx.call_name(value) == DATALOADER):
            return False
        if keyword(value, "collate_fn") is not None or len(value.args) > 8:
            return False
        dataset = value.args[0] if value.args else (keyword(value, "dataset") or ast.Constant(None))
        dataset = dataset.value if isinstance(dataset, ast.keyword) else dataset
        made = dataset_call(ctx, dataset, at)
        if made is not None:
            cls = next((c for c in ctx.classes if c.name == terminal_name(made.func)), None)
            if cls is not None and any(w in ast.unparse(cls) for w in (".cuda(", ".to(", "device")):
                return False
    return True
