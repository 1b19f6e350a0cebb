"""What a file shows as a whole: it runs on a GPU (:attr:`Facts.uses_gpu`), it never leaves the CPU
(:attr:`Facts.cpu_only`), it writes into existing gradients, it asks for determinism, it defines iterable
datasets. ``ctx.facts`` of a :class:`~lightning_speedups.lint.context.FileContext`."""

from __future__ import annotations

import ast
from functools import cached_property

from lightning_speedups.lint.astutil import _CUDA_STR, TRAINER, is_const, keyword
from lightning_speedups.lint.basics import FileBasics
from lightning_speedups.lint.classify import Classifier

#: Lightning / Fabric entry points that pick the GPU themselves (``accelerator="auto"`` by default).
_AUTO_ACCELERATOR = frozenset({TRAINER, "lightning.fabric.Fabric", "lightning.Fabric", "lightning_fabric.Fabric"})
_GPU_ACCELERATORS = frozenset({"gpu", "cuda", "auto"})
#: In-place uses of ``p.grad`` that raise (or silently do nothing) once gradients are ``None``.
_GRAD_INPLACE = frozenset({"add_", "copy_", "sub_", "mul_", "div_", "addcmul_", "addcdiv_", "clamp_", "lerp_"})


class Facts:
    """File-level facts, each worked out once (it reads the file's calls and strings, and asks
    :class:`~lightning_speedups.lint.classify.Classifier` what a ``.to(...)`` argument is)."""

    def __init__(self, file: FileBasics, classify: Classifier) -> None:
        self.file = file
        self.classify = classify

    @cached_property
    def uses_gpu(self) -> bool:
        """The file runs on a GPU as far as it shows: a ``.cuda()`` call, a ``"cuda"`` string,
        ``accelerator="gpu"/"cuda"/"auto"``, ``torch.accelerator.*``, a Lightning ``Trainer`` /
        ``Fabric`` that chooses the accelerator itself (no ``accelerator=``, or ``"auto"``), or a
        Hugging Face ``Accelerator()`` (without ``cpu=``)."""
        if any(_CUDA_STR.match(s) for s in self.file.strings):
            return True
        for call in self.file.calls:
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
            name = self.file.call_name(call)
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
        for call in self.file.calls:
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "to"
                and call.args
                and self.classify.is_device(call.args[0])
            ):
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
        src = self.file.source
        if src and ".grad" not in src:
            return False
        for node in self.file.parents:
            if isinstance(node, ast.AugAssign) and _is_grad(node.target):
                return True
        for call in self.file.calls:
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr in _GRAD_INPLACE and _is_grad(func.value):
                if func.attr == "mul_" and call.args and (is_const(call.args[0], 0) or is_const(call.args[0], 0.0)):
                    continue  # p.grad.mul_(0) is a zeroing (LS303), not a use
                return True
        return False

    @cached_property
    def iterable_dataset_classes(self) -> frozenset[str]:
        """Classes defined here that subclass ``torch.utils.data.IterableDataset``."""
        out = set()
        for cls in self.file.classes:
            for base in cls.bases:
                name = self.file.qualname(base) or ""
                if name.endswith("IterableDataset") or (isinstance(base, ast.Name) and base.id in out):
                    out.add(cls.name)
        return frozenset(out)

    @cached_property
    def deterministic(self) -> bool:
        """The file asks for deterministic cuDNN / algorithms (which needs ``cudnn.benchmark = False``)."""
        for node in self.file.assigns:
            if is_const(node.value, True) and any(
                self.file.qualname(t) == "torch.backends.cudnn.deterministic" for t in node.targets
            ):
                return True
        for call in self.file.calls:
            name = self.file.call_name(call)
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
