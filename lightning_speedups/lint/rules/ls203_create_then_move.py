"""LS203 (tip T20), create-then-move: a tensor factory (torch.zeros/ones/rand/arange/..., legacy torch.LongTensor(n),
torch.tensor(<a number>)) followed by .cuda() / .to(device), or a CUDA class (an alias of torch.cuda.FloatTensor)
given a numpy array made from sizes (np.ones, np.random.normal), on a line that runs per batch (info where it runs
per epoch, or where how often is unknown in code a training step reaches; not reported in code nothing linted
calls)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Optional

from lightning_speedups.lint.astutil import is_const, keyword, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit, Rule, hit_at
from lightning_speedups.lint.rules.cuda_class import numpy_through_cuda_class
from lightning_speedups.lint.rules.device_common import (
    LEGACY_CONSTRUCTORS,
    LEGACY_DTYPES,
    PASS_METHODS,
    RANDOM_FACTORIES,
    RANDOM_INPLACE,
    TENSOR_FACTORIES,
    default_device_moved,
    host_tensor,
    torch_alias,
)
from lightning_speedups.lint.runs import UNKNOWN


def _moves_to_cuda_by_type(call: ast.Call) -> bool:
    """``.type("torch.cuda.FloatTensor")`` / ``.type(torch.cuda.FloatTensor)``: a move to the GPU."""
    return bool(call.args) and "cuda" in snippet(call.args[0], 200)


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


def _created_on_cpu(ctx: FileContext, receiver: ast.expr) -> Optional[tuple[str, bool, ast.Call, list[ast.Call]]]:
    """``(factory, random, factory call, calls between it and the move)`` when ``receiver`` (of a move,
    ``<receiver>.to(...)``) is a fresh CPU tensor from a torch factory."""
    random = False
    filled = False  # an in-place fill in the chain: the constructor's arguments are sizes
    chain: list[ast.Call] = []
    inner = receiver
    while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
        attr = inner.func.attr
        if attr == "pin_memory":
            return None  # staged in pinned memory on purpose: the copy can overlap
        if attr in PASS_METHODS:
            random = random or attr in RANDOM_INPLACE
            filled = filled or attr.endswith("_")
        elif attr == "to" and not ctx.classify.is_device_move(inner):
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
        if default_device_moved(ctx):
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
_REBIND_METHODS = PASS_METHODS | frozenset({"expand_as", "view_as", "reshape_as"})


def _bound_then_moved(ctx: FileContext, move: ast.Call, receiver: ast.expr) -> Optional[tuple[str, bool, ast.Call]]:
    """``(factory, random, factory call)`` when ``receiver`` (``move`` is ``<receiver>.to(...)``) is a name
    whose every earlier binding in its scope is a fresh CPU tensor from a torch factory (``alpha =
    torch.rand(b, 1, 1, 1)``) or that same name kept as it is (``alpha = alpha.expand_as(x)``), and the
    name is not used otherwise between the factory and the move (an element-wise fill on the host would
    be slower on the device)."""
    inner = receiver
    random = False
    while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in _REBIND_METHODS:
        random = random or inner.func.attr in RANDOM_INPLACE  # zc_idx.random_(n_c).cuda()
        inner = inner.func.value
    if not isinstance(inner, ast.Name):
        return None
    prior = ctx.scopes.bindings_before(inner)
    if not prior or any(b.kind != "value" or b.value is None for b in prior):
        return None
    made: Optional[tuple[str, bool, ast.Call]] = None
    first = None
    for b in prior:
        value = b.value
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            if value.func.attr not in _REBIND_METHODS:
                break
            random = random or value.func.attr in RANDOM_INPLACE
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
    if made is None or first is None or default_device_moved(ctx):
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


def _device_fix(
    ctx: FileContext, move: ast.Call, factory: str, inner: ast.Call, chain: list[ast.Call]
) -> Optional[str]:
    """The expression that creates the same tensor (same dtype, shape and values) on the device, or
    ``None`` where the move's target or dtype cannot be read off the code."""
    torch = torch_alias(ctx)
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
    return isinstance(target, ast.Attribute) and target.attr == "device" and host_tensor(ctx, target.value, move)


def _create_then_move(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        if not (ctx.classify.is_device_move(call) or (func.attr == "type" and _moves_to_cuda_by_type(call))):
            continue
        created = _created_on_cpu(ctx, func.value)
        if created is None:
            bound = _bound_then_moved(ctx, call, func.value)
            if bound is not None:
                yield from _bound_hit(ctx, call, *bound)
            continue
        factory, random, inner, chain = created
        if _to_host_tensors_device(ctx, call):
            continue
        runs = ctx.where.runs(call)
        if runs.how == UNKNOWN and not ctx.where.maybe_hot(call):
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


def _bound_hit(ctx: FileContext, move: ast.Call, factory: str, random: bool, made: ast.Call) -> Iterator[Hit]:
    runs = ctx.where.runs(move)
    if runs.how == UNKNOWN and not ctx.where.maybe_hot(move):
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
        yield from numpy_through_cuda_class(ctx)


def _ls203_trigger(source: str) -> bool:
    return _factory_then_move_trigger(source) or ("torch.cuda." in source and "Tensor" in source and "np" in source)


RULE = Rule(
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
)
