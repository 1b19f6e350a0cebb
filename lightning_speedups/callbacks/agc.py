"""T15 adaptive gradient clipping (AGC) as a callback, once per optimizer step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional, Union

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.optim import Optimizer
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.agc import adaptive_clip_grad_, agc_parameters

DEFAULT_EXCLUDE = ("fc", "classifier", "head")


class AdaptiveGradientClipping(SpeedupCallback):
    """T15: unit-wise adaptive gradient clipping (AGC, Brock et al., 2021), which no built-in offers.

    What it does: before each optimizer step, every unit's gradient (a row of a weight, an output channel of a
    convolution, a whole bias vector) whose norm exceeds ``clipping`` times the unit's weight norm (at least
    ``eps``) is scaled down to that bound (:func:`~lightning_speedups.functional.agc.adaptive_clip_grad_`).
    Parameters whose names match ``exclude`` (the final classifier, by default modules named ``fc``,
    ``classifier`` or ``head``) are left alone, as in the paper.

    Card: tip T15 ``grad-clipping``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    When it runs: in ``on_before_optimizer_step``. Lightning calls that hook once per optimizer
    step, after the closure (forward and backward of the last accumulated micro-batch) and, under
    ``16-mixed``, after the ``GradScaler`` has unscaled the gradients
    (``MixedPrecision.optimizer_step`` calls ``scaler.unscale_`` before the hook), so the clipping
    sees true gradients; with ``accumulate_grad_batches=k`` it clips the accumulated gradient once
    every ``k`` batches. Lightning's own ``gradient_clip_val`` clipping runs after this hook, so both
    can be combined. Only the parameters of the optimizer being stepped are clipped. Under DDP every
    process clips the same all-reduced gradients. Not meant for FSDP or DeepSpeed, whose flattened,
    sharded parameters have no rows to clip unit by unit.

    Args:
        clipping: the clipping factor (> 0), the largest ratio of a unit's gradient norm to its weight
            norm.
        eps: the smallest weight norm used for a unit (>= 0).
        exclude: glob patterns of parameter / module names not to clip (see
            :func:`~lightning_speedups.functional.agc.agc_parameters`), or ``None`` to clip all.
            When no parameter matches, a warning says so (the paper leaves the final classifier
            unclipped).

    Example::

        trainer = Trainer(callbacks=[AdaptiveGradientClipping(clipping=0.01, exclude=["head"])])
    """

    tip = "T15"
    part = "agc"
    #: tells FusedOptimizer that gradients must be unscaled before the step (fp16: fused cannot)
    needs_unscaled_grads = True

    def __init__(
        self,
        clipping: float = 0.01,
        eps: float = 1e-3,
        exclude: Optional[Union[str, Iterable[str]]] = DEFAULT_EXCLUDE,
    ) -> None:
        super().__init__()
        if isinstance(clipping, bool) or not isinstance(clipping, (int, float)) or not clipping > 0:
            raise SettingError(
                f"`clipping` must be a positive number, the largest gradient-to-weight norm ratio "
                f"(the NFNet paper uses 0.01 at batch 4096); got {clipping!r}."
            )
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
            raise SettingError(f"`eps` must be a number >= 0 (default 1e-3); got {eps!r}.")
        if isinstance(exclude, str):
            exclude = (exclude,)
        if exclude is not None:
            exclude = tuple(exclude)
            if not all(isinstance(p, str) for p in exclude):
                raise SettingTypeError(
                    f"`exclude` must be a list of name patterns such as ['fc', 'head.*'], or None; got {exclude!r}."
                )
        self.clipping = float(clipping)
        self.eps = float(eps)
        self.exclude: Optional[tuple[str, ...]] = exclude
        self._clip_ids: Optional[set[int]] = None
        self.excluded_names: list[str] = []

    def _select(self, pl_module: pl.LightningModule) -> set[int]:
        params, excluded = agc_parameters(pl_module, self.exclude)
        self.excluded_names = excluded
        if self.exclude and not excluded:
            rank_zero_warn(
                f"AdaptiveGradientClipping: no parameter matches exclude={list(self.exclude)}, so every layer is "
                "clipped. The NFNet paper leaves the final classifier unclipped: pass its module name, e.g. "
                "`exclude=['<name of the last Linear>']`, or `exclude=None` to silence this.",
                category=PossibleUserWarning,
            )
        if excluded:
            shown = ", ".join(excluded[:4]) + (", ..." if len(excluded) > 4 else "")
            reason = f"clipping {len(params)} parameters at {self.clipping:g}, excluded {shown}"
        else:
            reason = f"clipping all {len(params)} parameters at {self.clipping:g}"
        self.report(bool(params), reason if params else "skipped, no trainable parameter to clip")
        return {id(p) for p in params}

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # selected again at the first step: other callbacks may still change the model in ``setup``
        self._clip_ids = None

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Optimizer
    ) -> None:
        if self._clip_ids is None:
            self._clip_ids = self._select(pl_module)
        params: list[Any] = [p for group in optimizer.param_groups for p in group["params"] if id(p) in self._clip_ids]
        if params:
            adaptive_clip_grad_(params, clipping=self.clipping, eps=self.eps)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._clip_ids = None
