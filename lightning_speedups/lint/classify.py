"""Cautious classifiers: is an expression *visibly* a numpy array, a tensor, a module, a device?

Each answers ``False`` whenever it cannot tell, so a rule built on them reports nothing rather than
guess. ``ctx.classify`` of a :class:`~lightning_speedups.lint.context.FileContext`; what the file as a whole
shows (it runs on a GPU, it asks for determinism) is in :mod:`~lightning_speedups.lint.facts`.
"""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Optional

from lightning_speedups.lint.astutil import (
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
    is_format_string,
    is_string_format,
    keyword,
    terminal_name,
)
from lightning_speedups.lint.basics import FileBasics
from lightning_speedups.lint.scopes import Scopes

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


class Classifier:
    """Is an expression of one file visibly a numpy array, a tensor, a module, a device? (``ctx.classify``)

    It reads the file's names and node lists (:class:`~lightning_speedups.lint.basics.FileBasics`) and the
    bindings of its scopes (:class:`~lightning_speedups.lint.scopes.Scopes`)."""

    def __init__(self, file: FileBasics, scopes: Scopes) -> None:
        self.file = file
        self.scopes = scopes

    # ------------------------------------------------------------------ classifiers
    def is_numpy_annotation(self, ann: Optional[ast.AST]) -> bool:
        if isinstance(ann, ast.Subscript):
            ann = ann.value
        return self.file.qualname(ann) in ("numpy.ndarray", "numpy.typing.NDArray")

    def is_numpy(self, node: ast.AST, depth: int = 0) -> bool:
        """``node`` is visibly a numpy array (never guesses)."""
        if depth > 5:
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = self.file.qualname(func)
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
            prior = self.scopes.bindings_before(node)
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
        return self.file.qualname(ann) == "torch.Tensor"

    def is_tensor(self, node: ast.AST, depth: int = 0) -> bool:
        """``node`` is visibly a torch tensor (a torch op result, a submodule output, ...)."""
        if depth > 5:
            return False
        if isinstance(node, ast.Call):
            func = node.func
            name = self.file.qualname(func)
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
            prior = self.scopes.bindings_before(node)
            if not prior:
                return False
            for b in prior:
                if b.kind in ("value", "unpack") and b.value is not None and self.is_tensor(b.value, depth + 1):
                    continue
                if b.kind == "param" and self.is_tensor_annotation(b.value):
                    continue
                # `loss = model(x)[0]` of a model from another file: a tensor if its scope calls
                # loss.backward(), unless a binding is plainly a number (`loss = 0` then `loss += ...`)
                return node.id in self.uses_in_scope(self.file.scope_of(node))[1] and not any(
                    isinstance(p.value, ast.Constant) for p in prior
                )
            return True
        return False

    def uses_in_scope(self, scope: ast.AST) -> tuple[frozenset[str], frozenset[str]]:
        """``(names used as modules, names a backward runs on)`` directly in ``scope``: ``model.train()``,
        ``model.parameters()``, ``model = nn.DataParallel(model)``; ``loss.backward()``,
        ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``."""
        memo: dict[ast.AST, tuple[frozenset[str], frozenset[str]]] = self.file.memo("scope_uses", dict)
        found = memo.get(scope)
        if found is not None:
            return found
        modules: set[str] = set()
        grads: set[str] = set()
        calls = self.file.calls if isinstance(scope, ast.Module) else self.file.calls_within(scope)
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
            if isinstance(owner, ast.Name) and owner.id not in into and self.file.scope_of(call) is scope:
                into.add(owner.id)
        for name, bound in self.scopes.bindings(scope).items():
            if any(
                b.kind == "value" and isinstance(b.value, ast.Call) and self.file.call_name(b.value) in _MODULE_WRAPPERS
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
            for cls in self.file.classes:
                if cls.name in out:
                    continue
                for base in cls.bases:
                    name = self.file.qualname(base) or ""
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
        scope uses it as one (:meth:`used_as_module`)."""
        return self.built_as_module(name) or self.used_as_module(name)

    def built_as_module(self, name: ast.Name) -> bool:
        prior = self.scopes.bindings_before(name)
        if prior is None:
            local = self.scopes.bindings(self.file.scope_of(name)).get(name.id)
            if local:
                return False  # bound later in this scope: cannot tell
            prior = self.scopes.bindings(self.file.tree).get(name.id)
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
            callee = self.file.qualname(value.func)
            if callee is not None:
                last = callee.rsplit(".", 1)[1]
                if not (callee.startswith("torch.nn.") and last[:1].isupper() and last not in _NOT_MODULES):
                    return False
            elif not (isinstance(value.func, ast.Name) and value.func.id in self.module_classes):
                return False
        return True

    def used_as_module(self, name: ast.Name) -> bool:
        """Its scope calls ``name.train()`` / ``.eval()`` / ``.parameters()`` or wraps it in DataParallel /
        DDP: a model built in another file (``model = get_model(cfg)``), or a function's parameter."""
        return name.id in self.uses_in_scope(self.file.scope_of(name))[0]

    def is_submodule(self, attr: ast.Attribute) -> bool:
        """``self.<attr>`` is assigned in the enclosing class and is not one of its methods."""
        cls = self.file.enclosing_class(attr)
        if cls is None:
            return False
        attrs, methods = self.scopes.self_attrs(cls)
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
            return self.file.qualname(node.func) == "torch.device"
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
