"""LS2xx: device synchronisations and where tensors are created (tips T08, T20)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.context import FileContext, keyword, snippet, terminal_name
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at
from lightning_speedups.lint.where import STEP_METHODS

SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})
#: Builtins that read a tensor's value on the host: ``bool(t)``, ``float(t)``, ``int(t)``.
_SYNC_BUILTINS = frozenset({"bool", "float", "int"})


def _HOT_TRIGGER(source: str) -> bool:
    """A training step shows in the text: a step method, a backward, or an optimizer / scaler step."""
    if "backward(" in source or "training_step" in source or "validation_step" in source:
        return True
    i = source.find(".step(")
    while i != -1:
        owner = source[max(0, i - 40) : i].lower()
        if "opt" in owner or "scaler" in owner:
            return True
        i = source.find(".step(", i + 1)
    return False


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


def _sync_calls(ctx: FileContext) -> Iterator[Hit]:
    found: dict[ast.AST, tuple[str, str]] = {}
    builtins_ok = {b for b in _SYNC_BUILTINS if not ctx.imports_name(b)}
    for call in ctx.calls:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in SYNC_METHODS and not call.args:
            receiver = func.value
            if isinstance(receiver, ast.Name) and receiver.id == "self":
                continue  # self.cpu(): moving the module, not reading a tensor
            if ctx.qualname(receiver) is not None:
                continue  # an imported module's function (e.g. np.item is not a tensor method)
            where = ctx.hot_context(call, STEP_METHODS)
            if where is not None and not _for_rpc(ctx, call):
                found[call] = (where, f"`.{func.attr}()` in {where} copies to the host and waits for the GPU")
        elif isinstance(func, ast.Name) and func.id in builtins_ok and len(call.args) == 1 and not call.keywords:
            where = ctx.hot_context(call, STEP_METHODS)
            if where is not None and ctx.is_tensor(call.args[0]):
                found[call] = (
                    where,
                    f"`{func.id}({snippet(call.args[0], 30)})` in {where} reads a tensor on the host (a device sync)",
                )
    for node in ctx.branches:
        test = node.test  # type: ignore[attr-defined]
        where = ctx.hot_context(test, STEP_METHODS)
        if where is None:
            continue
        operands = _condition_tensors(ctx, test)
        if not operands:
            continue
        kind = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(node)]
        shown = snippet(operands[0], 30)
        found[operands[0]] = (where, f"`{kind} {shown}` in {where} turns a tensor into a Python bool: a device sync")
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
    for node, (_, message) in found.items():
        if node not in inner:
            yield Hit(node, message + " on every batch")


def _print_tensor(ctx: FileContext) -> Iterator[Hit]:
    if ctx.imports_name("print"):
        return  # rich's print, or another one: not the builtin
    for call in ctx.calls:
        if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        shown = [a for a in call.args if ctx.formats_tensor(a)]
        if not shown:
            continue
        where = ctx.hot_context(call, STEP_METHODS)
        if where is not None:
            yield Hit(call, f"print({snippet(shown[0], 30)}) in {where} formats a tensor: a device sync on every batch")


def _moves_to_cuda_by_type(call: ast.Call) -> bool:
    """``.type("torch.cuda.FloatTensor")`` / ``.type(torch.cuda.FloatTensor)``: a move to the GPU."""
    return bool(call.args) and "cuda" in snippet(call.args[0], 200)


def _created_on_cpu(ctx: FileContext, move: ast.Call) -> Optional[tuple[str, bool]]:
    """``(factory, random)`` when ``move``'s receiver is a fresh CPU tensor from a torch factory."""
    random = False
    filled = False  # an in-place fill in the chain: the constructor's arguments are sizes
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
    if factory in LEGACY_CONSTRUCTORS:
        # torch.LongTensor(n).random_(8): sizes, then a fill. Without a fill the arguments may be
        # data (torch.Tensor(values)), which must cross to the device anyway: not a finding.
        return (factory, random) if filled and inner.args else None
    if factory in TENSOR_FACTORIES:
        return factory, random or factory in RANDOM_FACTORIES
    return None


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
        "_like",
        "empty_strided",
    )
)


def _factory_then_move_trigger(source: str) -> bool:
    """A ``.to(`` / ``.cuda(`` / ``.type(`` right after a ``)`` (across line breaks too), with a
    factory call in the 400 characters before it: what LS203 needs, checked without parsing."""
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
            i = source.find(move, i + 1)
    return False


def _create_then_move(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        if not (ctx.is_device_move(call) or (func.attr == "type" and _moves_to_cuda_by_type(call))):
            continue
        created = _created_on_cpu(ctx, call)
        if created is None:
            continue
        factory, random = created
        runs = ctx.runs(call)
        message = f"torch.{factory}(...) is created on the CPU and then copied by `.{func.attr}(...)`, {runs.how} (in {runs.where})"
        fix = None
        if random:
            message += (
                "; on the device the numbers come from the device's generator, so a seeded run draws other values"
            )
            fix = (
                f"create it on the device (torch.{factory}(..., device=device)) where another random stream is "
                "acceptable; keep it where the run must reproduce CPU-seeded numbers"
            )
        elif factory in LEGACY_CONSTRUCTORS:
            fix = "create it on the device: torch.empty(n, dtype=torch.long, device=device) (then the in-place fill runs there)"
        h = hit_at(call, message, runs, fix)
        if h is not None:
            yield h


RULES = [
    Rule(
        "LS201",
        "T08",
        "sync-in-step",
        "`.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `bool(t)`, `float(t)`, `int(t)` or a tensor in an `if`/`while` "
        "condition inside training_step / validation_step or a training-loop body",
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
        "a tensor factory (torch.zeros/ones/rand/arange/..., legacy torch.LongTensor(n)) followed by .cuda() / "
        ".to(device) on a line that runs per batch (info where it runs per epoch or where the file does not show)",
        "create it on the device: torch.zeros(..., device=device) (or x.new_zeros(...) / torch.zeros_like(x))",
        _create_then_move,
        (_factory_then_move_trigger,),
    ),
]
