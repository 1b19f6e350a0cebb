"""LS2xx: device synchronisations and where tensors are created (tips T08, T20)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Optional

from lightning_speedups.lint.astutil import is_string_format, mentions_step
from lightning_speedups.lint.context import DEF_TYPES, FileContext, is_const, keyword, snippet, terminal_name
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at
from lightning_speedups.lint.rules.data import loader_batch
from lightning_speedups.lint.where import STEP_METHODS, TRAIN_BATCH_HOOKS, UNKNOWN, Runs, _is_step_call

SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
#: Builtins that read a tensor's value on the host: ``bool(t)``, ``float(t)``, ``int(t)``.
_SYNC_BUILTINS = frozenset({"bool", "float", "int"})


#: files a per-step rule looks at: a training step shows in the text (the graph's own test)
_HOT_TRIGGER = mentions_step


TENSOR_FACTORIES = frozenset(
    "zeros ones empty full rand randn randint randperm arange linspace logspace eye "
    "zeros_like ones_like empty_like full_like rand_like randn_like randint_like empty_strided "
    "normal bernoulli".split()
)
#: Legacy typed constructors: ``torch.LongTensor(n)`` is an uninitialised CPU tensor of size n.
LEGACY_CONSTRUCTORS = frozenset(
    "Tensor FloatTensor DoubleTensor HalfTensor BFloat16Tensor LongTensor IntTensor ShortTensor CharTensor "
    "ByteTensor BoolTensor".split()
)
#: Factories (and in-place fills) that draw random numbers: on the device they use another generator.
RANDOM_FACTORIES = frozenset("rand randn randint randperm rand_like randn_like randint_like normal bernoulli".split())
_RANDOM_INPLACE = frozenset("random_ uniform_ normal_ bernoulli_ exponential_ geometric_ cauchy_ log_normal_".split())
# Calls that keep a just-created tensor "just created, on the CPU" for LS203.
_PASS_METHODS = (
    frozenset(
        "float half double long int short bool bfloat16 byte char contiguous view reshape unsqueeze squeeze "
        "expand repeat t permute transpose flatten fill_ zero_ scatter_ fill_diagonal_ masked_fill_ index_fill_ "
        "triu_ tril_ triu tril".split()
    )
    | _RANDOM_INPLACE
)


def _for_rpc(ctx: FileContext, call: ast.Call) -> bool:
    """``call`` is an argument of an RPC call (``rpc.rpc_sync(..., args=(x.cpu(),))``): RPC needs CPU tensors."""
    for anc, _ in ctx.ancestors(call):
        if isinstance(anc, ast.stmt):
            return False
        if isinstance(anc, ast.Call) and anc is not call:
            name = terminal_name(anc.func).lower()
            qual = ctx.call_name(anc) or ""
            if "rpc" in name or "remote" in name or qual.startswith("torch.distributed.rpc"):
                return True
    return False


def _condition_tensors(ctx: FileContext, test: ast.AST) -> list[ast.AST]:
    """The operands of a Python condition that are visibly tensors (``if torch.isfinite(loss).all():``)."""
    out: list[ast.AST] = []
    stack = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            stack.append(node.operand)
        elif isinstance(node, ast.BoolOp):
            stack.extend(node.values)
        elif ctx.is_tensor(node):
            out.append(node)
    return out


def _latched(node: ast.AST, test: ast.AST) -> bool:
    """``if flag or <tensor test>:`` whose body sets ``flag = True``: once the flag is set the tensor is
    never read again (SwAV's ``use_the_queue or not torch.all(queue[i, -1, :] == 0)``), so it is not a
    read on every step."""
    if not (isinstance(node, ast.If) and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or)):
        return False
    flags = {ast.unparse(v) for v in test.values[:-1] if isinstance(v, (ast.Name, ast.Attribute))}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and is_const(stmt.value, True):
            if any(isinstance(t, (ast.Name, ast.Attribute)) and ast.unparse(t) in flags for t in stmt.targets):
                return True
    return False


#: Explicit waits for the device (LS205); a sync after one of them waits for nothing more.
SYNCHRONIZE = frozenset(
    {
        "torch.cuda.synchronize",
        "torch.accelerator.synchronize",
        "torch.mps.synchronize",
        "torch.xpu.synchronize",
        "torch.cuda.current_stream.synchronize",
    }
)
#: Receivers whose calls need host data: an environment's step, a numpy replay buffer.
_HOST_CONSUMERS = ("env", "buffer", "replay", "mem", "rb")
_HOST_METHODS = frozenset(
    {"step", "add", "push", "append", "insert", "store", "extend", "update_priorities", "update_priority"}
)


def _is_synchronize(ctx: FileContext, call: ast.Call) -> bool:
    name = ctx.call_name(call) or ""
    if name in SYNCHRONIZE:
        return True
    func = call.func  # torch.cuda.current_stream().synchronize(), torch.cuda.Stream.synchronize
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "synchronize"
        and isinstance(func.value, ast.Call)
        and (ctx.call_name(func.value) or "").startswith("torch.")
    )


def _after_synchronize(ctx: FileContext, call: ast.Call) -> bool:
    """An explicit ``torch.cuda.synchronize()`` comes earlier in the same function: the device is idle
    already, so reading a value costs a copy, not a wait (LS205 reports the synchronize itself)."""
    fn: Optional[ast.AST] = ctx.enclosing_function(call)
    if fn is None:  # a script's module-level loop: the synchronize must be in the same loop
        fn = next((anc for anc, _ in ctx.ancestors(call) if isinstance(anc, (ast.For, ast.AsyncFor, ast.While))), None)
        if fn is None:
            return False
    memo = ctx.__dict__.setdefault("_sync_lines", {})
    lines = memo.get(fn)
    if lines is None:
        lines = memo[fn] = [n.lineno for n in ctx.calls_within(fn) if _is_synchronize(ctx, n)]
    return any(line < call.lineno for line in lines)


def _consumer(node: ast.AST) -> bool:
    """``node`` is a call that needs host data: ``envs.step(a)``, ``rb.add(...)``, ``buffer.push(...)``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr not in _HOST_METHODS:
        return False
    owner = terminal_name(node.func.value).lower()
    return any(w in owner for w in _HOST_CONSUMERS)


def _consumers(ctx: FileContext, scope: ast.AST) -> list[ast.Call]:
    memo = ctx.__dict__.setdefault("_consumers", {})
    found = memo.get(scope)
    if found is None:
        found = memo[scope] = [n for n in ctx.calls_within(scope) if _consumer(n)]
    return found


def _for_host_consumer(ctx: FileContext, call: ast.Call) -> bool:
    """The host copy is what the next call needs: an environment steps on numpy actions, a numpy
    replay buffer stores them (directly, or through a name assigned from the copy in this function)."""
    for anc, _ in ctx.ancestors(call):
        if _consumer(anc):
            return True
        if isinstance(anc, ast.stmt):
            if isinstance(anc, ast.Assign):
                names = {t.id for t in anc.targets if isinstance(t, ast.Name)}
                names |= {
                    e.id for t in anc.targets if isinstance(t, ast.Tuple) for e in t.elts if isinstance(e, ast.Name)
                }
                fn = ctx.enclosing_function(call) or ctx.tree
                if names:
                    for node in _consumers(ctx, fn):
                        if _consumer(node) and getattr(node, "lineno", 0) > anc.lineno:
                            used = {
                                n.id
                                for a in [*node.args, *(k.value for k in node.keywords)]
                                for n in ast.walk(a)
                                if isinstance(n, ast.Name)
                            }  # type: ignore[attr-defined]
                            if names & used:
                                return True
            return False
    return False


#: Calls that keep a tensor where it is (a host tensor stays on the host).
_KEEP_DEVICE = _PASS_METHODS | frozenset({"detach", "clone", "numpy", "cpu", "squeeze_", "unsqueeze_", "type_as"})
#: Text that moves the default device (factories and data loaders may then make CUDA tensors).
_DEFAULT_DEVICE_WORDS = ("set_default_tensor_type", "set_default_device", "set_default_dtype_device")


def _default_device_moved(ctx: FileContext) -> bool:
    """The run may make tensors on the GPU by default (``torch.set_default_tensor_type('torch.cuda...')``,
    ``torch.set_default_device``, ``with torch.device("cuda"):``), in this file or in a project file it
    imports or that imports it."""
    if _sets_gpu_default(ctx.source):
        return True
    memo = ctx.__dict__.get("_default_device")
    if memo is None:
        project = ctx.project
        memo = ctx.__dict__["_default_device"] = project is not None and project.related_file_mentions(
            ctx, _DEFAULT_DEVICE_WORDS, _sets_gpu_default
        )
    return bool(memo)


def _sets_gpu_default(source: str) -> bool:
    """The text sets a default device that is not plainly the CPU: ``set_default_tensor_type`` given a CUDA
    type, ``set_default_device(...)`` / ``with torch.device(...)`` of anything
    but ``"cpu"``."""
    for word in (*_DEFAULT_DEVICE_WORDS, "with torch.device("):
        i = source.find(word)
        while i != -1:
            after = source[i + len(word) : i + len(word) + 120]
            if word == "set_default_tensor_type":
                if "cuda" in after.split(")", 1)[0]:
                    return True
            else:
                arg = after.lstrip("( ").split(")", 1)[0].strip()
                if arg not in ('"cpu"', "'cpu'"):
                    return True
            i = source.find(word, i + 1)
    return False


def _host_tensor(ctx: FileContext, node: ast.AST, at: ast.Call, depth: int = 0) -> bool:
    """``node`` is visibly a tensor on the host: a torch factory or constructor without a device
    (``torch.ones((1, 3))``, ``torch.Tensor([a, b])``, ``torch.from_numpy(x)``), a name whose every
    earlier binding is one, or a batch straight from a plain ``DataLoader`` (never moved before the
    read). Reading it with ``.cpu()`` / ``.numpy()`` copies nothing from a GPU and waits for none."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KEEP_DEVICE:
            node = node.func.value
        elif isinstance(node, ast.Attribute) and node.attr == "data":
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Call):
        name = ctx.call_name(node) or ""
        if not name.startswith("torch.") or name.count(".") != 1:
            return False
        factory = name.split(".")[1]
        known = (
            (factory in TENSOR_FACTORIES and not factory.endswith("_like"))
            or factory in LEGACY_CONSTRUCTORS
            or factory in ("tensor", "as_tensor", "from_numpy")
        )
        if not known:
            return False
        device = keyword(node, "device")
        if device is not None and not is_const(device.value, "cpu"):
            return False
        if factory in ("tensor", "as_tensor") or (factory in LEGACY_CONSTRUCTORS and node.args):
            # torch.tensor(t) / as_tensor(t) of a tensor stays on t's device: only host data counts
            data = node.args[0] if node.args else None
            host = data is not None and (
                ctx.is_numpy(data)
                or isinstance(data, ast.Constant)
                or (isinstance(data, (ast.List, ast.Tuple)) and not any(ctx.is_tensor(e) for e in data.elts))
                or (factory in LEGACY_CONSTRUCTORS and all(isinstance(a, (ast.Constant, ast.Name)) for a in node.args))
            )
            if not host:
                return False
        return not _default_device_moved(ctx)
    if isinstance(node, ast.Name) and depth < 2:
        prior = ctx.bindings_before(node)
        if prior and all(b.kind == "value" and b.value is not None for b in prior):
            return all(_host_tensor(ctx, b.value, at, depth + 1) for b in prior)  # type: ignore[arg-type]
        if prior and loader_batch(ctx, node, at):  # the loop's own binding, not rebound before the read
            return not _default_device_moved(ctx)
    return False


def _drop_repeated_reads(ctx: FileContext, found: dict[ast.AST, tuple[str, Runs]]) -> None:
    """A second read of the same value (``epoch_loss += loss.item()`` then ``log({"loss": loss.item()})``)
    waits for nothing new when nothing between the two reads queues device work (no step, no tensor op) and
    the value is not rebound: it copies a few bytes again. Only the first read is reported."""
    groups: dict[tuple[Optional[ast.AST], str], list[ast.Call]] = {}
    for node in found:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS:
            scope = ctx.enclosing_function(node)
            groups.setdefault((scope, snippet(node, 200)), []).append(node)
    for (scope, _), reads in groups.items():
        if len(reads) < 2:
            continue
        reads.sort(key=lambda c: (c.lineno, c.col_offset))
        first = reads[0]
        receiver = first.func.value  # type: ignore[attr-defined]
        roots = {n.id for n in ast.walk(receiver) if isinstance(n, ast.Name)}
        bindings = ctx.bindings(scope if scope is not None else ctx.tree)
        for later in reads[1:]:
            lo, hi = first.lineno, later.lineno
            rebound = any(lo <= b.line <= hi for name in roots for b in bindings.get(name, ()))
            if not _guards(ctx, first) <= _guards(ctx, later):
                first = later  # the first read runs only on some path (`if verbose:`): the later one may wait
                continue
            own = {id(n) for read in (first, later) for n in ast.walk(read)}
            between = [c for c in _calls_between(ctx, lo, hi) if id(c) not in own and c not in reads]
            busy = any(_is_step_call(c) or ctx.is_tensor(c) for c in between)
            if rebound or busy:
                first = later
                continue
            found.pop(later, None)


_CONDITIONAL = (ast.If, ast.IfExp, ast.BoolOp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.ExceptHandler)


def _guards(ctx: FileContext, node: ast.AST) -> set[tuple[int, str]]:
    """The conditional constructs around ``node`` in its function, with the branch it is in."""
    out: set[tuple[int, str]] = set()
    for anc, child in ctx.ancestors(node):
        if isinstance(anc, DEF_TYPES):
            break
        if isinstance(anc, _CONDITIONAL) or isinstance(anc, ast.comprehension):
            field = next(
                (
                    f
                    for f, v in ast.iter_fields(anc)
                    if v is child or (isinstance(v, list) and any(x is child for x in v))
                ),
                "",
            )
            if isinstance(anc, ast.BoolOp):
                field = str(next((i for i, v in enumerate(anc.values) if v is child), 0))
            out.add((id(anc), field))
    return out


def _calls_between(ctx: FileContext, lo: int, hi: int) -> list[ast.Call]:
    """The file's calls on lines ``lo`` to ``hi``."""
    probe = ast.Pass(lineno=lo, end_lineno=hi, col_offset=0, end_col_offset=0)
    return ctx.calls_within(probe)


def _syncs(ctx: FileContext) -> list[tuple[ast.AST, str, Runs]]:
    """Every host read on a per-step line of the file: ``(node, message, runs)`` (LS201 and LS206)."""
    cached = ctx.__dict__.get("_syncs")
    if cached is not None:
        return cached
    found: dict[ast.AST, tuple[str, Runs]] = {}
    builtins_ok = {b for b in _SYNC_BUILTINS if not ctx.imports_name(b)}
    for call in ctx.calls:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in SYNC_METHODS and not call.args:
            receiver = func.value
            if isinstance(receiver, ast.Name) and receiver.id == "self":
                continue  # self.cpu(): moving the module, not reading a tensor
            if ctx.qualname(receiver) is not None:
                continue  # an imported module's function (e.g. np.item is not a tensor method)
            r = ctx.hot_runs(call)
            if r is not None and not _for_rpc(ctx, call) and not _for_host_consumer(ctx, call):
                if not _after_synchronize(ctx, call) and not _host_tensor(ctx, receiver, call):
                    found[call] = (f"`.{func.attr}()` in {r.where} copies to the host and waits for the GPU", r)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ("get_scale", "state_dict")
            and not call.args
            and "scaler" in terminal_name(func.value).lower()
        ):
            # GradScaler.get_scale() (and the state_dict() that holds it) is the scale's .item()
            r = ctx.hot_runs(call)
            if r is not None and not _after_synchronize(ctx, call):
                found[call] = (
                    f"`{snippet(call, 40)}` in {r.where} reads the loss scale on the host (GradScaler's .item())",
                    r,
                )
        elif isinstance(func, ast.Name) and func.id in builtins_ok and len(call.args) == 1 and not call.keywords:
            r = ctx.hot_runs(call)
            if r is not None and ctx.is_tensor(call.args[0]) and not _after_synchronize(ctx, call):
                found[call] = (
                    f"`{func.id}({snippet(call.args[0], 30)})` in {r.where} reads a tensor on the host (a device sync)",
                    r,
                )
    for node in ctx.branches:
        test = node.test  # type: ignore[attr-defined]
        r = ctx.hot_runs(test)
        if r is None:
            continue
        operands = _condition_tensors(ctx, test)
        if not operands or _latched(node, test):
            continue
        kind = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(node)]
        shown = snippet(operands[0], 30)
        found[operands[0]] = (f"`{kind} {shown}` in {r.where} turns a tensor into a Python bool: a device sync", r)
    _drop_repeated_reads(ctx, found)
    # x.detach().cpu().numpy(): one finding for the chain, on the outermost call
    inner: set[ast.AST] = set()
    for node in found:
        if not isinstance(node, ast.Call):
            continue
        cur = node.func.value if isinstance(node.func, ast.Attribute) else None
        while isinstance(cur, (ast.Call, ast.Attribute, ast.Subscript)):
            if isinstance(cur, ast.Call):
                if cur in found:
                    inner.add(cur)
                cur = cur.func
            else:
                cur = cur.value
    out = [(node, message, r) for node, (message, r) in found.items() if node not in inner]
    ctx.__dict__["_syncs"] = out
    return out


def _sync_calls(ctx: FileContext) -> Iterator[Hit]:
    for node, message, r in _syncs(ctx):
        if not r.via:
            yield Hit(node, message + " on every batch")


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
        if any(other.is_tensor(a) for a in [*call.args, *(k.value for k in call.keywords)]):
            return True
    return False


def _read_of_visible_tensor(ctx: FileContext, node: ast.AST) -> bool:
    """The host read ``node`` (``x.item()``, ``x.tolist()``, ...) is of something visibly a tensor: ``x`` is
    one in the helper, or is the helper's parameter and a caller passes a visible tensor. In a helper of
    another file, ``x.tolist()`` of boxes a plotting helper got as numpy must not pass for a sync."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS):
        return True  # bool(t) / a tensor condition: the classifier already saw a tensor
    receiver = node.func.value
    if ctx.is_tensor(receiver) or _tensor_guarded(ctx, node):  # under `if isinstance(v, torch.Tensor):`
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
    prior = ctx.bindings_before(receiver) or []
    return bool(prior) and all(b.kind == "param" for b in prior) and _passes_tensor(ctx, node)


def _sync_in_helper(ctx: FileContext) -> Iterator[Hit]:
    for node, message, r in _syncs(ctx):
        if r.via and _tensor_guarded(ctx, node) and not _passes_tensor(ctx, node):
            continue  # the step passes numbers: the guarded host read never runs
        if r.via and not _read_of_visible_tensor(ctx, node):
            continue
        if r.via:
            yield Hit(node, f"{message} on every batch: the step that calls it is at {r.via}")


def _per_step_calls(ctx: FileContext, matches: Callable[[ast.Call], bool], says: str) -> Iterator[Hit]:
    """The calls ``matches`` picks on a line that runs once per training step (not every N steps, not in an
    ``except`` block: an out-of-memory retry), outside benchmark / profiling / debugging code."""
    for call in ctx.calls:
        if not matches(call):
            continue
        r = ctx.hot_runs(call)
        if r is None or ctx.is_exempt(call, _TIMING_WORDS):
            continue
        yield Hit(call, f"{snippet(call.func, 40)}() in {r.where} {says}")


def _synchronize_in_step(ctx: FileContext) -> Iterator[Hit]:
    yield from _per_step_calls(
        ctx,
        lambda call: _is_synchronize(ctx, call),
        "waits for every queued kernel on every batch (the host can no longer run ahead of the GPU)",
    )


_TIMING_WORDS = ("bench", "profil", "debug")
#: The caching allocator's ``empty_cache`` of each device module.
EMPTY_CACHE = frozenset(
    {"torch.cuda.empty_cache", "torch.mps.empty_cache", "torch.xpu.empty_cache", "torch.accelerator.empty_cache"}
)


def _empty_cache_in_step(ctx: FileContext) -> Iterator[Hit]:
    yield from _per_step_calls(
        ctx,
        lambda call: ctx.call_name(call) in EMPTY_CACHE,
        "hands the allocator's cached blocks back to the driver on every batch: freeing them waits for the "
        "device, and the next step allocates them again",
    )


#: Where ``self.log`` logs every step by default (``on_step=True``): the training step and the hooks that run
#: with it (Lightning's ``_FxValidator``: on_train_batch_*, on_before / after_backward, on_before_optimizer_step,
#: on_before_zero_grad), the same hooks the frequency analysis knows as per training step.
_ON_STEP_DEFAULT = frozenset({"training_step"}) | TRAIN_BATCH_HOOKS


def _sync_dist_per_step(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("log", "log_dict")):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id in ("self", "pl_module")):
            continue
        kw = keyword(call, "sync_dist")
        if kw is None or not is_const(kw.value, True):
            continue
        fn = ctx.enclosing_function(call)
        on_step = keyword(call, "on_step")
        if on_step is not None:
            every_step = not is_const(on_step.value, False)
        else:  # Lightning's default: on_step=True in the training step, False in validation / test
            every_step = isinstance(fn, DEF_TYPES) and fn.name in _ON_STEP_DEFAULT  # type: ignore[union-attr]
        if not every_step:
            continue  # reduced once, when the epoch's value is computed
        r = ctx.hot_runs(call)
        if r is None:
            continue
        yield Hit(
            call,
            f"self.{func.attr}(..., sync_dist=True) in {r.where} reduces the value across processes on every step "
            "(a collective the ranks wait for, under DDP / FSDP)",
        )


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
        if ctx.is_tensor(value):
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
    candidates: list[tuple[ast.AST, ast.AST, str]] = []
    for node in ctx.parents:
        if is_string_format(node):
            if isinstance(node, ast.JoinedStr) and isinstance(ctx.parents.get(node), ast.FormattedValue):
                continue  # a format spec inside an f-string
            if not ctx._maybe_hot(node):
                continue
            shown = ctx.formatted_tensor(node)
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
                if ctx.is_tensor(a):
                    # logging.info("loss %s", t) is a %-format; logger.log("train/loss", t, step) hands the
                    # tensor to a logger that formats it or reads it with .item()
                    kind = "(a %-format)" if percent else "(a key and a value: the logger formats or reads it)"
                    candidates.append((call, a, f"{snippet(call.func, 30)}(...) {kind}"))
                    break
        else:
            read = _logger_reads(ctx, call)
            if read is not None and ctx._maybe_hot(call):
                candidates.append((call, read[0], read[1]))
    for node, shown, kind in sorted(candidates, key=lambda c: (c[0].lineno, c[0].col_offset)):  # type: ignore[attr-defined]
        if node in reported or _in_print(ctx, node):
            continue
        r = ctx.hot_runs(node)
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


def _print_tensor(ctx: FileContext) -> Iterator[Hit]:
    if ctx.imports_name("print"):
        return  # rich's print, or another one: not the builtin
    for call in ctx.calls:
        if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        shown = [a for a in call.args if ctx.formats_tensor(a)]
        if not shown:
            continue
        if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in SYNC_METHODS and not n.args
            for a in call.args
            for n in ast.walk(a)
        ):
            continue  # print(..., d_loss.item(), M): the .item() waits first (LS201); formatting M waits for nothing new
        where = ctx.hot_context(call, STEP_METHODS)
        if where is not None:
            yield Hit(call, f"print({snippet(shown[0], 30)}) in {where} formats a tensor: a device sync on every batch")


def _moves_to_cuda_by_type(call: ast.Call) -> bool:
    """``.type("torch.cuda.FloatTensor")`` / ``.type(torch.cuda.FloatTensor)``: a move to the GPU."""
    return bool(call.args) and "cuda" in snippet(call.args[0], 200)


#: dtype of each legacy typed constructor (``torch.Tensor`` is the default dtype, as ``torch.empty``'s).
LEGACY_DTYPES = {
    "Tensor": None,
    "FloatTensor": "float32",
    "DoubleTensor": "float64",
    "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64",
    "IntTensor": "int32",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "ByteTensor": "uint8",
    "BoolTensor": "bool",
}
#: ``.type("torch.cuda.FloatTensor")``: the dtype that type string names.
_TYPE_STRINGS = {f"torch.cuda.{k}": v for k, v in LEGACY_DTYPES.items() if v is not None}


_SIZED_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn"})


def _empty_size(sizes: list[ast.expr]) -> bool:
    """A literal 0 among the sizes (``torch.empty(0)``, ``torch.zeros((0, d))``): an empty tensor."""
    for size in sizes:
        elts = size.elts if isinstance(size, (ast.Tuple, ast.List)) else [size]
        if any(is_const(e, 0) for e in elts):
            return True
    return False


def _created_on_cpu(ctx: FileContext, move: ast.Call) -> Optional[tuple[str, bool, ast.Call, list[ast.Call]]]:
    """``(factory, random, factory call, calls between it and the move)`` when ``move``'s receiver is
    a fresh CPU tensor from a torch factory."""
    random = False
    filled = False  # an in-place fill in the chain: the constructor's arguments are sizes
    chain: list[ast.Call] = []
    inner = move.func.value  # type: ignore[attr-defined]
    while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
        attr = inner.func.attr
        if attr == "pin_memory":
            return None  # staged in pinned memory on purpose: the copy can overlap
        if attr in _PASS_METHODS:
            random = random or attr in _RANDOM_INPLACE
            filled = filled or attr.endswith("_")
        elif attr == "to" and not ctx.is_device_move(inner):
            pass
        elif attr == "type" and not _moves_to_cuda_by_type(inner):
            pass
        else:
            break
        chain.append(inner)
        inner = inner.func.value
    if not isinstance(inner, ast.Call):
        return None
    name = ctx.call_name(inner)
    if name is None or not name.startswith("torch.") or name.count(".") != 1:
        return None
    factory = name.split(".")[1]
    pin = keyword(inner, "pin_memory")
    if pin is not None and not (isinstance(pin.value, ast.Constant) and pin.value.value is False):
        return None
    chain.reverse()
    if factory in LEGACY_CONSTRUCTORS:
        # torch.LongTensor(n).random_(8): sizes, then a fill. Without a fill the arguments may be
        # data (torch.Tensor(values)), which must cross to the device anyway: not a finding.
        return (factory, random, inner, chain) if filled and inner.args else None
    if factory.endswith("_like"):
        return None  # made where its argument lives, which the file seldom shows (often the GPU already)
    if factory in _SIZED_FACTORIES and _empty_size(inner.args[:1] if factory == "full" else inner.args):
        return None  # torch.empty(0).to(x.device): nothing to copy, the move costs no more than the fix
    if factory in TENSOR_FACTORIES or (factory == "tensor" and inner.args and _literal_numbers(inner.args[0])):
        if _default_device_moved(ctx):
            return None  # torch.set_default_device / a CUDA default tensor type: made on the GPU already
        return factory, random or factory in RANDOM_FACTORIES, inner, chain
    return None


def _literal_numbers(node: ast.AST) -> bool:
    """``0.``, ``-1``, ``True``: a number written in the code. ``torch.tensor(0.).to(device)`` copies it
    from the host, and so would ``torch.tensor(0., device=device)`` (the data is built on the CPU and
    copied, a blocking copy); ``torch.full((), 0., device=device)`` fills it on the device. Data from the
    run, or a list (which no device fill makes), must cross anyway: not a finding."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool)


#: Calls that keep a name's tensor where and what it was (``alpha = alpha.expand_as(x)``) for LS203.
_REBIND_METHODS = _PASS_METHODS | frozenset({"expand_as", "view_as", "reshape_as"})


def _bound_then_moved(ctx: FileContext, move: ast.Call) -> Optional[tuple[str, bool, ast.Call]]:
    """``(factory, random, factory call)`` when ``move``'s receiver is a name whose every earlier binding in
    its scope is a fresh CPU tensor from a torch factory (``alpha = torch.rand(b, 1, 1, 1)``) or that same
    name kept as it is (``alpha = alpha.expand_as(x)``), and the name is not used otherwise between the
    factory and the move (an element-wise fill on the host would be slower on the device)."""
    inner = move.func.value  # type: ignore[attr-defined]
    random = False
    while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in _REBIND_METHODS:
        random = random or inner.func.attr in _RANDOM_INPLACE  # zc_idx.random_(n_c).cuda()
        inner = inner.func.value
    if not isinstance(inner, ast.Name):
        return None
    prior = ctx.bindings_before(inner)
    if not prior or any(b.kind != "value" or b.value is None for b in prior):
        return None
    made: Optional[tuple[str, bool, ast.Call]] = None
    first = None
    for b in prior:
        value = b.value
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            if value.func.attr not in _REBIND_METHODS:
                break
            random = random or value.func.attr in _RANDOM_INPLACE
            value = value.func.value
        if isinstance(value, ast.Name) and value.id == inner.id:
            continue  # alpha = alpha.expand_as(x): the same tensor
        if not isinstance(value, ast.Call):
            return None
        name = ctx.call_name(value) or ""
        if not name.startswith("torch.") or name.count(".") != 1:
            return None
        factory = name.split(".")[1]
        if factory not in TENSOR_FACTORIES or factory.endswith("_like") or keyword(value, "device") is not None:
            return None
        if keyword(value, "pin_memory") is not None:
            return None
        if factory in _SIZED_FACTORIES and _empty_size(value.args[:1] if factory == "full" else value.args):
            return None
        made = (factory, random or factory in RANDOM_FACTORIES, value)
        first = b.line if first is None else min(first, b.line)
    if made is None or first is None or _default_device_moved(ctx):
        return None
    # every use of the name between the factory and the move must be the name kept as it is
    scope = ctx.scope_of(inner)
    rebinds = {b.line for b in prior}
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Name)
            and node.id == inner.id
            and isinstance(node.ctx, ast.Load)
            and first < node.lineno < move.lineno
            and node.lineno not in rebinds
        ):
            return None
    return made


def _torch_alias(ctx: FileContext) -> str:
    for local, target in ctx.aliases.items():
        if target == "torch":
            return local
    return "torch"


def _device_fix(
    ctx: FileContext, move: ast.Call, factory: str, inner: ast.Call, chain: list[ast.Call]
) -> Optional[str]:
    """The expression that creates the same tensor (same dtype, shape and values) on the device, or
    ``None`` where the move's target or dtype cannot be read off the code."""
    torch = _torch_alias(ctx)
    func = move.func
    assert isinstance(func, ast.Attribute)
    device: Optional[ast.expr] = None
    dtype: Optional[ast.expr] = None
    if func.attr == "cuda":
        kw = keyword(move, "device")
        arg = move.args[0] if move.args else (kw.value if kw is not None else None)
        if arg is None:
            device = ast.Constant("cuda")
        elif isinstance(arg, ast.Constant) and type(arg.value) is int:
            device = ast.Constant(f"cuda:{arg.value}")
        else:
            return None  # .cuda(rank): a number or a device, the code does not say which
    elif func.attr == "to":
        kw = keyword(move, "device")
        device = kw.value if kw is not None else (move.args[0] if move.args else None)
        rest = move.args[1:] if kw is None else move.args
        dkw = keyword(move, "dtype")
        if dkw is not None:
            dtype = dkw.value
        elif rest:
            dtype = rest[0]
        if isinstance(device, ast.Constant) and type(device.value) is int:
            device = ast.Constant(f"cuda:{device.value}")
        if any(k.arg not in ("device", "dtype", "non_blocking", "copy") for k in move.keywords):
            return None  # memory_format=...: keep the move
    elif func.attr == "type":
        arg = move.args[0] if move.args else None
        if arg is None:
            return None
        text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else snippet(arg, 80)
        name = _TYPE_STRINGS.get(str(text))
        if name is None:
            return None
        device = ast.Constant("cuda")
        dtype = ast.parse(f"{torch}.{name}", mode="eval").body
    if device is None:
        return None
    keywords = [k for k in inner.keywords if k.arg != "device"]
    new_func = inner.func
    args = list(inner.args)
    if factory == "tensor":  # torch.tensor(0.) -> torch.full((), 0.): the same dtype, filled on the device
        new_func = ast.parse(f"{torch}.full", mode="eval").body
        args = [ast.Tuple([], ast.Load()), *args]
    if factory in LEGACY_CONSTRUCTORS:
        new_func = ast.parse(f"{torch}.empty", mode="eval").body
        legacy = LEGACY_DTYPES[factory]
        if legacy is not None:
            keywords.append(ast.keyword("dtype", ast.parse(f"{torch}.{legacy}", mode="eval").body))
    expr: ast.expr = ast.Call(new_func, args, [*keywords, ast.keyword("device", device)])
    for call in chain:
        assert isinstance(call.func, ast.Attribute)
        expr = ast.Call(ast.Attribute(expr, call.func.attr, ast.Load()), list(call.args), list(call.keywords))
    if dtype is not None:
        expr = ast.Call(ast.Attribute(expr, "to", ast.Load()), [dtype], [])
    return ast.unparse(expr)


_MOVES = (".to(", ".cuda(", ".type(")
_FACTORY_WORDS = tuple(
    f + "("
    for f in (
        "zeros",
        "ones",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "randperm",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "normal",
        "bernoulli",
        "Tensor",
        "tensor",
        "_like",
        "empty_strided",
    )
)


def _factory_then_move_trigger(source: str) -> bool:
    """A ``.to(`` / ``.cuda(`` / ``.type(`` right after a ``)`` (across line breaks too), with a
    factory call in the 400 characters before it, or right after a name with a ``torch.`` factory call
    there (bound to the name): what LS203 needs, checked without parsing."""
    for move in _MOVES:
        i = source.find(move)
        while i != -1:
            j = i - 1
            while j >= 0 and source[j] in " \t\r\n\\":
                j -= 1
            if j >= 0 and source[j] == ")":
                window = source[max(0, i - 400) : i]
                if any(f in window for f in _FACTORY_WORDS):
                    return True
            elif j >= 0 and (source[j].isalnum() or source[j] == "_"):
                # alpha = torch.rand(b, 1) ... alpha.cuda(): a factory bound to a name a few lines before
                window = source[max(0, i - 400) : i]
                if "torch." in window and any(f in window for f in _FACTORY_WORDS):
                    return True
            i = source.find(move, i + 1)
    return False


def _to_host_tensors_device(ctx: FileContext, move: ast.Call) -> bool:
    """``.to(var.device)`` where ``var`` is visibly on the host (``var = torch.bernoulli(torch.tensor(p))``):
    the move stays on the CPU and copies nothing."""
    if not (isinstance(move.func, ast.Attribute) and move.func.attr == "to"):
        return False
    kw = keyword(move, "device")
    target = kw.value if kw is not None else (move.args[0] if move.args else None)
    return isinstance(target, ast.Attribute) and target.attr == "device" and _host_tensor(ctx, target.value, move)


def _create_then_move(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        if not (ctx.is_device_move(call) or (func.attr == "type" and _moves_to_cuda_by_type(call))):
            continue
        created = _created_on_cpu(ctx, call)
        if created is None:
            bound = _bound_then_moved(ctx, call)
            if bound is not None:
                yield from _bound_hit(ctx, call, *bound)
            continue
        factory, random, inner, chain = created
        if _to_host_tensors_device(ctx, call):
            continue
        runs = ctx.runs(call)
        if runs.how == UNKNOWN and not ctx._maybe_hot(call):
            # nothing linted calls it and no training step reaches it: a sampling or demo script's
            # function, or an API for other code; its one-off tensors are not a training cost
            continue
        message = f"torch.{factory}(...) is created on the CPU and then copied by `.{func.attr}(...)`, {runs.how} (in {runs.where})"
        replacement = None
        if random:
            message += (
                "; on the device the numbers come from the device's generator, so a seeded run draws other values"
            )
            fix = (
                f"create it on the device (torch.{factory}(..., device=device)) where another random stream is "
                "acceptable; keep it where the run must reproduce CPU-seeded numbers"
            )
        else:
            replacement = _device_fix(ctx, call, factory, inner, chain)
            if replacement is not None:
                fix = f"create it on the device, same dtype and values: `{replacement}`"
            elif factory in LEGACY_CONSTRUCTORS:
                legacy = LEGACY_DTYPES[factory]
                dtype = f", dtype=torch.{legacy}" if legacy else " (torch.Tensor's dtype: the default float dtype)"
                fix = f"create it on the device with the same dtype: torch.empty(<sizes>{dtype}, device=<the move's target>), then the same fill"
            else:
                fix = f"create it on the device with the same dtype: torch.{factory}(..., device=<the move's target>) (the move's target is not plain here: check it is a device)"
        h = hit_at(call, message, runs, fix)
        if h is not None:
            yield h._replace(replacement=replacement) if replacement else h


#: numpy functions that make an array from sizes (and a fill value): the same array can be made on the device
_NUMPY_MADE = frozenset({"ones", "zeros", "full", "empty", "eye", "arange", "linspace"})


def _cuda_class(ctx: FileContext, node: ast.AST) -> Optional[str]:
    """The legacy class ``node`` names when it is ``torch.cuda.<X>Tensor`` (``"FloatTensor"``), else ``None``."""
    name = ctx.qualname(node) or ""
    parts = name.split(".")
    if len(parts) == 3 and parts[:2] == ["torch", "cuda"] and parts[2] in LEGACY_CONSTRUCTORS:
        return parts[2]
    return None


def _cuda_alias(ctx: FileContext, func: ast.AST) -> Optional[tuple[str, str]]:
    """``(class, device expression)`` when ``func`` is ``torch.cuda.FloatTensor`` or a name bound only to
    it (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``: PyTorch-GAN's alias)."""
    direct = _cuda_class(ctx, func)
    if direct is not None:
        return direct, "'cuda'"
    if not isinstance(func, ast.Name):
        return None
    prior = ctx.bindings_before(func)
    if prior is None and ctx.scope_of(func) is not ctx.tree:
        prior = ctx.bindings(ctx.tree).get(func.id)
    if not prior:
        return None
    found: Optional[tuple[str, str]] = None
    for b in prior:
        value = b.value
        if b.kind != "value" or value is None:
            return None
        cls = _cuda_class(ctx, value)
        if cls is not None:
            here = (cls, "'cuda'")
        elif isinstance(value, ast.IfExp):
            body, orelse = _cuda_class(ctx, value.body), _cuda_class(ctx, value.orelse)
            test = snippet(value.test, 60)
            if body is not None and orelse is None and ctx.qualname(value.orelse) == f"torch.{body}":
                here = (body, f"'cuda' if {test} else 'cpu'")
            elif orelse is not None and body is None and ctx.qualname(value.body) == f"torch.{orelse}":
                here = (orelse, f"'cpu' if {test} else 'cuda'")
            else:
                return None
        else:
            return None
        if found is not None and found != here:
            return None
        found = here
    return found


def _numpy_made_fix(ctx: FileContext, data: ast.Call, cls: str, device: str) -> tuple[Optional[str], str]:
    """``(replacement, fix text)`` for ``<CUDA class>(np.<f>(...))``: the same tensor made on the device."""
    torch = _torch_alias(ctx)
    name = (ctx.call_name(data) or "").split(".")
    dtype = LEGACY_DTYPES[cls]
    dtype_kw = f"dtype={torch}.{dtype}" if dtype else f"dtype={torch}.get_default_dtype()"
    func = name[-1]
    extra = [k for k in data.keywords if k.arg != "dtype"]
    if name[:2] == ["numpy", "random"]:
        args = [snippet(a, 80) for a in data.args]
        on = f"{dtype_kw}, device={device}"

        def size(text: str) -> str:
            return text if text.startswith("(") else f"({text},)"

        if func == "normal" and len(args) == 3 and not extra:
            shown = f"{torch}.randn({size(args[2])}, {on})"
            if args[1] != "1":
                shown += f" * {args[1]}"
            if args[0] != "0":
                shown += f" + {args[0]}"
        elif func == "randint" and len(args) == 3 and not extra:
            shown = f"{torch}.randint({args[0]}, {args[1]}, {size(args[2])}, {on})"
        elif func == "uniform" and len(args) == 3 and not extra:
            shown = f"{torch}.rand({size(args[2])}, {on}) * ({args[1]} - {args[0]}) + {args[0]}"
        elif func in ("rand", "randn") and args and not extra:
            shown = f"{torch}.{func}({', '.join(args)}, {on})"
        else:
            shown = f"the {torch} random factory of the same distribution, with {on}"
        return None, (
            f"draw it on the device: {shown}; the numbers then come from the device's generator, not numpy's "
            "stream, so a run seeded with np.random.seed draws other values: keep it where the run must "
            "reproduce numpy-seeded numbers"
        )
    if func in ("ones", "zeros") and len(data.args) == 1 and not extra:
        replacement = f"{torch}.{func}({snippet(data.args[0], 200)}, {dtype_kw}, device={device})"
        return replacement, f"create it on the device, same dtype and values: `{replacement}`"
    if func == "full" and len(data.args) == 2 and not extra:
        replacement = (
            f"{torch}.full({snippet(data.args[0], 200)}, {snippet(data.args[1], 80)}, {dtype_kw}, device={device})"
        )
        return replacement, f"create it on the device, same dtype and values: `{replacement}`"
    return (
        None,
        f"create it on the device: {torch}.{func}(..., {dtype_kw}, device={device}) (check the arguments: numpy's and torch's differ)",
    )


def _numpy_through_cuda_class(ctx: FileContext) -> Iterator[Hit]:
    """``Tensor(np.random.normal(0, 1, (n, d)))`` with ``Tensor`` a CUDA class: an array made on the host
    (random draws, ones, zeros) and copied to the GPU, where the same tensor could be made."""
    for call in ctx.calls:
        if len(call.args) != 1 or call.keywords:
            continue
        data = call.args[0]
        if not isinstance(data, ast.Call):
            continue
        name = ctx.call_name(data) or ""
        parts = name.split(".")
        if not (
            (len(parts) == 3 and parts[:2] == ["numpy", "random"])
            or (len(parts) == 2 and parts[0] == "numpy" and parts[1] in _NUMPY_MADE)
        ):
            continue
        alias = _cuda_alias(ctx, call.func)
        if alias is None:
            continue
        cls, device = alias
        runs = ctx.runs(call)
        if runs.how == UNKNOWN and not ctx._maybe_hot(call):
            continue
        replacement, fix = _numpy_made_fix(ctx, data, cls, device)
        shown = snippet(call.func, 30)
        message = (
            f"`{shown}({snippet(data, 40)})` makes the array on the host with numpy and copies it to the GPU "
            f"(`{shown}` is torch.cuda.{cls}), {runs.how} (in {runs.where})"
        )
        h = hit_at(call, message, runs, fix)
        if h is not None:
            yield h._replace(replacement=replacement) if replacement else h


def _bound_hit(ctx: FileContext, move: ast.Call, factory: str, random: bool, made: ast.Call) -> Iterator[Hit]:
    runs = ctx.runs(move)
    if runs.how == UNKNOWN and not ctx._maybe_hot(move):
        return
    func = move.func
    assert isinstance(func, ast.Attribute)
    message = (
        f"torch.{factory}(...) (line {made.lineno}) is created on the CPU and then copied by `.{func.attr}(...)`, "
        f"{runs.how} (in {runs.where})"
    )
    shown = ", ".join([*(snippet(a, 40) for a in made.args), *(snippet(k, 40) for k in made.keywords)])
    where = f"{snippet(made.func, 30)}({shown}, device=<the move's target>)"
    if random:
        message += "; on the device the numbers come from the device's generator, so a seeded run draws other values"
        fix = (
            f"create it on the device where it is made (line {made.lineno}): {where}, and drop the move, where "
            "another random stream is acceptable; keep it where the run must reproduce CPU-seeded numbers"
        )
    else:
        fix = (
            f"create it on the device where it is made (line {made.lineno}), same dtype: {where} (add the move's "
            "dtype, if it has one), and drop the move"
        )
    h = hit_at(move, message, runs, fix)
    if h is not None:
        yield h


def _create_then_move_all(ctx: FileContext) -> Iterator[Hit]:
    yield from _create_then_move(ctx)
    if "cuda" in ctx.source and ("np." in ctx.source or "numpy" in ctx.source):
        yield from _numpy_through_cuda_class(ctx)


def _ls203_trigger(source: str) -> bool:
    return _factory_then_move_trigger(source) or ("torch.cuda." in source and "Tensor" in source and "np" in source)


RULES = [
    Rule(
        "LS201",
        "T08",
        "sync-in-step",
        "`.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)`, `float(t)`, `int(t)`, a GradScaler's `get_scale()` or "
        "a tensor in an `if`/`while` condition inside training_step / validation_step or a training-loop body",
        "keep values on the device: log the tensor (self.log accepts tensors), accumulate with loss.detach(), "
        "read it on the host once per epoch or under `if step % N == 0`",
        _sync_calls,
        (_HOT_TRIGGER,),
    ),
    Rule(
        "LS202",
        "T08",
        "print-tensor-in-step",
        "print() of a tensor (also in an f-string or %-format) inside a step method or a training loop",
        "log the tensor with self.log(...) or print it only every N steps (`if step % N == 0:`)",
        _print_tensor,
        (r"print\s*\(", _HOT_TRIGGER),
    ),
    Rule(
        "LS203",
        "T20",
        "create-then-move",
        "a tensor factory (torch.zeros/ones/rand/arange/..., legacy torch.LongTensor(n), torch.tensor(<a number>)) "
        "followed by .cuda() / "
        ".to(device), or a CUDA class (an alias of torch.cuda.FloatTensor) given a numpy array made from sizes "
        "(np.ones, np.random.normal), on a line that runs per batch (info where it runs per epoch, or where how often is unknown in code "
        "a training step reaches; not reported in code nothing linted calls)",
        "create it on the device: torch.zeros(..., device=device) (or x.new_zeros(...) / torch.zeros_like(x))",
        _create_then_move_all,
        (_ls203_trigger,),
    ),
    Rule(
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
        (_HOT_TRIGGER,),
    ),
    Rule(
        "LS205",
        "T08",
        "synchronize-in-step",
        "an explicit torch.cuda.synchronize() (torch.accelerator / mps / xpu, a stream's synchronize()) on a line "
        "that runs per step, outside benchmark/profiling/debugging code",
        "remove it; to time steps, synchronize only every N steps or time with torch.cuda.Event(enable_timing=True); "
        "keep it where host code then reads device memory written outside PyTorch's streams",
        _synchronize_in_step,
        ("synchronize",),
    ),
    Rule(
        "LS207",
        "T08",
        "empty-cache-in-step",
        "torch.cuda.empty_cache() (mps / xpu / accelerator) on a line that runs per step, outside an except "
        "block and benchmark/profiling/debugging code",
        "remove it: the caching allocator reuses those blocks on the next step; against fragmentation set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and empty the cache at most once, after evaluation",
        _empty_cache_in_step,
        ("empty_cache",),
    ),
    Rule(
        "LS208",
        "T08",
        "sync-dist-per-step",
        "self.log(..., sync_dist=True) logged every step (in training_step, where on_step=True is the default): "
        "an all-reduce every step under DDP / FSDP",
        "log the per-step value without sync_dist (each rank's own; rank 0's reaches the logger), or log it with "
        "on_step=False, on_epoch=True so it is reduced once per epoch",
        _sync_dist_per_step,
        ("sync_dist",),
    ),
    Rule(
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
    ),
]
