"""The host reads (``.item()``, ``.cpu()``, ``bool(t)``, a tensor in a condition, a GradScaler's ``get_scale()``)
on the lines of a file that run per training step, worked out once per file: LS201 reports those the file's
own step makes hot, LS206 those a step in another file reaches."""

from __future__ import annotations

import ast
from typing import Optional

from lightning_speedups.lint.astutil import DEF_TYPES, is_const, snippet, terminal_name
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.device_common import SYNC_METHODS, host_tensor, is_synchronize
from lightning_speedups.lint.runs import Runs, is_step_call

#: Builtins that read a tensor's value on the host: ``bool(t)``, ``float(t)``, ``int(t)``.
_SYNC_BUILTINS = frozenset({"bool", "float", "int"})


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
        elif ctx.classify.is_tensor(node):
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


#: Receivers whose calls need host data: an environment's step, a numpy replay buffer.
_HOST_CONSUMERS = ("env", "buffer", "replay", "mem", "rb")

_HOST_METHODS = frozenset(
    {"step", "add", "push", "append", "insert", "store", "extend", "update_priorities", "update_priority"}
)


def _after_synchronize(ctx: FileContext, call: ast.Call) -> bool:
    """An explicit ``torch.cuda.synchronize()`` comes earlier in the same function: the device is idle
    already, so reading a value costs a copy, not a wait (LS205 reports the synchronize itself)."""
    fn: Optional[ast.AST] = ctx.enclosing_function(call)
    if fn is None:  # a script's module-level loop: the synchronize must be in the same loop
        fn = next((anc for anc, _ in ctx.ancestors(call) if isinstance(anc, (ast.For, ast.AsyncFor, ast.While))), None)
        if fn is None:
            return False
    memo: dict[ast.AST, list[int]] = ctx.memo("sync_lines", dict)
    lines = memo.get(fn)
    if lines is None:
        lines = memo[fn] = [n.lineno for n in ctx.calls_within(fn) if is_synchronize(ctx, n)]
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
    memo: dict[ast.AST, list[ast.Call]] = ctx.memo("consumers", dict)
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
                            }
                            if names & used:
                                return True
            return False
    return False


def _drop_repeated_reads(ctx: FileContext, found: dict[ast.AST, tuple[str, Runs]]) -> None:
    """A second read of the same value (``epoch_loss += loss.item()`` then ``log({"loss": loss.item()})``)
    waits for nothing new when nothing between the two reads queues device work (no step, no tensor op) and
    the value is not rebound: it copies a few bytes again. Only the first read is reported."""
    groups: dict[tuple[Optional[ast.AST], str], list[ast.Call]] = {}
    for node in found:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SYNC_METHODS:
            groups.setdefault((ctx.enclosing_function(node), snippet(node, 200)), []).append(node)
    for (scope, _), reads in groups.items():
        if len(reads) < 2:
            continue
        reads.sort(key=lambda c: (c.lineno, c.col_offset))
        first = reads[0]
        # the receiver's names: first.func is `<receiver>.<sync method>` (grouped above only so), whose
        # method name is no ast.Name
        roots = {n.id for n in ast.walk(first.func) if isinstance(n, ast.Name)}
        bindings = ctx.scopes.bindings(scope if scope is not None else ctx.tree)
        for later in reads[1:]:
            lo, hi = first.lineno, later.lineno
            rebound = any(lo <= b.line <= hi for name in roots for b in bindings.get(name, ()))
            if not _guards(ctx, first) <= _guards(ctx, later):
                first = later  # the first read runs only on some path (`if verbose:`): the later one may wait
                continue
            own = {id(n) for read in (first, later) for n in ast.walk(read)}
            between = [c for c in _calls_between(ctx, lo, hi) if id(c) not in own and c not in reads]
            busy = any(is_step_call(c) or ctx.classify.is_tensor(c) for c in between)
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


def host_reads_per_step(ctx: FileContext) -> list[tuple[ast.AST, str, Runs]]:
    """Every host read on a per-step line of the file: ``(node, message, runs)`` (LS201 and LS206)."""
    return ctx.memo("syncs", lambda: _find_syncs(ctx))


def _find_syncs(ctx: FileContext) -> list[tuple[ast.AST, str, Runs]]:
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
            r = ctx.where.hot_runs(call)
            if r is not None and not _for_rpc(ctx, call) and not _for_host_consumer(ctx, call):
                if not _after_synchronize(ctx, call) and not host_tensor(ctx, receiver, call):
                    found[call] = (f"`.{func.attr}()` in {r.where} copies to the host and waits for the GPU", r)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ("get_scale", "state_dict")
            and not call.args
            and "scaler" in terminal_name(func.value).lower()
        ):
            # GradScaler.get_scale() (and the state_dict() that holds it) is the scale's .item()
            r = ctx.where.hot_runs(call)
            if r is not None and not _after_synchronize(ctx, call):
                found[call] = (
                    f"`{snippet(call, 40)}` in {r.where} reads the loss scale on the host (GradScaler's .item())",
                    r,
                )
        elif isinstance(func, ast.Name) and func.id in builtins_ok and len(call.args) == 1 and not call.keywords:
            r = ctx.where.hot_runs(call)
            if r is not None and ctx.classify.is_tensor(call.args[0]) and not _after_synchronize(ctx, call):
                found[call] = (
                    f"`{func.id}({snippet(call.args[0], 30)})` in {r.where} reads a tensor on the host (a device sync)",
                    r,
                )
    for branch in ctx.branches:
        test = branch.test
        r = ctx.where.hot_runs(test)
        if r is None:
            continue
        operands = _condition_tensors(ctx, test)
        if not operands or _latched(branch, test):
            continue
        kind = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(branch)]
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
    return _merge_runs_of_reads(ctx, out)


def _merge_runs_of_reads(ctx: FileContext, reads: list[tuple[ast.AST, str, Runs]]) -> list[tuple[ast.AST, str, Runs]]:
    """Host reads in a row (``m["q1"] = q1.mean().item()`` then ``m["q2"] = q2.mean().item()``) with no
    step or tensor work queued between them wait for the same work: removing one alone gains nothing,
    so they are one finding, on the first, naming the others to fix with it."""
    groups: dict[tuple[Optional[ast.AST], str, str], list[tuple[ast.AST, str, Runs]]] = {}
    for item in reads:
        groups.setdefault((ctx.enclosing_function(item[0]), item[2].how, item[2].where), []).append(item)
    out: list[tuple[ast.AST, str, Runs]] = []
    for items in groups.values():
        items.sort(key=lambda x: (getattr(x[0], "lineno", 0), getattr(x[0], "col_offset", 0)))
        own = {id(n) for node, _, _ in items for n in ast.walk(node)}
        runs: list[list[tuple[ast.AST, str, Runs]]] = []
        for item in items:
            if runs and _same_work(ctx, runs[-1][0][0], runs[-1][-1][0], item[0], own):
                runs[-1].append(item)
            else:
                runs.append([item])
        for run in runs:
            node, message, r = run[0]
            out.append((node, message, r))
            if len(run) > 1:
                _read_runs(ctx)[node] = [x[0] for x in run[1:]]
    return out


def _read_runs(ctx: FileContext) -> dict[ast.AST, list[ast.AST]]:
    """The host reads after a run's first one that wait for the same work, by the first (filled by the merge)."""
    return ctx.memo("read_runs", dict)


def with_run(ctx: FileContext, node: ast.AST, message: str) -> str:
    """``message``, naming the host reads right after ``node`` that wait for the same work."""
    rest = _read_runs(ctx).get(node)
    if not rest:
        return message
    lines = sorted({getattr(x, "lineno", 0) for x in rest})
    where = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]}-{lines[-1]}"
    n = len(rest)
    return (
        f"{message}; {n} more host read{'s' if n > 1 else ''} right after it ({where}) wait{'' if n > 1 else 's'}"
        " for the same work: keep all of them on the device (removing one alone gains nothing)"
    )


def _same_work(ctx: FileContext, head: ast.AST, prev: ast.AST, node: ast.AST, own: set[int]) -> bool:
    """``node`` reads right after ``prev`` (same guards as the run's ``head``, nothing queued between)."""
    if not _guards(ctx, head) <= _guards(ctx, node):
        return False
    lo, hi = getattr(prev, "lineno", 0), getattr(node, "lineno", 0)
    if hi - lo > 8:
        return False
    inside = [c for c in ast.walk(node) if isinstance(c, ast.Call) and c is not node]
    if any(is_step_call(c) or _runs_a_model(c) for c in inside):
        return False  # `int(self(x).argmax())`: the read waits for work of its own
    between = [c for c in _calls_between(ctx, lo, hi) if id(c) not in own]
    return not any(is_step_call(c) or ctx.classify.is_tensor(c) or _runs_a_model(c) for c in between)


#: Words of a call that runs a model or a loss: device work queued between two reads.
_MODEL_WORDS = ("model", "net", "head", "encoder", "decoder", "forward", "backward", "criterion", "module")


def _runs_a_model(call: ast.Call) -> bool:
    text = snippet(call.func, 80).lower()
    return text == "self" or any(w in text for w in _MODEL_WORDS)
