"""Cautious classifiers: is an expression *visibly* a numpy array, a tensor, a module, a device?

Each answers ``False`` whenever it cannot tell, so a rule built on them reports nothing rather than
guess. Mixed into :class:`~lightning_speedups.lint.context.FileContext`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Optional, TypeVar

from lightning_speedups.lint.astutil import (
    _CUDA_STR,
    _DEVICE_NAMES,
    _DEVICE_STR,
    _NOT_MODULES,
    _NP_RANDOM_SIZE_POS,
    _TENSOR_ATTRS,
    _TORCH_NON_TENSOR,
    NON_TENSOR_METHODS,
    NP_ARRAY_FUNCS,
    NP_ARRAY_METHODS,
    TENSOR_ONLY_METHODS,
    TRAINER,
    is_const,
    is_format_string,
    is_string_format,
    keyword,
    terminal_name,
)

if TYPE_CHECKING:
    from lightning_speedups.lint.astutil import Binding

#: Lightning / Fabric entry points that pick the GPU themselves (``accelerator="auto"`` by default).
_AUTO_ACCELERATOR = frozenset({TRAINER, "lightning.fabric.Fabric", "lightning.Fabric", "lightning_fabric.Fabric"})
_GPU_ACCELERATORS = frozenset({"gpu", "cuda", "auto"})
#: In-place uses of ``p.grad`` that raise (or silently do nothing) once gradients are ``None``.
_GRAD_INPLACE = frozenset({"add_", "copy_", "sub_", "mul_", "div_", "addcmul_", "addcdiv_", "clamp_", "lerp_"})


#: Methods only an ``nn.Module`` has among what training code calls with no argument on a plain name.
_MODULE_ONLY_USES = frozenset({"train", "eval", "parameters", "named_parameters", "named_modules", "children"})
#: Wrappers whose result is a module.
_MODULE_WRAPPERS = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.DistributedDataParallel"}
)
#: ``accelerator.backward(loss)`` / ``self.manual_backward(loss)`` / ``fabric.backward(loss)``.
_BACKWARD_CALLS = frozenset({"backward", "manual_backward"})
#: Objects whose ``.backward(loss)`` takes the loss as its argument (Accelerate, Fabric, DeepSpeed, a trainer).
_BACKWARD_OWNERS = ("accelerator", "fabric", "engine", "trainer", "self", "model", "scaler", "strategy", "precision")


T = TypeVar("T")


class Classifiers:
    """The classifier methods of :class:`FileContext` (they use its names, bindings and node lists)."""

    if TYPE_CHECKING:  # provided by the host class, FileContext (declared here for the type checker only)
        tree: ast.Module
        source: str
        parents: dict[ast.AST, ast.AST]
        calls: list[ast.Call]
        assigns: list[ast.Assign]
        classes: list[ast.ClassDef]
        strings: list[str]

        def qualname(self, node: Optional[ast.AST]) -> Optional[str]: ...

        def memo(self, key: str, make: Callable[[], T]) -> T: ...
        def call_name(self, call: ast.Call) -> Optional[str]: ...
        def scope_of(self, node: ast.AST) -> ast.AST: ...
        def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]: ...
        def bindings(self, scope: ast.AST) -> dict[str, list[Binding]]: ...
        def bindings_before(self, name: ast.Name) -> Optional[list[Binding]]: ...
        def self_attrs(self, cls: ast.ClassDef) -> tuple[dict[str, list[ast.AST]], set[str]]: ...
        def calls_within(self, node: ast.AST) -> list[ast.Call]: ...

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
                if func.id == "sum" and node.args and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp)):
                    return self.is_tensor(node.args[0].elt, depth + 1)  # sum(p.grad.norm() for p in params)
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
            if node.attr == "grad" and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                return True  # p.grad: a parameter's gradient (a tensor wherever it is read)
            return node.attr in _TENSOR_ATTRS and self.is_tensor(node.value, depth + 1)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value, depth + 1)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Mod) and is_format_string(node.left):
                return False  # "%s" % x is a string
            return self.is_tensor(node.left, depth + 1) or self.is_tensor(node.right, depth + 1)
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            return self.is_tensor(node.operand, depth + 1)
        if isinstance(node, ast.Compare):
            # loss > best, (a == b): an element-wise comparison is a tensor (``is`` / ``in`` are not)
            if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                return False
            return any(self.is_tensor(n, depth + 1) for n in (node.left, *node.comparators))
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
                # `loss = model(x)[0]` of a model from another file: a tensor if its scope calls
                # loss.backward(), unless a binding is plainly a number (`loss = 0` then `loss += ...`)
                return node.id in self._uses_in_scope(self.scope_of(node))[1] and not any(
                    isinstance(p.value, ast.Constant) for p in prior
                )
            return True
        return False

    def _uses_in_scope(self, scope: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
        """``(names used as modules, names a backward runs on)`` directly in ``scope``: ``model.train()``,
        ``model.parameters()``, ``model = nn.DataParallel(model)``; ``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``."""
        memo: dict[ast.AST, tuple[frozenset[str], frozenset[str]]] = self.memo("scope_uses", dict)
        found = memo.get(scope)
        if found is not None:
            return found
        modules: set[str] = set()
        grads: set[str] = set()
        calls = self.calls if isinstance(scope, ast.Module) else self.calls_within(scope)
        for call in calls:
            func = call.func
            if not isinstance(func, ast.Attribute):
                continue
            owner: Optional[ast.AST] = None
            into = modules
            if func.attr in _MODULE_ONLY_USES and not call.args and isinstance(func.value, ast.Name):
                owner = func.value
            elif func.attr in _BACKWARD_CALLS:
                into = grads
                owner = func.value
                if isinstance(owner, ast.Call) and terminal_name(owner.func) == "scale" and owner.args:
                    owner = owner.args[0]  # scaler.scale(loss).backward()
                elif call.args and not (isinstance(owner, ast.Name) and owner.id.endswith("loss")):
                    # accelerator.backward(loss), self.manual_backward(loss); not a CUDA kernel's
                    # `wkv_cuda.backward(B, T, C, ...)` inside an autograd Function, whose arguments are sizes
                    if func.attr == "backward" and not terminal_name(owner).lower().endswith(_BACKWARD_OWNERS):
                        continue
                    owner = call.args[0]
            if isinstance(owner, ast.Name) and owner.id not in into and self.scope_of(call) is scope:
                into.add(owner.id)
        for name, bound in self.bindings(scope).items():
            if any(
                b.kind == "value" and isinstance(b.value, ast.Call) and self.call_name(b.value) in _MODULE_WRAPPERS
                for b in bound
            ):
                modules.add(name)
        found = memo[scope] = (frozenset(modules), frozenset(grads))
        return found

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
        ``Net()`` of a module class defined here, possibly followed by ``.to(...)`` / ``.cuda()``; or its
        scope uses it as one (:meth:`_used_as_module`)."""
        return self._built_as_module(name) or self._used_as_module(name)

    def _built_as_module(self, name: ast.Name) -> bool:
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
                if not (callee.startswith("torch.nn.") and last[:1].isupper() and last not in _NOT_MODULES):
                    return False
            elif not (isinstance(value.func, ast.Name) and value.func.id in self.module_classes):
                return False
        return True

    def _used_as_module(self, name: ast.Name) -> bool:
        """Its scope calls ``name.train()`` / ``.eval()`` / ``.parameters()`` or wraps it in DataParallel /
        DDP: a model built in another file (``model = get_model(cfg)``), or a function's parameter."""
        return name.id in self._uses_in_scope(self.scope_of(name))[0]

    def is_submodule(self, attr: ast.Attribute) -> bool:
        """``self.<attr>`` is assigned in the enclosing class and is not one of its methods."""
        cls = self.enclosing_class(attr)
        if cls is None:
            return False
        attrs, methods = self.self_attrs(cls)
        return attr.attr in attrs and attr.attr not in methods

    def formats_tensor(self, node: ast.AST) -> bool:
        """Printing ``node`` converts a tensor to text (``x``, ``f"{x}"``, ``"%s" % x``, ``"{}".format(x)``)."""
        if is_string_format(node):
            return self.formatted_tensor(node) is not None
        return self.is_tensor(node)

    def formatted_tensor(self, node: ast.AST) -> Optional[ast.AST]:
        """The tensor that the string expression ``node`` formats (f-string, ``%``, ``.format``), if visible."""
        if not is_string_format(node):
            return None
        if isinstance(node, ast.JoinedStr):
            values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        elif isinstance(node, ast.BinOp):
            right = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            # ("%10.4g" * 3) % (*mloss,): each element of a tensor, read one by one
            values = [r.value if isinstance(r, ast.Starred) else r for r in right]
        else:  # "...".format(...)
            values = [*node.args, *(k.value for k in node.keywords)]
        return next((v for v in values if self.is_tensor(v)), None)

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
    @cached_property
    def uses_gpu(self) -> bool:
        """The file runs on a GPU as far as it shows: a ``.cuda()`` call, a ``"cuda"`` string,
        ``accelerator="gpu"/"cuda"/"auto"``, ``torch.accelerator.*``, a Lightning ``Trainer`` /
        ``Fabric`` that chooses the accelerator itself (no ``accelerator=``, or ``"auto"``), or a
        Hugging Face ``Accelerator()`` (without ``cpu=``)."""
        if any(_CUDA_STR.match(s) for s in self.strings):
            return True
        for call in self.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "cuda":
                return True
            for kw in call.keywords:
                if (
                    kw.arg == "accelerator"
                    and isinstance(kw.value, ast.Constant)
                    and kw.value.value in _GPU_ACCELERATORS
                ):
                    return True
            name = self.call_name(call)
            if name is None:
                continue
            if name.startswith(("torch.accelerator.", "torch.cuda.")):
                return True  # torch.cuda.synchronize() / empty_cache() / set_device(): a CUDA run
            if (
                name in _AUTO_ACCELERATOR
                and keyword(call, "accelerator") is None
                and not any(kw.arg is None for kw in call.keywords)
            ):
                return True
            if name == "accelerate.Accelerator" and keyword(call, "cpu") is None:
                return True  # Hugging Face Accelerate places the model and batches on the GPU itself
        return False

    @property
    def mentions_cuda(self) -> bool:
        """Alias of :attr:`uses_gpu` (the name the data rules have always used)."""
        return self.uses_gpu

    @cached_property
    def cpu_only(self) -> bool:
        """The file visibly never leaves the CPU: no GPU use (:attr:`uses_gpu`), no ``.to(<device>)``
        and no ``device=`` other than ``"cpu"``. A sync there costs nothing worth a finding."""
        if self.uses_gpu:
            return False
        for call in self.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "to" and call.args and self.is_device(call.args[0]):
                if not is_const(call.args[0], "cpu"):
                    return False
            kw = keyword(call, "device")
            if kw is not None and not is_const(kw.value, "cpu"):
                return False
        return True

    @cached_property
    def grads_used_in_place(self) -> bool:
        """The file writes into existing gradients (``p.grad += g``, ``p.grad.add_(...)``,
        ``p.grad.data.copy_(...)``): with ``set_to_none=True`` those grads are ``None`` and it breaks."""
        src = self.source
        if src and ".grad" not in src:
            return False
        for node in self.parents:
            if isinstance(node, ast.AugAssign) and _is_grad(node.target):
                return True
        for call in self.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in _GRAD_INPLACE and _is_grad(func.value):
                if func.attr == "mul_" and call.args and (is_const(call.args[0], 0) or is_const(call.args[0], 0.0)):
                    continue  # p.grad.mul_(0) is a zeroing (LS303), not a use
                return True
        return False

    def iterable_dataset_classes(self) -> frozenset[str]:
        """Classes defined here that subclass ``torch.utils.data.IterableDataset``."""
        out = set()
        for cls in self.classes:
            for base in cls.bases:
                name = self.qualname(base) or ""
                if name.endswith("IterableDataset") or (isinstance(base, ast.Name) and base.id in out):
                    out.add(cls.name)
        return frozenset(out)

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


def _is_grad(node: ast.AST) -> bool:
    """``p.grad`` or ``p.grad.data``."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"
