"""LS2xx: device synchronisations and where tensors are created (tips T08, T20)."""

from __future__ import annotations

import ast
from typing import Iterator

from lightning_speedups.lint.context import FileContext, snippet
from lightning_speedups.lint.rules.base import Hit, Rule

#: Methods whose body runs once per batch, when defined in a class.
STEP_METHODS = frozenset({"training_step", "validation_step"})
SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})

TENSOR_FACTORIES = frozenset(
    "zeros ones empty full rand randn randint randperm arange linspace logspace eye tensor "
    "zeros_like ones_like empty_like full_like rand_like randn_like randint_like empty_strided "
    "normal bernoulli".split()
)
# Conversions that keep a just-created tensor "just created" for LS203.
_DTYPE_METHODS = frozenset("float half double long int short bool bfloat16 byte char contiguous".split())


def _sync_calls(ctx: FileContext) -> Iterator[Hit]:
    found: dict[ast.Call, str] = {}
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in SYNC_METHODS or call.args:
            continue
        receiver = func.value
        if isinstance(receiver, ast.Name) and receiver.id == "self":
            continue  # self.cpu(): moving the module, not reading a tensor
        if ctx.qualname(receiver) is not None:
            continue  # an imported module's function (e.g. np.item is not a tensor method)
        where = ctx.hot_context(call, STEP_METHODS)
        if where is not None:
            found[call] = where
    # x.detach().cpu().numpy(): one finding for the chain, on the outermost call
    inner: set[ast.Call] = set()
    for call in found:
        node = call.func.value  # type: ignore[attr-defined]
        while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Call):
                if node in found:
                    inner.add(node)
                node = node.func
            else:
                node = node.value
    for call, where in found.items():
        if call in inner:
            continue
        attr = call.func.attr  # type: ignore[attr-defined]
        yield call, f"`.{attr}()` in {where} copies to the host and waits for the GPU on every batch"


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
            yield call, f"print({snippet(shown[0], 30)}) in {where} formats a tensor: a device sync on every batch"


def _create_then_move(ctx: FileContext) -> Iterator[Hit]:
    for call in ctx.calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or not ctx.is_device_move(call):
            continue
        inner = func.value
        while (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and (inner.func.attr in _DTYPE_METHODS or (inner.func.attr == "to" and not ctx.is_device_move(inner)))
        ):
            inner = inner.func.value
        if not isinstance(inner, ast.Call):
            continue
        name = ctx.call_name(inner)
        if name is None or not name.startswith("torch.") or name.count(".") != 1:
            continue
        factory = name.split(".")[1]
        if factory in TENSOR_FACTORIES:
            yield call, (
                f"torch.{factory}(...) is created on the CPU and then copied by `.{func.attr}(...)`"
            )


RULES = [
    Rule(
        "LS201",
        "T08",
        "sync-in-step",
        "`.item()`, `.cpu()`, `.numpy()`, `.tolist()` inside training_step / validation_step or a training-loop body",
        "keep values on the device: log the tensor (self.log accepts tensors), accumulate with loss.detach(), "
        "read it on the host once per epoch or under `if step % N == 0`",
        _sync_calls,
    ),
    Rule(
        "LS202",
        "T08",
        "print-tensor-in-step",
        "print() of a tensor (also in an f-string or %-format) inside a step method or a training loop",
        "log the tensor with self.log(...) or print it only every N steps (`if step % N == 0:`)",
        _print_tensor,
    ),
    Rule(
        "LS203",
        "T20",
        "create-then-move",
        "a tensor factory (torch.zeros/ones/rand/arange/tensor/...) directly followed by .cuda() / .to(device)",
        "create it on the device: torch.zeros(..., device=device) (or x.new_zeros(...) / torch.zeros_like(x))",
        _create_then_move,
    ),
]
