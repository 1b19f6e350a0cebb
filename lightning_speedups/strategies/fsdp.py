"""T11 under FSDP: Lightning's own FSDPStrategy, wrapped at the model's repeated blocks.

Card:
    What: Fully Sharded Data Parallel shards parameters, gradients and optimizer state across the
    processes (ZeRO-3), so a model that does not fit one device trains on several. The wrap policy
    puts each repeated block (the blocks checkpointing's ``auto`` finds,
    :func:`~lightning_speedups.functional.checkpointing.auto_checkpoint_targets`) in its own FSDP
    unit, so only one block's full parameters live at a time; activation checkpointing of those
    blocks is T09's ``ActivationCheckpointing`` (``speedups.checkpointing.targets: [auto]``), applied
    in ``setup`` before the blocks are wrapped. The mixed-precision policy follows the Trainer's
    precision (``speedups.precision``): parameters and buffers in bf16 / fp16, gradients reduced in
    fp32. Checkpoints are sharded (one file per rank, resumable with ``ckpt_path``) unless
    ``state_dict_type="full"``; ``cpu_offload`` keeps the sharded parameters in host memory.
    Expected gain: memory per device about 1/N of parameters, gradients and optimizer state.
    When it hurts: every block's parameters are all-gathered in forward and backward: slower than
    DDP for a model that fits one device; norm clipping by Lightning and AGC do not apply to shards.

Why FSDPStrategy (FSDP1) and not ModelParallelStrategy (FSDP2, ``fully_shard``): Lightning's
ModelParallelStrategy requires the LightningModule's own ``configure_model`` to call ``fully_shard``;
a preset must work on any model, on every torch from 2.4 on. A model whose ``configure_model``
shards itself can use ``trainer.strategy: ModelParallelStrategy`` directly.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn
from typing_extensions import override

from lightning_speedups.callbacks.summary import SpeedupsSummary
from lightning_speedups.functional.checkpointing import auto_checkpoint_targets
from lightning_speedups.strategies.threads import ThreadsRestore

Sharding = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
StateDictType = Literal["sharded", "full"]

_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


class BlockWrapPolicy:
    """An FSDP auto-wrap policy (the ``(module, recurse, nonwrapped_numel) -> bool`` form) that wraps
    the model's repeated blocks, found when the model is known (:meth:`resolve`).

    Example:
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

    def __call__(self, module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        if recurse:
            return True  # look inside every module for blocks
        return id(module) in self._ids


def fsdp_mixed_precision(precision: str) -> tuple[Optional[Any], str]:
    """The FSDP ``MixedPrecision`` policy for a Lightning precision, and one line saying what it does.

    ``bf16-mixed`` / ``16-mixed``: parameters and buffers in that dtype for compute, gradients reduced
    in fp32 (Lightning's own default reduces in the low dtype). Other precisions: ``None`` (full
    precision, or Lightning converts the module for ``*-true``).

    Example:
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


#: The fsdp preset and manual optimization (one message: the CLI skips the preset, this strategy refuses).
FSDP_MANUAL_ERROR = (
    "speedups.fsdp: the model uses manual optimization, and Lightning's FSDPStrategy (FSDP1) fails when"
    " manual_backward runs inside the root unit's forward (a GAN's two backward passes per batch). Fix: train"
    " this model with the ddp preset instead, or build the preset with the model"
    " (preset(...).trainer_kwargs(model=model) skips fsdp for it, as the CLI does)"
)


class SpeedupsFSDPStrategy(FSDPStrategy):
    """Lightning's :class:`~lightning.pytorch.strategies.FSDPStrategy` wrapped at the model's repeated
    blocks, with a mixed-precision policy that follows the Trainer's precision.

    Args:
        kwargs: as for ``FSDPStrategy`` (``cpu_offload``, ``sharding_strategy``, ``state_dict_type``,
            ...); ``auto_wrap_policy`` defaults to :class:`BlockWrapPolicy`.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.block_policy = kwargs.pop("auto_wrap_policy", None) or BlockWrapPolicy()
        super().__init__(auto_wrap_policy=self.block_policy, **kwargs)
        self.setup_notes: list[str] = []
        self.threads = ThreadsRestore()

    @override
    def setup(self, trainer: pl.Trainer) -> None:
        if not getattr(trainer.lightning_module, "automatic_optimization", True):
            raise ValueError(FSDP_MANUAL_ERROR)
        notes = []
        if isinstance(self.block_policy, BlockWrapPolicy):
            assert self.lightning_module is not None
            names = self.block_policy.resolve(self.lightning_module)
            shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            notes.append(
                f"{len(names)} blocks in their own FSDP units ({shown})"
                if names
                else "no repeated blocks found: the whole model is one FSDP unit"
            )
        if self.mixed_precision is None:
            self.mixed_precision, why = fsdp_mixed_precision(self.precision_plugin.precision)
            notes.append(why)
        self.setup_notes = notes
        summary = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, SpeedupsSummary)), None)
        if summary is not None and notes:
            summary.notes.append(("fsdp units (T11)", True, "; ".join(notes)))
        super().setup(trainer)

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        # private: Lightning's FSDPStrategy wraps the model in `_setup_model` with device_id=root_device.index,
        # which is None on the CPU, and FSDP then refuses ("FSDP needs a non-CPU accelerator device"). On
        # the CPU the model is wrapped here with device_id=cpu, and Lightning's own `_setup_model` then
        # takes the already-wrapped model (activation checkpointing policy, metrics) as for a user's own
        # wrapping; no public hook chooses FSDP's device.
        from torch.distributed.fsdp import FullyShardedDataParallel

        if self.root_device.type == "cpu" and not any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
            model = FullyShardedDataParallel(
                module=model,
                cpu_offload=self.cpu_offload,
                mixed_precision=self.mixed_precision_config,
                sharding_strategy=self.sharding_strategy,
                device_id=self.root_device,
                **self.kwargs,
            )
            self.kwargs.pop("auto_wrap_policy", None)  # applied above; Lightning would warn it is ignored
        return super()._setup_model(model)

    @override
    def teardown(self) -> None:
        super().teardown()
        self.threads.restore()  # Lightning's launcher set the thread count; put it back


def fsdp_strategy(
    accelerator: Optional[str] = "auto",
    cpu_offload: bool = False,
    sharding_strategy: Sharding = "FULL_SHARD",
    state_dict_type: StateDictType = "sharded",
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
        raise ValueError(
            "`speedups.fsdp.sharding_strategy` must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD;"
            f" got {sharding_strategy!r}."
        )
    if state_dict_type not in ("sharded", "full"):
        raise ValueError(f"`speedups.fsdp.state_dict_type` must be sharded or full; got {state_dict_type!r}.")
    strategy = SpeedupsFSDPStrategy(
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
