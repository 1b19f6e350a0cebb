"""What the rules know about one file: imports, scopes, bindings, and a few cautious classifiers.

Everything here is plain :mod:`ast` (no torch import, no execution). The classifiers answer "is this
expression *visibly* a numpy array / a tensor / a device?" and return ``False`` whenever they cannot
tell: a lint rule built on them reports nothing rather than guess.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePath
from typing import Iterator, Optional, Union

DEF_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
SCOPE_TYPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMP_TYPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)

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
    "rand": 0, "randn": 0, "random": 0, "random_sample": 0, "sample": 0, "ranf": 0,
    "standard_normal": 0, "normal": 2, "uniform": 2, "randint": 2, "choice": 1, "binomial": 2,
    "poisson": 1, "exponential": 1, "beta": 2, "gamma": 2, "permutation": -1,
}
# Methods of an ndarray that return an ndarray.
NP_ARRAY_METHODS = frozenset(
    "astype reshape copy transpose squeeze flatten ravel swapaxes clip round view".split()
)

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
    return (
        isinstance(node, ast.Constant)
        and type(node.value) is type(value)  # noqa: E721 - True must not match 1
        and node.value == value
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
    except Exception:  # pragma: no cover - ast.unparse handles every parsed node
        return "..."
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class FileContext:
    """One parsed file and the facts rules share about it (computed once, lazily)."""

    def __init__(self, tree: ast.Module, path: Union[str, PurePath] = "<string>") -> None:
        self.tree = tree
        self.path = PurePath(path)
        self.parents: dict[ast.AST, ast.AST] = {}
        self.calls: list[ast.Call] = []
        self.assigns: list[ast.Assign] = []
        self.classes: list[ast.ClassDef] = []
        self.aliases: dict[str, str] = {}
        self._mentions_cuda = False
        self._ambiguous: set[str] = set()
        parents = self.parents
        stack: list[ast.AST] = [tree]
        while stack:  # one pass: parent links and the node lists the rules use
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                parents[child] = node
                stack.append(child)
            if isinstance(node, ast.Call):
                self.calls.append(node)
                if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
                    self._mentions_cuda = True
            elif isinstance(node, ast.Assign):
                self.assigns.append(node)
            elif isinstance(node, ast.ClassDef):
                self.classes.append(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _CUDA_STR.match(node.value):
                    self._mentions_cuda = True
            elif isinstance(node, ast.keyword) and node.arg == "accelerator":
                if isinstance(node.value, ast.Constant) and node.value.value in ("gpu", "cuda"):
                    self._mentions_cuda = True
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._alias(alias.asname, alias.name)
                    else:
                        top = alias.name.split(".")[0]
                        self._alias(top, top)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    if node.level or not node.module:  # relative import: a local name we cannot resolve
                        self._alias(alias.asname or alias.name, None)
                    else:
                        self._alias(alias.asname or alias.name, f"{node.module}.{alias.name}")
        for name in self._ambiguous:
            self.aliases.pop(name, None)
        self._bindings: dict[ast.AST, dict[str, list[Binding]]] = {}
        self._self_attrs: dict[ast.ClassDef, tuple[dict[str, list[ast.AST]], set[str]]] = {}
        self._training_loop: dict[ast.AST, bool] = {}

    # ------------------------------------------------------------------ names
    def imports_name(self, name: str) -> bool:
        """``name`` is bound by an import somewhere in the file (resolvable or not)."""
        return name in self.aliases or name in self._ambiguous

    def _alias(self, name: str, target: Optional[str]) -> None:
        """Record an import; a name imported as two different things is dropped (cannot tell)."""
        if target is None or self.aliases.get(name, target) != target:
            self._ambiguous.add(name)
        else:
            self.aliases[name] = target

    def qualname(self, node: Optional[ast.AST]) -> Optional[str]:
        """Dotted name of an imported object (``th.zeros`` -> ``torch.zeros``), else ``None``."""
        if isinstance(node, ast.Name):
            name = self.aliases.get(node.id)
        elif isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            name = f"{base}.{node.attr}" if base else None
        else:
            return None
        return _CANONICAL.get(name, name) if name else None

    def call_name(self, call: ast.Call) -> Optional[str]:
        return self.qualname(call.func)

    def is_trainer(self, call: ast.Call) -> bool:
        return self.call_name(call) == TRAINER

    # ------------------------------------------------------------------ tree navigation
    def parent(self, node: ast.AST) -> Optional[ast.AST]:
        return self.parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
        """Yield ``(ancestor, child_on_the_way)`` pairs from the innermost outwards."""
        child = node
        parent = self.parents.get(node)
        while parent is not None:
            yield parent, child
            child, parent = parent, self.parents.get(parent)

    def scope_of(self, node: ast.AST) -> ast.AST:
        for anc, _ in self.ancestors(node):
            if isinstance(anc, SCOPE_TYPES):
                return anc
        return self.tree

    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]:
        for anc, _ in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return anc
        return None

    # ------------------------------------------------------------------ bindings
    def bindings(self, scope: ast.AST) -> dict[str, list[Binding]]:
        """Every binding of a local name directly in ``scope`` (nested scopes excluded)."""
        cached = self._bindings.get(scope)
        if cached is not None:
            return cached
        out: dict[str, list[Binding]] = {}

        def add(name: str, binding: Binding) -> None:
            out.setdefault(name, []).append(binding)

        def bind(target: ast.AST, kind: str, value: Optional[ast.AST], line: int) -> None:
            if isinstance(target, ast.Name):
                add(target.id, Binding(line, kind, value))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for elt in target.elts:
                    bind(elt, "unpack" if kind == "value" else kind, value, line)
            elif isinstance(target, ast.Starred):
                bind(target.value, "other", None, line)

        body: list[ast.AST]
        if isinstance(scope, FUNC_TYPES):
            args = scope.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            params += [a for a in (args.vararg, args.kwarg) if a is not None]
            for arg in params:
                # parameters are bound before any use in the body: line 0
                kind = "param" if arg not in (args.vararg, args.kwarg) else "other"
                add(arg.arg, Binding(0, kind, arg.annotation))
            body = [scope.body] if isinstance(scope, ast.Lambda) else list(scope.body)
        else:
            body = list(scope.body)  # Module / ClassDef

        stack = body[::-1]
        while stack:
            node = stack.pop()
            if isinstance(node, (*DEF_TYPES, ast.ClassDef)):
                add(node.name, Binding(node.lineno, "other", None))
                continue
            if isinstance(node, (ast.Lambda, *COMP_TYPES)):
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, "value", node.value, node.lineno)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                bind(node.target, "value", node.value, node.lineno)
            elif isinstance(node, ast.AugAssign):
                bind(node.target, "other", None, node.lineno)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target, "value", node.value, node.lineno)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target, "other", None, node.lineno)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bind(node.optional_vars, "other", None, node.optional_vars.lineno)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                add(node.name, Binding(node.lineno, "other", None))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    add((alias.asname or alias.name).split(".")[0], Binding(node.lineno, "other", None))
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    add(name, Binding(0, "other", None))
            elif isinstance(node, ast.Delete):
                for target in node.targets:
                    bind(target, "other", None, node.lineno)
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
        self._bindings[scope] = out
        return out

    def bindings_before(self, name: ast.Name) -> Optional[list[Binding]]:
        """The bindings of ``name`` in its own scope that come before its use; ``None`` if unknown."""
        for anc, _ in self.ancestors(name):
            if isinstance(anc, COMP_TYPES):
                for gen in anc.generators:
                    if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(gen.target)):
                        return None
            if isinstance(anc, SCOPE_TYPES):
                break
        scope = self.scope_of(name)
        prior = [b for b in self.bindings(scope).get(name.id, ()) if b.line < name.lineno]
        return prior or None

    def self_attrs(self, cls: ast.ClassDef) -> tuple[dict[str, list[ast.AST]], set[str]]:
        """``({attr: [values assigned to self.attr]}, {method names})`` of a class."""
        cached = self._self_attrs.get(cls)
        if cached is not None:
            return cached
        attrs: dict[str, list[ast.AST]] = {}
        methods = {n.name for n in cls.body if isinstance(n, DEF_TYPES)}
        for method in cls.body:
            if not isinstance(method, DEF_TYPES):
                continue
            for node in ast.walk(method):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            attrs.setdefault(target.attr, []).append(node.value)
        self._self_attrs[cls] = (attrs, methods)
        return attrs, methods

    # ------------------------------------------------------------------ classifiers
    def is_numpy_annotation(self, ann: Optional[ast.AST]) -> bool:
        if isinstance(ann, ast.Subscript):
            ann = ann.value
        return self.qualname(ann) in ("numpy.ndarray", "numpy.typing.NDArray")

    def is_numpy(self, node: ast.AST, depth: int = 0) -> bool:
        """``node`` is visibly a numpy array (never guesses)."""
        if depth > 5:
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = self.qualname(func)
            if name is not None:
                if name.startswith("numpy.random."):
                    fn = name.rsplit(".", 1)[1]
                    pos = _NP_RANDOM_SIZE_POS.get(fn)
                    if pos is None:
                        return False
                    if pos < 0 or keyword(node, "size") is not None:
                        return True
                    return len(node.args) > pos
                return name.startswith("numpy.") and name.rsplit(".", 1)[1] in NP_ARRAY_FUNCS
            if isinstance(func, ast.Attribute):
                if func.attr == "numpy" and not node.args:
                    return True
                if func.attr == "to_numpy":
                    return True
                if func.attr in NP_ARRAY_METHODS:
                    return self.is_numpy(func.value, depth + 1)
            return False
        if isinstance(node, ast.Subscript):
            has_slice = any(isinstance(n, ast.Slice) for n in ast.walk(node.slice))
            return has_slice and self.is_numpy(node.value, depth + 1)
        if isinstance(node, ast.Attribute):
            return node.attr == "T" and self.is_numpy(node.value, depth + 1)
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            left, right = node.left, node.right

            def numeric(n: ast.AST) -> bool:
                return isinstance(n, ast.Constant) and isinstance(n.value, (int, float))

            return (self.is_numpy(left, depth + 1) and (numeric(right) or self.is_numpy(right, depth + 1))) or (
                numeric(left) and self.is_numpy(right, depth + 1)
            )
        if isinstance(node, ast.Name):
            prior = self.bindings_before(node)
            if not prior:
                return False
            for b in prior:
                if b.kind == "value" and b.value is not None and self.is_numpy(b.value, depth + 1):
                    continue
                if b.kind == "param" and self.is_numpy_annotation(b.value):
                    continue
                return False
            return True
        return False

    def is_tensor_annotation(self, ann: Optional[ast.AST]) -> bool:
        return self.qualname(ann) == "torch.Tensor"

    def is_tensor(self, node: ast.AST, depth: int = 0) -> bool:
        """``node`` is visibly a torch tensor (a torch op result, a submodule output, ...)."""
        if depth > 5:
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = self.qualname(func)
            if name is not None:
                parts = name.split(".")
                if parts[0] != "torch":
                    return False
                if name.startswith(("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")):
                    return parts[-1][:1].islower()
                return len(parts) == 2 and parts[1][:1].islower() and parts[1] not in _TORCH_NON_TENSOR
            if isinstance(func, ast.Name):
                # self(x): the module's forward; criterion(out, y) with criterion = nn.CrossEntropyLoss()
                return func.id == "self" or self.is_module_instance(func)
            if isinstance(func, ast.Attribute):
                if func.attr in NON_TENSOR_METHODS:
                    return False
                if isinstance(func.value, ast.Name) and func.value.id == "self":
                    return func.attr == "forward" or self.is_submodule(func)
                if func.attr in TENSOR_ONLY_METHODS:
                    return True
                return self.is_tensor(func.value, depth + 1)
            return False
        if isinstance(node, ast.Attribute):
            return node.attr in _TENSOR_ATTRS and self.is_tensor(node.value, depth + 1)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value, depth + 1)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr)):
                return False  # "%s" % x is a string
            return self.is_tensor(node.left, depth + 1) or self.is_tensor(node.right, depth + 1)
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            return self.is_tensor(node.operand, depth + 1)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body, depth + 1) and self.is_tensor(node.orelse, depth + 1)
        if isinstance(node, ast.Name):
            prior = self.bindings_before(node)
            if not prior:
                return False
            for b in prior:
                if b.kind in ("value", "unpack") and b.value is not None and self.is_tensor(b.value, depth + 1):
                    continue
                if b.kind == "param" and self.is_tensor_annotation(b.value):
                    continue
                return False
            return True
        return False

    @cached_property
    def module_classes(self) -> frozenset[str]:
        """Names of the classes defined in this file that subclass an ``nn.Module`` / ``LightningModule``."""
        out: set[str] = set()
        changed = True
        while changed:  # until subclasses of subclasses are found, in any order
            changed = False
            for cls in self.classes:
                if cls.name in out:
                    continue
                for base in cls.bases:
                    name = self.qualname(base) or ""
                    if (
                        name.split(".")[0] in ("torch", "lightning", "pytorch_lightning") and name.endswith("Module")
                    ) or (isinstance(base, ast.Name) and base.id in out):
                        out.add(cls.name)
                        changed = True
                        break
        return frozenset(out)

    def is_module_instance(self, name: ast.Name) -> bool:
        """``name`` is visibly an ``nn.Module`` instance: every binding is ``nn.Linear(...)``,
        ``Net()`` of a module class defined here, possibly followed by ``.to(...)`` / ``.cuda()``."""
        prior = self.bindings_before(name)
        if prior is None:
            local = self.bindings(self.scope_of(name)).get(name.id)
            if local:
                return False  # bound later in this scope: cannot tell
            prior = self.bindings(self.tree).get(name.id)
        if not prior:
            return False
        for b in prior:
            value = b.value
            if b.kind != "value" or value is None:
                return False
            while (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16")
            ):
                value = value.func.value
            if not isinstance(value, ast.Call):
                return False
            callee = self.qualname(value.func)
            if callee is not None:
                last = callee.rsplit(".", 1)[1]
                if not (
                    callee.startswith("torch.nn.")
                    and last[:1].isupper()
                    and last not in _NOT_MODULES
                ):
                    return False
            elif not (isinstance(value.func, ast.Name) and value.func.id in self.module_classes):
                return False
        return True

    def is_submodule(self, attr: ast.Attribute) -> bool:
        """``self.<attr>`` is assigned in the enclosing class and is not one of its methods."""
        cls = self.enclosing_class(attr)
        if cls is None:
            return False
        attrs, methods = self.self_attrs(cls)
        return attr.attr in attrs and attr.attr not in methods

    def formats_tensor(self, node: ast.AST) -> bool:
        """Printing ``node`` converts a tensor to text (``x``, ``f"{x}"``, ``"%s" % x``, ``"{}".format(x)``)."""
        if isinstance(node, ast.JoinedStr):
            return any(
                isinstance(v, ast.FormattedValue) and self.is_tensor(v.value) for v in node.values
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr)):
            right = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return any(self.is_tensor(r) for r in right)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant)
        ):
            return any(self.is_tensor(a) for a in [*node.args, *(k.value for k in node.keywords)])
        return self.is_tensor(node)

    def is_device(self, node: ast.AST) -> bool:
        """``node`` is visibly a device (``"cuda"``, ``torch.device(...)``, ``x.device``, ``device``, ``0``)."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return bool(_DEVICE_STR.match(node.value))
            return type(node.value) is int
        if isinstance(node, ast.Call):
            return self.qualname(node.func) == "torch.device"
        if isinstance(node, ast.Attribute):
            return node.attr == "device" or node.attr.lower() in _DEVICE_NAMES
        if isinstance(node, ast.Name):
            return node.id.lower() in _DEVICE_NAMES
        return False

    def is_device_move(self, call: ast.Call) -> bool:
        """``call`` is ``.cuda(...)`` or ``.to(<device>, ...)`` / ``.to(device=...)``."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return False
        if func.attr == "cuda":
            return True
        if func.attr != "to":
            return False
        if keyword(call, "device") is not None:
            return True
        return bool(call.args) and self.is_device(call.args[0])

    # ------------------------------------------------------------------ file-level facts
    @property
    def mentions_cuda(self) -> bool:
        """The file moves data to CUDA: a ``.cuda()`` call, a ``"cuda"`` string, ``accelerator="gpu"``."""
        return self._mentions_cuda

    @cached_property
    def deterministic(self) -> bool:
        """The file asks for deterministic cuDNN / algorithms (which needs ``cudnn.benchmark = False``)."""
        for node in self.assigns:
            if is_const(node.value, True) and any(
                self.qualname(t) == "torch.backends.cudnn.deterministic" for t in node.targets
            ):
                return True
        for call in self.calls:
            name = self.call_name(call)
            if name == "torch.use_deterministic_algorithms":
                if call.args and is_const(call.args[0], True):
                    return True
                kw = keyword(call, "mode")
                if kw is not None and is_const(kw.value, True):
                    return True
            elif name == TRAINER:
                kw = keyword(call, "deterministic")
                if kw is not None and (is_const(kw.value, True) or is_const(kw.value, "warn")):
                    return True
        return False

    # ------------------------------------------------------------------ where code runs
    def is_training_loop(self, loop: ast.AST) -> bool:
        """``loop`` itself (not a loop nested in it) calls ``.backward()`` or ``optimizer.step()``."""
        cached = self._training_loop.get(loop)
        if cached is not None:
            return cached
        found = False
        stack = list(loop.body)  # type: ignore[attr-defined]
        while stack and not found:
            node = stack.pop()
            if isinstance(node, (*FUNC_TYPES, ast.ClassDef, *LOOP_TYPES)):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr = node.func.attr
                if attr in ("backward", "manual_backward"):
                    found = True
                elif attr == "step":
                    owner = terminal_name(node.func.value).lower()
                    found = "opt" in owner or "scaler" in owner
            stack.extend(ast.iter_child_nodes(node))
        self._training_loop[loop] = found
        return found

    def hot_context(self, node: ast.AST, step_methods: frozenset[str]) -> Optional[str]:
        """Where ``node`` runs once per training step: ``"training_step"``, ``"a training loop (line 12)"``.

        ``None`` outside step methods and training loops, and under ``if <...> % N ...:`` (code that
        runs every N steps on purpose).
        """
        for anc, child in self.ancestors(node):
            if isinstance(anc, ast.If) and any(child is s for s in anc.body):
                if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(anc.test)):
                    return None
            if isinstance(anc, LOOP_TYPES) and any(child is s for s in anc.body):
                if self.is_training_loop(anc):
                    return f"a training loop (line {anc.lineno})"
            if isinstance(anc, DEF_TYPES) and anc.name in step_methods:
                if isinstance(self.parents.get(anc), ast.ClassDef):
                    return anc.name
            if isinstance(anc, ast.ClassDef):
                return None
        return None

    def is_exempt(self, node: ast.AST, words: tuple[str, ...], flag_words: tuple[str, ...] = ()) -> bool:
        """``node`` is in code meant for debugging/profiling.

        True in test files (``test_*.py``, ``*_test.py``, ``conftest.py``, a ``tests``/``test``
        directory), in files or directories whose name contains one of ``words``, inside a function
        or class whose name contains one (or a function named ``test*``), and in the body (not the
        ``else``) of an ``if`` whose condition mentions one of ``words`` or ``flag_words``
        (``if args.debug:``, ``if cfg.detect_anomaly:``).
        """
        cond_words = words + flag_words
        parts = [p.lower() for p in self.path.parts]
        if parts:
            name = parts[-1]
            if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
                return True
            if any(p in ("tests", "test") for p in parts[:-1]):
                return True
            if any(w in p for p in parts for w in words):
                return True
        for anc, child in self.ancestors(node):
            if isinstance(anc, (*DEF_TYPES, ast.ClassDef)):
                lowered = anc.name.lower()
                if any(w in lowered for w in words) or (
                    isinstance(anc, DEF_TYPES) and lowered.startswith("test")
                ):
                    return True
            elif isinstance(anc, ast.If) and any(child is s for s in anc.body):
                for n in ast.walk(anc.test):
                    text = ""
                    if isinstance(n, ast.Name):
                        text = n.id
                    elif isinstance(n, ast.Attribute):
                        text = n.attr
                    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                        text = n.value
                    if any(w in text.lower() for w in cond_words):
                        return True
        return False
