"""T11 ddp: Lightning's own DDPStrategy with the pack's settings, and static graph kept away from accumulation.

What it does: one process per device, gradients all-reduced in buckets that overlap the backward pass.
``gradient_as_bucket_view`` lets gradients live inside the communication buckets (no copy, less memory);
``static_graph`` lets DDP skip the unused-parameter search after the first iteration; a bf16 / fp16
compression hook halves the bytes all-reduced on CUDA (NCCL).

Card: tip T11 ``ddp``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

Static graph and gradient accumulation: Lightning runs the non-final micro-batches of an
accumulation window under ``DistributedDataParallel.no_sync()``, and a static-graph DDP whose first
backward runs under ``no_sync()`` fails with ``expect_autograd_hooks_ INTERNAL ASSERT FAILED``
(pytorch issue 143580; reproduced on gloo by ``tests/distributed``). :class:`SpeedupsDDPStrategy`
therefore turns static graph off, with a note in the start-up summary, whenever the run accumulates:
``trainer.accumulate_grad_batches > 1``, an ``EffectiveBatchSize`` callback, a
``LargestBatch(keep_effective_batch=True)`` or a ``GradientAccumulationScheduler``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities import rank_zero_warn

from lightning_speedups.callbacks.effective_batch import EffectiveBatchSize
from lightning_speedups.callbacks.summary import SpeedupsSummary
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.precision import cuda_supports_bf16
from lightning_speedups.strategies.threads import ThreadsRestore
from lightning_speedups.trainer.namespace import for_namespace, is_lightning

Compression = Literal["auto", "off", "bf16", "fp16"]

#: Why static graph and accumulation are never combined (one line, for notes and errors).
STATIC_GRAPH_ACCUMULATION = (
    "static graph turned off: this run accumulates gradients, Lightning runs those micro-batches under"
    " DDP no_sync(), and a static-graph DDP fails its first backward there (pytorch issue 143580)"
)


def _compression_hook(compression: Compression, on_cuda: bool) -> tuple[Optional[Any], str]:
    if compression == "off":
        return None, "no gradient compression"
    if not on_cuda:
        return None, "gradient compression skipped: DDP communication hooks only run on CUDA (NCCL), not on CPU (gloo)"
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if compression == "auto":
        compression = "bf16" if cuda_supports_bf16() else "fp16"
    if compression == "bf16":
        return default_hooks.bf16_compress_hook, "gradients all-reduced in bf16 (bf16_compress_hook)"
    return default_hooks.fp16_compress_hook, "gradients all-reduced in fp16 (fp16_compress_hook)"


def accumulation_source(trainer: Any) -> Optional[str]:
    """What makes this run accumulate gradients, or ``None`` when every micro-batch steps the optimizer."""
    acc = getattr(trainer, "accumulate_grad_batches", 1) or 1
    if acc > 1:
        return f"trainer.accumulate_grad_batches={acc}"
    for cb in getattr(trainer, "callbacks", []) or []:
        if isinstance(cb, EffectiveBatchSize):
            return f"EffectiveBatchSize({cb.effective_batch_size}) (speedups.effective_batch_size)"
        if getattr(cb, "keep_effective_batch", False):
            return f"{type(cb).__name__}(keep_effective_batch=True)"
        if is_lightning(cb, "GradientAccumulationScheduler"):
            return "GradientAccumulationScheduler"
    return None


if TYPE_CHECKING:  # the mixin is typed as the lightning.pytorch class it sits above
    _DDPBase = DDPStrategy
else:
    _DDPBase = object


class _SpeedupsDDP(_DDPBase):
    """The code of :class:`SpeedupsDDPStrategy`, above whichever Lightning package's ``DDPStrategy``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.static_graph_note: Optional[str] = None
        self.threads = ThreadsRestore()

    def setup(self, trainer: pl.Trainer) -> None:
        # private: DDPStrategy keeps the DistributedDataParallel kwargs in `_ddp_kwargs` and reads them in
        # `setup`; there is no public way to change one after construction, and static graph can only be
        # decided once the Trainer (its accumulation and callbacks) exists.
        kwargs = self._ddp_kwargs
        source = accumulation_source(trainer)
        manual = not getattr(trainer.lightning_module, "automatic_optimization", True)
        if kwargs.get("static_graph") and manual:
            # each optimizer's backward reaches only its own parameters (a GAN's G and D steps): the
            # graph is not static and DDP must look for the parameters a backward did not reach
            kwargs["static_graph"] = False
            kwargs["find_unused_parameters"] = True
            self.static_graph_note = (
                "static graph off and unused parameters searched: the model uses manual optimization, where"
                " each optimizer's backward reaches only its own parameters"
            )
        elif kwargs.get("static_graph") and source is not None:
            kwargs["static_graph"] = False
            self.static_graph_note = f"{STATIC_GRAPH_ACCUMULATION} (accumulation from {source})"
        if self.static_graph_note is not None:
            summary = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, SpeedupsSummary)), None)
            if summary is not None:
                summary.notes.append(("ddp static_graph (T11)", False, self.static_graph_note))
            else:
                rank_zero_warn(f"ddp: {self.static_graph_note}.")
        super().setup(trainer)  # DDPStrategy's, after this mixin

    def teardown(self) -> None:
        super().teardown()
        self.threads.restore()  # Lightning's launcher set the thread count; put it back


class SpeedupsDDPStrategy(_SpeedupsDDP, DDPStrategy):
    """Lightning's :class:`~lightning.pytorch.strategies.DDPStrategy` that never runs a static graph
    together with gradient accumulation (see the module docstring). For a ``pytorch_lightning`` Trainer,
    :func:`ddp_strategy` builds the same class on that package's ``DDPStrategy``.

    Args:
        kwargs: as for ``DDPStrategy`` (``static_graph``, ``gradient_as_bucket_view``, ...).
    """


def ddp_strategy(
    accelerator: Optional[str] = "auto",
    gradient_as_bucket_view: bool = True,
    static_graph: bool = True,
    compression: Compression = "auto",
    find_unused_parameters: bool = False,
    namespace: Optional[str] = None,
    **kwargs: Any,
) -> tuple[DDPStrategy, str]:
    """Build :class:`SpeedupsDDPStrategy` (Lightning's ``DDPStrategy``) with the pack's settings.

    Args:
        accelerator: the Trainer's accelerator; decides whether a compression hook can apply.
        gradient_as_bucket_view: gradients as views into the all-reduce buckets.
        static_graph: the same parameters are used at every step (faster; wrong otherwise). Turned
            off at setup when the run accumulates gradients (pytorch issue 143580).
        compression: ``"auto"`` (bf16 on Ampere+, fp16 on older GPUs, none on CPU), ``"bf16"``,
            ``"fp16"`` or ``"off"``.
        find_unused_parameters: search for parameters that get no gradient (slow; exclusive with
            ``static_graph``).
        namespace: the Lightning package of the Trainer (``"pytorch_lightning"`` builds on its ``DDPStrategy``;
            default ``lightning.pytorch``).
        kwargs: passed on to ``DDPStrategy``.

    Returns:
        ``(strategy, reason)``: the strategy, and one line saying what it does.

    Example::

        strategy, why = ddp_strategy()
        trainer = Trainer(devices=4, strategy=strategy)
    """
    if compression not in ("auto", "off", "bf16", "fp16"):
        raise SettingError(f"`speedups.ddp.compression` must be auto, off, bf16 or fp16; got {compression!r}.")
    if static_graph and find_unused_parameters:
        raise SettingError(
            "`speedups.ddp.static_graph` and `speedups.ddp.find_unused_parameters` cannot both be true:"
            " a static graph already knows which parameters are unused. Turn one of them off."
        )
    if accelerator in (None, "auto"):
        on_cuda = torch.cuda.is_available()
    else:
        on_cuda = str(accelerator) in ("cuda", "gpu")
    hook, hook_reason = _compression_hook(compression, on_cuda)
    if compression in ("bf16", "fp16") and hook is None:
        rank_zero_warn(f"ddp: {hook_reason}.")
    strategy = for_namespace(SpeedupsDDPStrategy, namespace)(
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
        find_unused_parameters=find_unused_parameters,
        ddp_comm_hook=hook,
        **kwargs,
    )
    parts = ["DDP"]
    if gradient_as_bucket_view:
        parts.append("gradient bucket views")
    if static_graph:
        parts.append("static graph (off when gradients accumulate)")
    return strategy, f"{', '.join(parts)}; {hook_reason}"
