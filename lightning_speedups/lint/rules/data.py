"""LS1xx: getting data into tensors and onto the device (tips T02, T03, T13, T21)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional, Union

from lightning_speedups.lint.astutil import DATALOADER, argument, is_const, keyword, snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, ...)
_NUM_WORKERS_POS = 5
_PIN_MEMORY_POS = 7


def _tensor_from_numpy(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        if not call.args or ctx.call_name(call) != "torch.tensor":
            continue
        device = keyword(call, "device")
        if device is not None and not is_const(device.value, "cpu"):
            continue  # the data must cross to the device anyway: as_tensor would copy too
        arg = call.args[0]
        if ctx.classify.is_numpy(arg):
            runs = ctx.where.runs(call)
            h = hit_at(call, f"torch.tensor({snippet(arg)}) copies a numpy array, {runs.how} (in {runs.where})", runs)
            if h is not None:
                yield h


def _tensor_of_tensors(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        if not call.args or ctx.call_name(call) != "torch.tensor":
            continue
        arg = call.args[0]
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            tensors = ctx.classify.is_tensor(arg.elt)
        elif isinstance(arg, (ast.List, ast.Tuple)) and arg.elts:
            tensors = all(ctx.classify.is_tensor(e) for e in arg.elts)
        else:
            tensors = False
        if tensors:
            runs = ctx.where.runs(call)
            h = hit_at(
                call,
                f"torch.tensor({snippet(arg)}) builds a tensor from tensors one Python scalar at a "
                f"time (a host copy, and a device sync per element on GPU), {runs.how} (in {runs.where})",
                runs,
            )
            if h is not None:
                yield h


def _loaders(ctx: FileContext) -> Iterator[ast.Call]:
    for call in ctx.calls:
        if ctx.call_name(call) == DATALOADER:
            yield call


def _dataset_call(ctx: FileContext, node: Optional[ast.AST], at: ast.AST) -> Optional[ast.Call]:
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


def _dataset_class(ctx: FileContext, node: Optional[ast.AST], at: ast.AST) -> Optional[str]:
    """The class name (or ``torch.utils.data.X``) of the dataset ``node`` visibly is, else ``None``."""
    call = _dataset_call(ctx, node, at)
    if call is None:
        return None
    qual = ctx.call_name(call)
    if qual is not None:
        return qual
    return call.func.id if isinstance(call.func, ast.Name) else None


def _indexes_memory(node: ast.AST) -> bool:
    """``self.data[i]`` / ``self.trajectories["states"][t][i]``: an index into an attribute."""
    if not isinstance(node, ast.Subscript):
        return False
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute)


def _in_memory_class(cls: ast.ClassDef) -> bool:
    """``__getitem__`` only indexes attributes (``return self.data[i]``), possibly after looking up
    where the item is (``t, i = self.get_idx[i]``): the data is in memory already."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getitem__":
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
                return False
            if not all(isinstance(s, ast.Assign) and _indexes_memory(s.value) for s in body[:-1]):
                return False
            ret = body[-1].value
            parts = ret.elts if isinstance(ret, ast.Tuple) else [ret]
            return bool(parts) and all(_indexes_memory(p) for p in parts)
    return False


def _in_memory_datasets(ctx: FileContext) -> set[str]:
    """Dataset classes of this file whose ``__getitem__`` only indexes attributes (``return self.data[i]``)."""
    return {cls.name for cls in ctx.classes if _in_memory_class(cls)}


def _in_memory_elsewhere(ctx: FileContext, call: Optional[ast.Call]) -> bool:
    """The dataset's class lives in another file of the project and is in memory (``gail.ExpertDataset``)."""
    project = ctx.project
    if call is None or project is None:
        return False
    found = project.resolve_name(ctx, call.func)
    return found is not None and isinstance(found[1], ast.ClassDef) and _in_memory_class(found[1])


def _loader_uses(ctx: FileContext, call: ast.Call) -> Optional[list[ast.AST]]:
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
    uses = _loader_uses(ctx, call)
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
    if _loader_uses(ctx, call) != []:
        return False
    return any(other is not call and _loader_uses(ctx, other) for other in _loaders(ctx))


def _quiet_loader(ctx: FileContext, call: ast.Call) -> bool:
    """A loader whose workers or pinned memory would not speed up a training run."""
    return _one_batch_reads(ctx, call) or _unread(ctx, call)


_WORKERS_FIX = "num_workers=4 (about 4 per GPU, at most the CPUs you have) and persistent_workers=True"


def _loader_workers(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    iterable = ctx.facts.iterable_dataset_classes
    if any(".demos." in q or q.endswith(".demos") for q in ctx.aliases.values()):
        return  # Lightning's demo datasets (WikiText2, RandomDataset) index tensors in memory
    for call in _loaders(ctx):
        state, value = argument(call, "num_workers", _NUM_WORKERS_POS)
        if state == "missing":
            text = "DataLoader without num_workers loads every batch in the main process while the GPU waits"
        elif state == "given" and is_const(value, 0):
            text = "DataLoader with num_workers=0 loads every batch in the main process while the GPU waits"
        else:
            continue
        _, dataset = argument(call, "dataset", 0)
        kind = _dataset_class(ctx, dataset, call)
        if kind is not None and (kind in iterable or kind.endswith("IterableDataset")):
            continue  # workers each get a copy of the stream (a replay buffer goes stale): not a safe fix
        if kind == "torch.utils.data.TensorDataset" or (kind is not None and kind in _in_memory_datasets(ctx)):
            continue  # indexing tensors already in memory: workers only add inter-process copies
        if _in_memory_elsewhere(ctx, _dataset_call(ctx, dataset, call)):
            continue
        if _quiet_loader(ctx, call):
            continue
        fix = None
        if ctx.enclosing_function(call) is None and not ctx.purpose.under_main_guard(call):
            fix = (
                f"{_WORKERS_FIX}, once the "
                'script runs under `if __name__ == "__main__":` (it builds the loader at module level; workers '
                "started by spawn, the default on Windows and macOS, import the script again)"
            )
        yield Hit(call, text, fix)


def _pin_state(call: ast.Call) -> Optional[str]:
    """``"missing"`` / ``"False"`` when the loader visibly does not pin, else ``None``."""
    state, value = argument(call, "pin_memory", _PIN_MEMORY_POS)
    if state == "missing":
        return "missing"
    if state == "given" and is_const(value, False):
        return "False"
    return None


def _loader_pin_memory(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    for call in _loaders(ctx):
        state = _pin_state(call)
        if state is None or _quiet_loader(ctx, call):
            continue
        collate = keyword(call, "collate_fn")
        fix = None
        if collate is not None and not is_const(collate.value, None):
            # the loader pins tensors and lists / tuples / dicts of them; an object of another class
            # (DETR's NestedTensor) only if it has a pin_memory() method: the fix depends on the batch
            fix = (
                f"pin_memory=True (only when training on a GPU), copied with .to(device, non_blocking=True); the "
                f"batches come from "
                f"collate_fn={snippet(collate.value)}: tensors and lists / tuples / dicts of them are pinned, an "
                "object of another class only if it defines pin_memory() (give it one, or only its plain "
                "tensors gain)"
            )
        if state == "missing":
            yield Hit(call, "DataLoader without pin_memory=True in a file that moves batches to CUDA", fix)
        else:
            yield Hit(call, "DataLoader with pin_memory=False in a file that moves batches to CUDA", fix)


# ---------------------------------------------------------------------------------- LS104
_LOOP_WRAPPERS = ("enumerate", "tqdm", "iter")


def _unwrap_iter(node: ast.AST) -> ast.AST:
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


def _unpinned_loader(ctx: FileContext, source: ast.AST, at: ast.AST) -> Optional[ast.Call]:
    """The DataLoader call ``source`` visibly is (directly, a local/module name, or ``self.attr``),
    if every such loader does not pin memory; else ``None``."""
    values: list[ast.AST]
    if isinstance(source, ast.Call):
        values = [source]
    elif isinstance(source, ast.Name):
        prior = ctx.scopes.bindings_before(source)
        if prior is None:
            module = ctx.scopes.bindings(ctx.tree).get(source.id)
            if ctx.scope_of(source) is ctx.tree or not module:
                return None
            prior = module
        if any(b.kind != "value" or b.value is None for b in prior):
            return None
        values = [b.value for b in prior if b.value is not None]  # every one (checked above)
    elif isinstance(source, ast.Attribute) and isinstance(source.value, ast.Name) and source.value.id == "self":
        cls = ctx.enclosing_class(at)
        if cls is None:
            return None
        values = ctx.scopes.self_attrs(cls)[0].get(source.attr, [])
    else:
        return None
    if not values:
        return None
    loaders: list[ast.Call] = []
    for value in values:
        if not (isinstance(value, ast.Call) and ctx.call_name(value) == DATALOADER and _pin_state(value)):
            return None
        loaders.append(value)
    return loaders[0]


def _root_name(node: ast.AST) -> Optional[ast.Name]:
    """``batch["x"][0]`` -> ``batch``; ``x`` -> ``x``; anything else -> ``None``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _batch_loop(
    ctx: FileContext, name: ast.Name, at: ast.Call, hops: int = 0
) -> Optional[Union[ast.For, ast.AsyncFor]]:
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
            root = _root_name(later[0].value)
            if root is not None and root.id in _target_names(anc.target):
                return _batch_loop(ctx, root, at, hops + 1)
    return None


def _batch_source(ctx: FileContext, name: ast.Name, call: ast.Call) -> Optional[ast.Call]:
    """If ``name`` is (unpacked from) the target of a ``for ... in <unpinned loader>`` loop, that loader."""
    loop = _batch_loop(ctx, name, call)
    return _unpinned_loader(ctx, _unwrap_iter(loop.iter), call) if loop is not None else None


def loader_batch(ctx: FileContext, name: ast.Name, at: ast.Call) -> bool:
    """``name`` is (a part of) the target of a ``for ... in <DataLoader>`` loop around ``at``, not
    rebound in the loop before it: a batch as the loader made it, on the host. Only a plain
    ``DataLoader(...)`` of this file without a ``collate_fn`` (a collate function may move the batch),
    whose dataset is not a class of this file that mentions a device (a dataset kept on the GPU)."""
    loop = _batch_loop(ctx, name, at)
    return loop is not None and _target_loop_is_host(ctx, loop, at)


def _target_loop_is_host(ctx: FileContext, anc: Union[ast.For, ast.AsyncFor], at: ast.Call) -> bool:
    """The loop ``anc`` iterates plain DataLoaders of this file (through enumerate / tqdm / zip)."""
    source: ast.AST = _unwrap_iter(anc.iter)
    sources: list[ast.AST] = [source]
    if isinstance(source, ast.Call) and terminal_name(source.func) == "zip":
        sources = [_unwrap_iter(a) for a in source.args]  # zip(loader_a, loader_b): both plain
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
        made = _dataset_call(ctx, dataset, at)
        if made is not None:
            cls = next((c for c in ctx.classes if c.name == terminal_name(made.func)), None)
            if cls is not None and any(w in ast.unparse(cls) for w in (".cuda(", ".to(", "device")):
                return False
    return True


def _non_blocking_unpinned(ctx: FileContext) -> Iterator[Hit]:
    if not ctx.facts.mentions_cuda:
        return
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("to", "cuda"):
            continue
        kw = keyword(call, "non_blocking")
        if kw is None or not is_const(kw.value, True):
            continue
        if func.attr == "to" and call.args and is_const(call.args[0], "cpu"):
            continue  # device-to-host: another matter
        receiver = func.value
        if isinstance(receiver, ast.Call) and ctx.call_name(receiver) in ("torch.from_numpy", "torch.as_tensor"):
            if keyword(receiver, "device") is None:
                yield Hit(
                    call,
                    f"non_blocking=True on {snippet(receiver)}: a fresh tensor in pageable memory, "
                    "so the copy cannot overlap",
                )
            continue
        root = _root_name(receiver)
        if root is None:
            continue
        loader = _batch_source(ctx, root, call)
        if loader is not None:
            yield Hit(
                call,
                f"non_blocking=True on `{root.id}`, a batch of the DataLoader at line {loader.lineno} "
                "that does not pin memory: a copy from pageable memory cannot overlap",
            )


RULES = [
    Rule(
        "LS101",
        "T13",
        "tensor-from-numpy",
        "torch.tensor(ndarray) on a visible numpy array copies it",
        "torch.from_numpy(arr) (shares memory) or torch.as_tensor(arr, dtype=..., device=...)",
        _tensor_from_numpy,
        ("numpy", r"tensor\s*\("),
    ),
    Rule(
        "LS102",
        "T02",
        "loader-no-workers",
        "DataLoader without num_workers, or with num_workers=0, in a file that moves batches to CUDA",
        _WORKERS_FIX,
        _loader_workers,
        ("DataLoader",),
    ),
    Rule(
        "LS103",
        "T03",
        "loader-no-pin-memory",
        "DataLoader without pin_memory=True in a file that moves batches to CUDA",
        "pin_memory=True (only when training on a GPU), and copy the batches with .to(device, non_blocking=True) "
        "(Lightning does): a pinned batch then crosses while the GPU computes",
        _loader_pin_memory,
        ("DataLoader",),
    ),
    Rule(
        "LS104",
        "T21",
        "non-blocking-from-pageable",
        "non_blocking=True on a tensor that is visibly not pinned (a batch of a loader without pin_memory=True, "
        "torch.from_numpy(...)) in a file that moves data to CUDA",
        "pin the source: DataLoader(..., pin_memory=True) or tensor.pin_memory(); non_blocking only overlaps from pinned memory",
        _non_blocking_unpinned,
        ("non_blocking",),
    ),
    Rule(
        "LS105",
        "T13",
        "tensor-of-tensors",
        "torch.tensor([...]) of tensors (a list comprehension or literal)",
        "torch.stack([...]) keeps the data on its device in one kernel",
        _tensor_of_tensors,
        (r"tensor\s*\(\s*[\[(]",),
    ),
]
