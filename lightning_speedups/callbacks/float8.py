"""T05 fp8: float8 training of the model's linear layers through torchao, where the GPU has float8 tensor cores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Optional

import lightning.pytorch as pl
from torch import nn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, on_cuda
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.precision import FLOAT8_MIN_CAPABILITY, cuda_device_facts, torchao_float8_available

Recipe = Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"]


def float8_eligible(module: nn.Module, fqn: str) -> bool:
    """Whether a linear layer can take float8 matmuls: both dimensions multiples of 16 (torch._scaled_mm)."""
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def float8_skip_reason(trainer: pl.Trainer) -> Optional[str]:
    """Why float8 training cannot run on this trainer (one line), or ``None`` when it can."""
    if not on_cuda(trainer):
        return "float8 needs a CUDA GPU of compute capability 8.9+"
    name, cap = cuda_device_facts(trainer.strategy.root_device.index)
    if tuple(cap) < FLOAT8_MIN_CAPABILITY:
        return f"{name} (compute capability {cap[0]}.{cap[1]}) has no float8 tensor cores (needs 8.9+)"
    if not torchao_float8_available():
        return "torchao is not installed (pip install torchao)"
    precision = str(trainer.precision)
    if "bf16" not in precision:
        return f"float8 linears compute around bf16; the trainer runs {precision} (use bf16-mixed)"
    return None


class Float8Training(SpeedupCallback):
    """Swap the model's ``nn.Linear`` layers for torchao's float8 linears (``speedups.precision: fp8``).

    What it does: in ``setup`` (before the optimizer exists) :func:`torchao.float8.convert_to_float8_training`
    replaces each eligible ``nn.Linear`` (both dimensions multiples of 16; ``module_filter_fn`` narrows it
    further) with a ``Float8Linear``: its three matrix products (output, input gradient, weight gradient) run
    in float8 with dynamic scaling; parameters stay in their dtype, so checkpoints and optimizers are
    unchanged. Skipped, with a one-line reason, without a GPU of compute capability 8.9+, without torchao, or
    under a precision other than bf16.

    Card: tip T05 ``amp``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        recipe: torchao's recipe name: ``"tensorwise"`` (fastest), ``"rowwise"`` or
            ``"rowwise_with_gw_hp"`` (most accurate).
        module_filter_fn: ``(module, qualified name) -> bool``, on top of the size rule.

    Examples:
        >>> from lightning.pytorch import Trainer
        >>> trainer = Trainer(callbacks=[Float8Training()], logger=False)
    """

    tip = "T05"
    part = "fp8"

    def __init__(
        self, recipe: Recipe = "tensorwise", module_filter_fn: Optional[Callable[[nn.Module, str], bool]] = None
    ) -> None:
        super().__init__()
        if recipe not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
            raise SettingError(f"`recipe` must be 'tensorwise', 'rowwise' or 'rowwise_with_gw_hp'; got {recipe!r}.")
        self.recipe = recipe
        self.module_filter_fn = module_filter_fn
        self.converted: list[str] = []

    def _filter(self, module: nn.Module, fqn: str) -> bool:
        ok = float8_eligible(module, fqn) and (
            self.module_filter_fn is None or bool(self.module_filter_fn(module, fqn))
        )
        if ok:
            self.converted.append(fqn)
        return ok

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        reason = float8_skip_reason(trainer)
        if reason is not None:
            self.report(False, f"skipped, {reason}")
            return
        from torchao.float8 import Float8Linear, Float8LinearConfig, convert_to_float8_training

        if any(isinstance(m, Float8Linear) for m in pl_module.modules()):
            self.report(True, "linears already float8 (idempotent)")
            return
        config = self._config(Float8LinearConfig)
        self.converted = []
        for name, child in list(pl_module.named_children()):  # never the root: it is the LightningModule
            new = convert_to_float8_training(
                child,
                module_filter_fn=lambda m, fqn, _n=name: self._filter(m, f"{_n}.{fqn}" if fqn else _n),
                config=config,
            )
            if new is not child:
                setattr(pl_module, name, new)
        if self.converted:
            self.report(True, f"{len(self.converted)} linears in float8 ({self.recipe} scaling)")
        else:
            self.report(False, "skipped, no nn.Linear with both dimensions multiples of 16")

    def _config(self, config_cls: Any) -> Any:
        make = getattr(config_cls, "from_recipe_name", None)
        if make is not None:
            return make(self.recipe)
        if self.recipe != "tensorwise":  # pragma: no cover - torchao without recipes
            raise RuntimeError(f"this torchao has no float8 recipes; only 'tensorwise' works, got {self.recipe!r}")
        return config_cls()

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"converted": list(self.converted)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.converted = list(state_dict.get("converted", []))


__all__ = ["Float8Training", "float8_eligible", "float8_skip_reason"]
