"""T11 under FSDP: Lightning's own FSDPStrategy, wrapped at the model's repeated blocks.

What it does: Fully Sharded Data Parallel shards parameters, gradients and optimizer state across the
processes (ZeRO-3), so a model that does not fit one device trains on several. The wrap policy puts each
repeated block (the blocks checkpointing's ``auto`` finds,
:func:`~lightning_speedups.functional.checkpointing.auto_checkpoint_targets`) in its own FSDP unit, so only
one block's full parameters live at a time; activation checkpointing of those blocks is T09's
``ActivationCheckpointing`` (``speedups.checkpointing.targets: [auto]``), applied in ``setup`` before the
blocks are wrapped. The mixed-precision policy follows the Trainer's precision (``speedups.precision``):
parameters and buffers in bf16 / fp16, gradients reduced in fp32. Checkpoints are sharded (one file per rank,
resumable with ``ckpt_path``) unless ``state_dict_type="full"``; ``cpu_offload`` keeps the sharded parameters
in host memory.

Card: tip T11 ``ddp``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

Clipping: the Trainer's norm clipping (the user's ``gradient_clip_val`` or ``speedups.grad_clip``), which
Lightning's ``FSDPPrecision`` refuses, goes through FSDP's own ``clip_grad_norm_`` on the root unit
(:class:`ShardedNormClipPrecision`: one norm over every rank's shards); value clipping is element-wise
and already right on shards.

Input gradients and ``requires_grad`` (:func:`fsdp_gradient_problems`): a model that sets
``requires_grad`` of its parameters while training (an energy-based model's sampler freezing the
network) stops under FSDP (they are views of a flat parameter; ``use_orig_params=True`` does not change
that); one that computes gradients itself inside training (``torch.autograd.grad`` for adversarial
examples or a WGAN-GP gradient penalty) trains, but on several processes its weights drift from plain
Lightning's and DDP's from the second step, silently (measured). Both are refused in ``setup``, before
any ``training_step``, with the fix (the ddp preset), or skipped with the reason when the model is known.

Manual optimization: Lightning runs ``training_step`` through the wrapped model's ``forward``, so with
the whole LightningModule in one FSDP unit ``manual_backward`` runs inside that unit's forward, and
FSDP1 stops ("Expects BACKWARD_PRE or BACKWARD_POST state but got HandleTrainingState.FORWARD";
Lightning issues 19626 and 19685). For a model with manual optimization the LightningModule itself is
therefore not wrapped: each top-level sub-module that owns parameters (a GAN's generator and
discriminator) is its own FSDP root, wrapped at its repeated blocks, so ``training_step`` runs outside
every FSDP forward and each backward meets finished units, as in a plain PyTorch FSDP GAN.

Twin networks: a DQN's ``target_net`` (or a teacher / momentum encoder) is a copy of another top-level
sub-module, synced in place during ``training_step`` (``target_net.load_state_dict(net.state_dict())``).
In one FSDP unit both networks' parameters are views of one flat parameter, so that in-place copy
invalidates the online network's tensors saved for backward ("... is a view and its base or another
view of its base has been modified inplace"). Top-level sub-modules with the same parameters (names,
shapes, dtypes) as another are therefore FSDP units of their own, and the sync goes through FSDP's own
state-dict hooks.

Why FSDPStrategy (FSDP1) and not ModelParallelStrategy (FSDP2, ``fully_shard``): Lightning's
ModelParallelStrategy requires the LightningModule's own ``configure_model`` to call ``fully_shard``;
a preset must work on any model, on every torch from 2.4 on. A model whose ``configure_model``
shards itself can use ``trainer.strategy: ModelParallelStrategy`` directly.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import TYPE_CHECKING, Any, Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import FSDPPrecision
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn

from lightning_speedups.callbacks.summary import SpeedupsSummary
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.checkpointing import auto_checkpoint_targets
from lightning_speedups.strategies.threads import ThreadsRestore
from lightning_speedups.trainer.namespace import for_namespace, is_lightning, namespace_of

Sharding = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
StateDictType = Literal["sharded", "full"]

_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


class BlockWrapPolicy:
    """An FSDP auto-wrap policy (the ``(module, recurse, nonwrapped_numel) -> bool`` form) that wraps
    the model's repeated blocks, found when the model is known (:meth:`resolve`).

    Examples:
        >>> from torch import nn
        >>> model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
        >>> policy = BlockWrapPolicy()
        >>> policy.resolve(model)
        ['0', '1', '2']
        >>> policy(model[0], recurse=False, nonwrapped_numel=20), policy(model[0][0], recurse=False, nonwrapped_numel=20)
        (True, False)
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: set[int] = set()

    def resolve(self, model: nn.Module) -> list[str]:
        """Find the blocks of ``model`` (idempotent); returns their qualified names."""
        blocks = auto_checkpoint_targets(model)
        self.names = [n for n, _ in blocks]
        self._ids = {id(m) for _, m in blocks}
        return self.names

    def include(self, model: nn.Module, names: list[str]) -> None:
        """Also wrap the sub-modules ``names`` of ``model`` (after :meth:`resolve`)."""
        self._ids |= {id(model.get_submodule(n)) for n in names}

    def __call__(self, module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        if recurse:
            return True  # look inside every module for blocks
        return id(module) in self._ids


def owning_children(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The top-level sub-modules of ``model`` that own parameters, in registration order.

    Examples:
        >>> from torch import nn
        >>> m = nn.Module(); m.g = nn.Linear(2, 2); m.act = nn.ReLU(); m.d = nn.Linear(2, 1)
        >>> [n for n, _ in owning_children(m)]
        ['g', 'd']
    """
    return [(n, c) for n, c in model.named_children() if next(c.parameters(), None) is not None]


def twin_children(model: nn.Module) -> list[str]:
    """Top-level sub-networks (modules made of modules) with the same parameters (names, shapes, dtypes)
    as another one: a DQN's ``net`` and ``target_net``, a student and its teacher, an encoder and its
    momentum copy. Single layers (two ``nn.Linear(8, 8)`` of a flat MLP) are not twins.

    Examples:
        >>> from torch import nn
        >>> def mlp(): return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        >>> m = nn.Module(); m.net = mlp(); m.target_net = mlp(); m.fc1 = nn.Linear(2, 2); m.fc2 = nn.Linear(2, 2)
        >>> twin_children(m)
        ['net', 'target_net']
    """
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, child in owning_children(model):
        if next(child.children(), None) is None:
            continue
        key = tuple((n, tuple(p.shape), p.dtype) for n, p in child.named_parameters())
        groups.setdefault(key, []).append(name)
    return [n for names in groups.values() if len(names) > 1 for n in names]


def manual_layout_problems(model: nn.Module) -> list[str]:
    """Why ``model`` cannot be sharded one FSDP root per top-level sub-module (empty when it can):
    parameters registered on the model itself, or a parameter shared by two sub-modules."""
    out = []
    own = [n for n, _ in model.named_parameters(recurse=False)]
    if own:
        out.append(
            f"the LightningModule holds parameters of its own ({', '.join(own)}), outside every sub-module:"
            " they would be neither sharded nor averaged across processes"
        )
    owner: dict[int, str] = {}
    for name, child in owning_children(model):
        for p in child.parameters():
            other = owner.setdefault(id(p), name)
            if other != name:
                out.append(f"`{other}` and `{name}` share a parameter (one FSDP root cannot hold another's)")
                break
    return out


def fsdp_mixed_precision(precision: str) -> tuple[Optional[Any], str]:
    """The FSDP ``MixedPrecision`` policy for a Lightning precision, and one line saying what it does.

    ``bf16-mixed`` / ``16-mixed``: parameters and buffers in that dtype for compute, gradients reduced
    in fp32 (Lightning's own default reduces in the low dtype). Other precisions: ``None`` (full
    precision, or Lightning converts the module for ``*-true``).

    Examples:
        >>> policy, why = fsdp_mixed_precision("bf16-mixed")
        >>> policy.param_dtype, policy.reduce_dtype
        (torch.bfloat16, torch.float32)
        >>> fsdp_mixed_precision("32-true")[0] is None
        True
    """
    dtype = _DTYPES.get(str(precision))
    if dtype is None:
        return None, f"no FSDP mixed-precision policy ({precision})"
    from torch.distributed.fsdp import MixedPrecision

    name = "bf16" if dtype is torch.bfloat16 else "fp16"
    return (
        MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=dtype),
        f"mixed precision {name} parameters and buffers, gradients reduced in fp32 (from precision={precision})",
    )


def fsdp_manual_error(problems: list[str]) -> str:
    """The refusal for a manual-optimization model that cannot be laid out one FSDP root per sub-module."""
    return (
        "speedups.fsdp: the model uses manual optimization, so the fsdp preset shards each top-level"
        " sub-module as its own FSDP root (FSDP1 cannot run manual_backward inside an FSDP unit's forward,"
        " where Lightning runs training_step); here " + "; ".join(problems) + ". Fix: keep each parameter in"
        " exactly one top-level sub-module (parameters registered on the LightningModule itself go into an"
        " nn.Module attribute), or train this model with the ddp preset"
        " (speedups.fsdp.enabled: false, speedups.ddp.enabled: true)"
    )


def _grad_calls(node: ast.AST) -> bool:
    """Whether ``node`` computes gradients: ``x.backward(...)`` or ``(torch.)autograd.grad(...)``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr == "backward":
                return True
            if sub.func.attr == "grad" and ast.unparse(sub.func.value).endswith("autograd"):
                return True
    return False


def _sets_requires_grad(node: ast.AST) -> bool:
    """Whether ``node`` sets ``requires_grad`` of something other than a fresh input: ``p.requires_grad =
    ...`` or ``m.requires_grad_(...)`` on a name bound by a loop over ``.parameters()``, or on a module."""
    for sub in ast.walk(node):
        targets: list[ast.AST] = []
        if isinstance(sub, ast.Assign):
            targets = [t.value for t in sub.targets if isinstance(t, ast.Attribute) and t.attr == "requires_grad"]
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "requires_grad_":
            targets = [sub.func.value]
        for target in targets:
            text = ast.unparse(target)
            if "parameters()" in text or text.startswith("self."):
                return True
            if isinstance(target, ast.Name) and _loops_over_parameters(node, target.id):
                return True
    return False


def _loops_over_parameters(node: ast.AST, name: str) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.For, ast.comprehension)) and isinstance(sub.target, ast.Name) and sub.target.id == name:
            if "parameters(" in ast.unparse(sub.iter):
                return True
    return False


_FRAMEWORKS = ("torch", "lightning", "pytorch_lightning", "builtins", "torchmetrics", "typing", "collections")


def _user_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] not in _FRAMEWORKS


def _own_methods(model: nn.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """``(Class.method, node)`` for the methods of the model's own classes: the LightningModule's, its
    sub-modules', and those of the helper objects it holds (a sampler); framework classes excluded."""
    classes: list[type] = []
    for m in model.modules():
        holders = [type(m)] + [type(v) for v in vars(m).values() if not isinstance(v, (nn.Module, type))]
        for cls in holders:
            for base in cls.__mro__:
                if _user_class(base) and base not in classes:
                    classes.append(base)
    out = []
    for cls in classes:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        node = tree.body[0] if tree.body else None
        for fn in node.body if isinstance(node, ast.ClassDef) else []:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name != "__init__":
                out.append((f"{cls.__name__}.{fn.name}", fn))
    return out


def requires_grad_toggles(model: nn.Module) -> list[str]:
    """Methods of the model's own classes (see :func:`input_gradient_methods`) that set ``requires_grad``
    of parameters around a gradient computation: an energy-based model's Langevin sampler that freezes
    the network, takes the input gradient and unfreezes it. Under FSDP the parameters such code reaches
    inside ``training_step`` are views of a flat parameter, not leaves, and torch refuses ("you can only
    change requires_grad flags of leaf variables"), with ``use_orig_params`` true or false (measured).

    Examples:
        >>> requires_grad_toggles(nn.Linear(2, 2))
        []
    """
    return [name for name, fn in _own_methods(model) if _sets_requires_grad(fn) and _grad_calls(fn)]


def input_gradient_methods(model: nn.Module) -> list[str]:
    """Methods of the model's own classes (the LightningModule's, its sub-modules', those of the helper
    objects it holds) that compute gradients themselves: ``torch.autograd.grad`` (adversarial examples,
    a WGAN-GP gradient penalty) or ``.backward()`` (not Lightning's ``manual_backward``). Read from the
    source; empty when it cannot be read.

    Under FSDP (torch 2.13, FSDP1, gloo) such a model trains with plain Lightning's losses on one
    process, but on two its weights leave those of plain Lightning and of DDP from the second optimizer
    step (measured: 0.05 after 4 steps, with ``use_orig_params`` true or false and with
    ``backward_prefetch=None``; DDP matches to 3e-8), silently.

    Examples:
        >>> input_gradient_methods(nn.Linear(2, 2))
        []
    """
    return [name for name, fn in _own_methods(model) if _grad_calls(fn)]


def fsdp_gradient_problems(model: nn.Module) -> list[str]:
    """Why the fsdp preset cannot train ``model`` (empty when it can): parameters whose ``requires_grad``
    it toggles while training, gradients it computes itself inside training."""
    out = []
    toggles = requires_grad_toggles(model)
    if toggles:
        out.append(
            f"{', '.join(toggles)} sets requires_grad of the model's parameters around a gradient computation:"
            " under FSDP those parameters are views of a flat parameter, not leaves, and torch refuses"
            ' ("you can only change requires_grad flags of leaf variables"), with use_orig_params true or false'
        )
    grads = [m for m in input_gradient_methods(model) if m not in toggles]
    if grads:
        out.append(
            f"{', '.join(grads)} computes gradients itself (torch.autograd.grad or .backward() inside training):"
            " under FSDP on several processes the weights then drift from what plain Lightning and DDP"
            " compute, from the second step on, with no error (measured on 2 processes, use_orig_params true"
            " or false)"
        )
    return out


def fsdp_gradient_error(problems: list[str]) -> str:
    """The refusal for a model :func:`fsdp_gradient_problems` finds problems in."""
    return (
        "speedups.fsdp: " + "; ".join(problems) + ". Fix: train this model with the ddp preset"
        " (speedups.fsdp.enabled: false, speedups.ddp.enabled: true), which computes the same gradients as"
        " one process; FSDP is for models that do not fit one device"
    )


if TYPE_CHECKING:  # the mixins are typed as the lightning.pytorch classes they sit above
    _FSDPBase = FSDPStrategy
    _PrecisionBase = FSDPPrecision
else:
    _FSDPBase = _PrecisionBase = object


class _ShardedNormClip(_PrecisionBase):
    """The code of :class:`ShardedNormClipPrecision`, above whichever Lightning package's ``FSDPPrecision``."""

    fsdp_strategy: Optional[Any] = None

    def clip_grad_by_norm(self, optimizer: torch.optim.Optimizer, clip_val: float) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        strategy = self.fsdp_strategy
        model = strategy.model if strategy is not None else None
        if isinstance(model, FullyShardedDataParallel):
            model.clip_grad_norm_(clip_val)
            return
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        roots = [
            m
            for m in (model.children() if model is not None else [])
            if isinstance(m, FullyShardedDataParallel) and any(id(p) in params for p in m.parameters())
        ]
        if len(roots) != 1:
            raise SettingError(
                "speedups.fsdp: norm clipping needs one FSDP root for the optimizer's parameters (FSDP's"
                f" clip_grad_norm_ is per root); found {len(roots)}. Fix: clip by value"
                " (gradient_clip_algorithm: value), or one optimizer per sub-network"
            )
        roots[0].clip_grad_norm_(clip_val)


class ShardedNormClipPrecision(_ShardedNormClip, FSDPPrecision):
    """Lightning's :class:`FSDPPrecision` whose norm clipping (``Trainer(gradient_clip_algorithm="norm")``,
    the user's or ``speedups.grad_clip``) goes through FSDP's own ``clip_grad_norm_`` on the root unit:
    one norm over every rank's shards (Lightning's plugin refuses norm clipping under FSDP). Value
    clipping is element-wise, so Lightning's own (on the local shards) is already right."""


class _SpeedupsFSDP(_FSDPBase):
    """The code of :class:`SpeedupsFSDPStrategy`, above whichever Lightning package's ``FSDPStrategy``."""

    def __init__(self, **kwargs: Any) -> None:
        self.block_policy = kwargs.pop("auto_wrap_policy", None) or BlockWrapPolicy()
        super().__init__(auto_wrap_policy=self.block_policy, **kwargs)
        self.setup_notes: list[str] = []
        self.manual = False
        self.threads = ThreadsRestore()

    def setup(self, trainer: pl.Trainer) -> None:
        model = self.lightning_module
        assert model is not None
        self.manual = not getattr(model, "automatic_optimization", True)
        notes = []
        gradient_problems = fsdp_gradient_problems(model)
        if gradient_problems:
            raise SettingError(fsdp_gradient_error(gradient_problems))
        plugin = self.precision_plugin
        if type(plugin).__name__ == "FSDPPrecision":  # norm clipping through FSDP's clip_grad_norm_ (see the class)
            plugin.__class__ = for_namespace(ShardedNormClipPrecision, namespace_of(plugin))
            self.precision_plugin = plugin
        if isinstance(plugin, _ShardedNormClip):
            plugin.fsdp_strategy = self
            clip = getattr(trainer, "gradient_clip_val", None)
            algorithm = getattr(trainer, "gradient_clip_algorithm", None) or "norm"
            algorithm = str(getattr(algorithm, "value", algorithm))  # Lightning's GradClipAlgorithmType
            if clip:
                how = (
                    "through FSDP's clip_grad_norm_ (one norm over every rank's shards)"
                    if algorithm == "norm"
                    else "element-wise on each rank's shards"
                )
                notes.append(f"gradient clipping by {algorithm} at {clip} {how}")
        if self.manual:
            problems = manual_layout_problems(model)
            if problems:
                raise SettingError(fsdp_manual_error(problems))
            roots = [n for n, _ in owning_children(model)]
            notes.append(
                f"manual optimization: {', '.join(roots)} each its own FSDP root (training_step, where"
                " manual_backward runs, is inside no FSDP unit)"
            )
        if isinstance(self.block_policy, BlockWrapPolicy):
            names = self.block_policy.resolve(model)
            twins = [] if self.manual else twin_children(model)
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            if names:
                notes.append(f"{len(names)} blocks in their own FSDP units ({shown})")
            else:
                whole = "" if self.manual or twins else ": the whole model is one FSDP unit"
                notes.append(f"no repeated blocks found{whole}")
            if twins:
                self.block_policy.include(model, twins)
                notes.append(
                    f"twin sub-networks {', '.join(twins)} in their own FSDP units (an in-place copy of one into"
                    " another, such as a target-network sync, goes through FSDP's state dict)"
                )
        if self.mixed_precision is None:
            self.mixed_precision, why = fsdp_mixed_precision(self.precision_plugin.precision)
            notes.append(why)
        self._hide_example_input(trainer, model, notes)
        self.setup_notes = notes
        summary = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, SpeedupsSummary)), None)
        if summary is not None and notes:
            summary.notes.append(("fsdp units (T11)", True, "; ".join(notes)))
        super().setup(trainer)  # FSDPStrategy's, after this mixin

    def _hide_example_input(self, trainer: pl.Trainer, model: Any, notes: list[str]) -> None:
        """Lightning's model summary runs ``example_input_array`` through the bare LightningModule, outside FSDP's
        root: the inner units would initialise as roots and every later step fails. The summary goes without it
        (no sizes or FLOPs); it is back for the first training step (:meth:`on_train_start`)."""
        self._example_input = None
        example = getattr(model, "example_input_array", None)
        summaries = [cb for cb in getattr(trainer, "callbacks", []) if is_lightning(cb, "ModelSummary")]
        if example is None or not summaries:
            return
        self._example_input = example
        model.example_input_array = None
        notes.append(
            "the model summary shows no sizes or FLOPs (it would run the model outside FSDP's root, which breaks "
            "its units; example_input_array is back from the first training step)"
        )

    def _restore_example_input(self) -> None:
        example, self._example_input = getattr(self, "_example_input", None), None
        model = self.lightning_module
        if example is not None and model is not None and model.example_input_array is None:
            model.example_input_array = example

    def on_train_start(self) -> None:
        self._restore_example_input()
        super().on_train_start()

    def _wrap(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(
            module=module,
            cpu_offload=self.cpu_offload,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=self.root_device if self.root_device.type == "cpu" else self.root_device.index,
            **self.kwargs,
        )

    def _move_unwrapped(self, model: nn.Module) -> None:
        """Move what no FSDP root holds (sub-modules without parameters, the model's own buffers) to the
        device: each root moves its own module, and nothing wraps the LightningModule itself."""
        for _, child in model.named_children():
            if next(child.parameters(), None) is None:
                child.to(self.root_device)
        for name, buf in list(model.named_buffers(recurse=False)):
            setattr(model, name, buf.to(self.root_device))  # a registered buffer stays one (persistence kept)

    def _setup_model(self, model: nn.Module) -> nn.Module:
        # private: Lightning's FSDPStrategy wraps the model in `_setup_model` with device_id=root_device.index,
        # which is None on the CPU, and FSDP then refuses ("FSDP needs a non-CPU accelerator device"). On
        # the CPU the model is wrapped here with device_id=cpu, and Lightning's own `_setup_model` then
        # takes the already-wrapped model (activation checkpointing policy, metrics) as for a user's own
        # wrapping; no public hook chooses FSDP's device. Under manual optimization each top-level
        # sub-module is wrapped here (see the module docstring), on every device.
        from torch.distributed.fsdp import FullyShardedDataParallel

        if not any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
            if getattr(self, "manual", False):
                for name, child in owning_children(model):
                    setattr(model, name, self._wrap(child))
                self.kwargs.pop("auto_wrap_policy", None)  # applied above; Lightning would warn it is ignored
                self._move_unwrapped(model)
            elif self.root_device.type == "cpu":
                model = self._wrap(model)
                self.kwargs.pop("auto_wrap_policy", None)
        return super()._setup_model(model)

    def teardown(self) -> None:
        self._restore_example_input()
        super().teardown()
        self.threads.restore()  # Lightning's launcher set the thread count; put it back


class SpeedupsFSDPStrategy(_SpeedupsFSDP, FSDPStrategy):
    """Lightning's :class:`~lightning.pytorch.strategies.FSDPStrategy` wrapped at the model's repeated
    blocks (and twin sub-networks), with a mixed-precision policy that follows the Trainer's precision.
    Under manual optimization each top-level sub-module is its own FSDP root (see the module docstring);
    a model that cannot be laid out so is refused in ``setup``, before any ``training_step``. For a
    ``pytorch_lightning`` Trainer, :func:`fsdp_strategy` builds the same class on that package's
    ``FSDPStrategy``.

    Args:
        kwargs: as for ``FSDPStrategy`` (``cpu_offload``, ``sharding_strategy``, ``state_dict_type``,
            ...); ``auto_wrap_policy`` defaults to :class:`BlockWrapPolicy`.
    """


def fsdp_strategy(
    accelerator: Optional[str] = "auto",
    cpu_offload: bool = False,
    sharding_strategy: Sharding = "FULL_SHARD",
    state_dict_type: StateDictType = "sharded",
    namespace: Optional[str] = None,
    **kwargs: Any,
) -> tuple[FSDPStrategy, str]:
    """Build :class:`SpeedupsFSDPStrategy` with the pack's settings.

    Args:
        accelerator: the Trainer's accelerator (on the CPU, offloading changes nothing; said so).
        cpu_offload: keep the sharded parameters (and their gradients) in host memory between uses.
        sharding_strategy: ``FULL_SHARD`` (parameters, gradients, optimizer state), ``SHARD_GRAD_OP``,
            ``NO_SHARD`` or ``HYBRID_SHARD``.
        state_dict_type: ``"sharded"`` (one file per rank, a checkpoint folder) or ``"full"``.
        kwargs: passed on to ``FSDPStrategy``.

    Returns:
        ``(strategy, reason)``.

    Example::

        strategy, why = fsdp_strategy(cpu_offload=True)
        trainer = Trainer(devices=4, strategy=strategy, callbacks=[ActivationCheckpointing("auto")])
    """
    if sharding_strategy not in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"):
        raise SettingError(
            "`speedups.fsdp.sharding_strategy` must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD;"
            f" got {sharding_strategy!r}."
        )
    if state_dict_type not in ("sharded", "full"):
        raise SettingError(f"`speedups.fsdp.state_dict_type` must be sharded or full; got {state_dict_type!r}.")
    strategy = for_namespace(SpeedupsFSDPStrategy, namespace)(
        cpu_offload=cpu_offload,
        sharding_strategy=sharding_strategy,
        state_dict_type=state_dict_type,
        **kwargs,
    )
    parts = [f"FSDP {sharding_strategy} at the repeated blocks", f"{state_dict_type} checkpoints"]
    if cpu_offload:
        on_cpu = str(accelerator) == "cpu" or (accelerator in (None, "auto") and not torch.cuda.is_available())
        parts.append("parameters offloaded to CPU" + (" (training on the CPU already: no effect)" if on_cpu else ""))
    return strategy, ", ".join(parts)
