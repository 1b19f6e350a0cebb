"""Small ast helpers and the name tables the lint rules share (no torch import)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional, TypeGuard, Union

DEF_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
SCOPE_TYPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMP_TYPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)

# Fields of an ast node that hold no child node the rules need: strings, ints, the Load/Store
# context and the operator singletons (ast.Add() is one shared object: a parent link means nothing).
_LEAF_FIELDS = frozenset(
    {
        "ctx",
        "op",
        "ops",
        "id",
        "attr",
        "arg",
        "module",
        "level",
        "kind",
        "conversion",
        "is_async",
        "type_comment",
        "name",
        "n",
        "s",
    }
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type[ast.AST]) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = _CHILD_FIELDS[cls] = tuple(
            f for f in cls._fields if f not in _LEAF_FIELDS and not (cls is ast.Constant and f == "value")
        )
    return fields


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """The child nodes of ``node`` in field order, as :func:`ast.iter_child_nodes` gives them, less
    the expression contexts, the operator singletons and what leaf fields hold (a third of the cost)."""
    out: list[ast.AST] = []
    cls = type(node)
    for name in _CHILD_FIELDS.get(cls) or _child_fields(cls):
        value = getattr(node, name, None)
        if value is None:
            continue
        if type(value) is list:
            out.extend(item for item in value if isinstance(item, ast.AST))
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


TRAINER = "lightning.pytorch.Trainer"
DATALOADER = "torch.utils.data.DataLoader"

# Different spellings of the same object, mapped to one name the rules compare against.
_CANONICAL = {
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.data_parallel": "torch.nn.parallel.data_parallel",
    "torch.utils.data.dataloader.DataLoader": DATALOADER,
    "torch.autograd.anomaly_mode.set_detect_anomaly": "torch.autograd.set_detect_anomaly",
    "torch.autograd.anomaly_mode.detect_anomaly": "torch.autograd.detect_anomaly",
    "torch.autograd.profiler.emit_nvtx": "torch.autograd.profiler.emit_nvtx",
    "torch.autograd.profiler_legacy.profile": "torch.autograd.profiler.profile",
    "lightning.Trainer": TRAINER,
    "lightning.pytorch.trainer.Trainer": TRAINER,
    "lightning.pytorch.trainer.trainer.Trainer": TRAINER,
    "pytorch_lightning.Trainer": TRAINER,
    "pytorch_lightning.trainer.Trainer": TRAINER,
    "pytorch_lightning.trainer.trainer.Trainer": TRAINER,
}

# numpy functions whose result is always an array (reductions such as np.sum may give a scalar).
NP_ARRAY_FUNCS = frozenset(
    "array asarray asanyarray ascontiguousarray asfortranarray copy zeros ones empty full zeros_like "
    "ones_like empty_like full_like arange linspace logspace geomspace eye identity stack vstack "
    "hstack dstack column_stack concatenate concat load loadtxt genfromtxt fromfile frombuffer "
    "fromiter fromstring reshape transpose expand_dims squeeze tile repeat clip diag tril triu outer "
    "flip fliplr flipud roll pad sort argsort cumsum cumprod abs exp log sqrt".split()
)
# np.random.X: index of the positional argument that is `size` (a call with it, or `size=`, is an array).
_NP_RANDOM_SIZE_POS = {
    "rand": 0,
    "randn": 0,
    "random": 0,
    "random_sample": 0,
    "sample": 0,
    "ranf": 0,
    "standard_normal": 0,
    "normal": 2,
    "uniform": 2,
    "randint": 2,
    "choice": 1,
    "binomial": 2,
    "poisson": 1,
    "exponential": 1,
    "beta": 2,
    "gamma": 2,
    "permutation": -1,
}
# Methods of an ndarray that return an ndarray.
NP_ARRAY_METHODS = frozenset("astype reshape copy transpose squeeze flatten ravel swapaxes clip round view".split())

# Top-level torch functions that do not return a tensor.
_TORCH_NON_TENSOR = frozenset(
    "device dtype is_tensor is_storage is_floating_point is_complex is_nonzero numel is_grad_enabled "
    "get_default_dtype set_default_dtype manual_seed seed initial_seed no_grad enable_grad "
    "set_grad_enabled inference_mode compile save load typename get_num_threads set_num_threads "
    "use_deterministic_algorithms are_deterministic_algorithms_enabled set_printoptions result_type "
    "promote_types can_cast finfo iinfo set_float32_matmul_precision get_float32_matmul_precision "
    "is_autocast_enabled autocast vmap cond is_inference_mode_enabled".split()
)
# Tensor methods whose result is not a tensor, or is a host copy (flagged on their own by LS201).
NON_TENSOR_METHODS = frozenset(
    "item tolist numpy cpu size dim ndimension numel nelement element_size data_ptr stride "
    "is_contiguous is_floating_point get_device backward storage untyped_storage type format".split()
)
# Methods that exist on torch.Tensor and not on numpy arrays / Python objects: the result is a tensor.
TENSOR_ONLY_METHODS = frozenset(
    "detach clone cuda float half double long int short bfloat16 contiguous unsqueeze permute "
    "masked_fill softmax log_softmax sigmoid relu new_zeros new_ones new_empty new_full new_tensor "
    "requires_grad_ type_as view_as expand_as to".split()
)
# torch.nn names that are not modules whose call returns a tensor.
_NOT_MODULES = frozenset({"Parameter", "ParameterList", "ParameterDict", "ModuleList", "ModuleDict", "Module"})
# Attributes of a tensor that are tensors.
_TENSOR_ATTRS = frozenset({"grad", "data", "T", "mT", "H", "mH", "real", "imag"})

_DEVICE_STR = re.compile(r"^(cuda|mps|xpu|hpu|npu)(:\d+)?$")
_CUDA_STR = re.compile(r"^cuda(:\d+)?$")
_DEVICE_NAMES = frozenset({"device", "dev", "rank", "local_rank", "gpu", "gpu_id", "device_id"})


@dataclass(frozen=True)
class Binding:
    """One binding of a local name: ``kind`` is ``value`` (``x = value``), ``unpack`` (``x, y = value``),
    ``param`` (a parameter; ``value`` is its annotation) or ``other`` (loop target, with, import, ...)."""

    line: int
    kind: str
    value: Optional[ast.AST]


def is_const(node: Optional[ast.AST], value: object) -> bool:
    """``node`` is the literal ``value`` (``True`` does not match ``1``)."""
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value


def is_format_string(node: ast.AST) -> bool:
    """A string written in the code, or built from such strings: ``"%s"``, ``f"..."``,
    ``"%10s" * 2 + "%10.4g" * 5`` (yolov5's progress line)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return is_format_string(node.left) and is_format_string(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return (is_format_string(node.left) and not is_format_string(node.right)) or (
            is_format_string(node.right) and not is_format_string(node.left)
        )
    return False


def is_string_format(node: ast.AST) -> TypeGuard[Union[ast.JoinedStr, ast.BinOp, ast.Call]]:
    """``f"..."``, ``"..." % x`` or ``"...".format(x)``: a string expression that formats values."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Mod) and is_format_string(node.left)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    )


def terminal_name(node: ast.AST) -> str:
    """The last identifier of ``a.b.c`` / ``a.b()`` / ``a``: ``"c"`` / ``"b"`` / ``"a"``."""
    while isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def argument(call: ast.Call, name: str, position: int) -> tuple[str, Optional[ast.AST]]:
    """Find argument ``name`` (or positional ``position``) of ``call``.

    Returns ``("given", node)``, ``("missing", None)``, or ``("unknown", None)`` when ``*args`` /
    ``**kwargs`` could carry it.
    """
    kw = keyword(call, name)
    if kw is not None:
        return "given", kw.value
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    if position >= 0 and not starred and len(call.args) > position:
        return "given", call.args[position]
    if starred or any(kw.arg is None for kw in call.keywords):
        return "unknown", None
    return "missing", None


def snippet(node: ast.AST, limit: int = 40) -> str:
    """Short source text of ``node`` for messages."""
    try:
        text = ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):  # pragma: no cover - unparse handles parsed nodes
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mentions_step(source: str) -> bool:
    """The text shows a training step: a step method, a backward, an optimizer / scaler step, or a
    Lightning hook that runs every training step."""
    if "backward(" in source or "training_step" in source or "validation_step" in source or "scaler(" in source:
        return True
    if "on_train_batch_" in source or "on_before_optimizer_step" in source or "on_before_zero_grad" in source:
        return True  # a Lightning hook run every training step (on_before_backward: "backward(" above)
    i = source.find(".step(")
    while i != -1:
        owner = source[max(0, i - 40) : i].lower()
        if "opt" in owner or "scaler" in owner:
            return True
        i = source.find(".step(", i + 1)
    return False
