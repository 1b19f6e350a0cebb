"""What the device rules (LS2xx) share: the host reads they look for, torch's tensor factories and
legacy constructors, explicit synchronizes, whether a tensor is visibly on the host, and the calls on a per-step
line outside benchmark / profiling / debugging code (LS205, LS207)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from lightning_speedups.lint.astutil import is_const, keyword, mentions_step, snippet
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import Hit
from lightning_speedups.lint.rules.loaders import loader_batch

#: Tensor methods that copy a value to the host (LS201 / LS206 report them, LS202 leaves a print of one to them).
SYNC_METHODS = frozenset({"item", "cpu", "numpy", "tolist"})


#: files a per-step rule looks at: a training step shows in the text (the graph's own test)
HOT_TRIGGER = mentions_step


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
RANDOM_INPLACE = frozenset("random_ uniform_ normal_ bernoulli_ exponential_ geometric_ cauchy_ log_normal_".split())
# Calls that keep a just-created tensor "just created, on the CPU" for LS203.
PASS_METHODS = (
    frozenset(
        "float half double long int short bool bfloat16 byte char contiguous view reshape unsqueeze squeeze "
        "expand repeat t permute transpose flatten fill_ zero_ scatter_ fill_diagonal_ masked_fill_ index_fill_ "
        "triu_ tril_ triu tril".split()
    )
    | RANDOM_INPLACE
)


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


def is_synchronize(ctx: FileContext, call: ast.Call) -> bool:
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


#: Calls that keep a tensor where it is (a host tensor stays on the host).
_KEEP_DEVICE = PASS_METHODS | frozenset({"detach", "clone", "numpy", "cpu", "squeeze_", "unsqueeze_", "type_as"})
#: Text that moves the default device (factories and data loaders may then make CUDA tensors).
_DEFAULT_DEVICE_WORDS = ("set_default_tensor_type", "set_default_device", "set_default_dtype_device")


def default_device_moved(ctx: FileContext) -> bool:
    """The run may make tensors on the GPU by default (``torch.set_default_tensor_type('torch.cuda...')``,
    ``torch.set_default_device``, ``with torch.device("cuda"):``), in this file or in a project file it
    imports or that imports it."""
    if _sets_gpu_default(ctx.source):
        return True
    project = ctx.project
    return bool(
        ctx.memo(
            "default_device",
            lambda: (
                project is not None and project.related_file_mentions(ctx, _DEFAULT_DEVICE_WORDS, _sets_gpu_default)
            ),
        )
    )


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


def host_tensor(ctx: FileContext, node: ast.AST, at: ast.Call, depth: int = 0) -> bool:
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
                ctx.classify.is_numpy(data)
                or isinstance(data, ast.Constant)
                or (isinstance(data, (ast.List, ast.Tuple)) and not any(ctx.classify.is_tensor(e) for e in data.elts))
                or (factory in LEGACY_CONSTRUCTORS and all(isinstance(a, (ast.Constant, ast.Name)) for a in node.args))
            )
            if not host:
                return False
        return not default_device_moved(ctx)
    if isinstance(node, ast.Name) and depth < 2:
        prior = ctx.scopes.bindings_before(node)
        if prior and all(b.kind == "value" and b.value is not None for b in prior):
            return all(b.value is not None and host_tensor(ctx, b.value, at, depth + 1) for b in prior)
        if prior and loader_batch(ctx, node, at):  # the loop's own binding, not rebound before the read
            return not default_device_moved(ctx)
    return False


def torch_alias(ctx: FileContext) -> str:
    for local, target in ctx.aliases.items():
        if target == "torch":
            return local
    return "torch"


#: Names of code meant for timing or debugging, where a per-step synchronize or empty_cache is on purpose.
TIMING_WORDS = ("bench", "profil", "debug")


def per_step_calls(ctx: FileContext, matches: Callable[[ast.Call], bool], says: str) -> Iterator[Hit]:
    """The calls ``matches`` picks on a line that runs once per training step (not every N steps, not in an
    ``except`` block: an out-of-memory retry), outside benchmark / profiling / debugging code."""
    for call in ctx.calls:
        if not matches(call):
            continue
        r = ctx.where.hot_runs(call)
        if r is None or ctx.purpose.is_exempt(call, TIMING_WORDS):
            continue
        yield Hit(call, f"{snippet(call.func, 40)}() in {r.where} {says}")
