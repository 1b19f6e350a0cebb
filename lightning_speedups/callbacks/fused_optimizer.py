"""T06: fused / foreach optimizer implementations, switched in place."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback


def fused_devices() -> tuple[str, ...]:
    """Device types that have fused optimizer kernels in this torch build."""
    try:
        # private: torch's own list of devices with fused optimizer kernels; there is no public query
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        return tuple(_get_fused_kernels_supported_devices())
    except Exception:  # pragma: no cover - older torch
        return ("cuda",)


def optimizer_accepts(optimizer: torch.optim.Optimizer, flag: str) -> bool:
    """Whether the optimizer's class takes ``flag`` (``"fused"`` / ``"foreach"``) in its constructor."""
    try:
        return flag in inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        return False


def _params(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    for group in optimizer.param_groups:
        yield from group["params"]


def place_step_tensors(optimizer: torch.optim.Optimizer) -> int:
    """Put each parameter's ``state["step"]`` where the group's implementation reads it; return how many moved.

    torch keeps ``step`` on the parameter's device (float32) for fused and capturable groups (the
    kernel reads it as a device pointer) and on the CPU otherwise (read as a host number, no sync).
    ``load_state_dict`` places it by the flags at load time, so switching ``fused`` after a
    checkpoint was restored would leave CPU steps under a fused CUDA kernel, or device steps under
    foreach (one device-to-host sync per parameter per step).
    """
    moved = 0
    for group in optimizer.param_groups:
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not isinstance(state, dict):
                continue
            step = state.get("step")
            if not isinstance(step, torch.Tensor):
                continue
            want = p.device if on_device else torch.device("cpu")
            if step.device != want:
                state["step"] = step.to(device=want, dtype=torch.float32 if on_device else step.dtype)
                moved += 1
    return moved


class FusedOptimizer(SpeedupCallback):
    """T06: switch the model's optimizers to their fused (or foreach) implementation.

    Fused kernels update all parameters in one kernel per step instead of several per parameter.
    The switch is made in place when training starts (after ``configure_optimizers`` and after a
    checkpoint's optimizer state is restored), so schedulers built on the optimizer keep working and
    the optimizer state is untouched.

    Restored ``step`` counters move to where the new implementation reads them
    (:func:`place_step_tensors`). Under bf16-mixed or fp32 a fused optimizer, the user's own too,
    has its "unscales internally" flag cleared, so Lightning clips it (Lightning 2.6 refuses
    otherwise, issue 21435).

    Under fp16 mixed precision a fused optimizer unscales gradients inside its own ``step``, so
    Lightning cannot unscale them first and gradient clipping fails ("does not allow for gradient
    clipping"); adaptive clipping would see scaled gradients. In that case the foreach
    implementation is used instead, with a warning that says why.

    Card:
        What: ``fused=True`` / ``foreach=True`` in torch's Adam, AdamW, SGD, Adagrad (fused) and the
        other built-in optimizers (foreach). Seed tip: A#5 ("consider another optimizer").
        Expected gain: 5% to 20% of step time on models with many small parameters, mostly on GPUs.
        When it hurts: custom optimizers (left alone), parameters on several devices.

    Args:
        mode: ``"auto"`` (fused where the class and device support it, else foreach), ``"fused"`` or
            ``"foreach"``.
    """

    tip = "T06"
    part = "optimizer"

    def __init__(self, mode: Literal["auto", "fused", "foreach"] = "auto") -> None:
        super().__init__()
        if mode not in ("auto", "fused", "foreach"):
            raise ValueError(f"`mode` must be 'auto', 'fused' or 'foreach'; got {mode!r}.")
        self.mode = mode
        self.changed: list[str] = []

    @staticmethod
    def _clips_gradients(trainer: pl.Trainer) -> bool:
        if trainer.gradient_clip_val:
            return True
        return any(getattr(cb, "needs_unscaled_grads", False) for cb in trainer.callbacks)  # type: ignore[attr-defined]  # set by Lightning's connectors at init, not declared

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the checkpoint's optimizer state was restored (it would overwrite the flags).
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        avoid_fused = scaler is not None and self._clips_gradients(trainer)
        self.changed = []
        for optimizer in trainer.optimizers:
            choice = self._choose(optimizer, avoid_fused)
            if choice is None:
                continue
            for group in optimizer.param_groups:
                group["fused"], group["foreach"] = choice == "fused", choice == "foreach"
            if "fused" in optimizer.defaults:
                optimizer.defaults["fused"] = choice == "fused"
            optimizer.defaults["foreach"] = choice == "foreach"
            # private flag, no public switch: what the constructor sets for fused=True (the GradScaler then
            # hands its scale to the step). It must follow the switch both ways: on for fused under a
            # scaler; off otherwise. A user's fused=True optimizer switched to foreach keeps it from its
            # constructor, so Lightning's plugin would refuse to clip (and the GradScaler would hand a
            # scale to a foreach step, which refuses it); without a scaler (fp32, bf16-mixed) Lightning
            # 2.6's plugin refuses to clip any optimizer that carries it (Lightning issue 21435), and
            # nothing reads it there.
            # private: torch and Lightning read this flag to know a step unscales itself; there is no public setter
            optimizer._step_supports_amp_scaling = choice == "fused" and scaler is not None  # type: ignore[attr-defined]
            moved = place_step_tensors(optimizer)
            self.changed.append(
                f"{type(optimizer).__name__}->{choice}" + (f" ({moved} step tensors moved)" if moved else "")
            )
        if avoid_fused and self.mode != "foreach":
            rank_zero_warn(
                "optimizer: fp16 mixed precision with gradient clipping: a fused optimizer unscales gradients inside"
                " its step, so Lightning could not clip them; using the foreach implementation instead."
            )
        if self.changed:
            self.report(True, ", ".join(self.changed) + (" (not fused: fp16 + clipping)" if avoid_fused else ""))
        else:
            self.report(False, "skipped, no built-in optimizer with a fused or foreach implementation")

    def _choose(self, optimizer: torch.optim.Optimizer, avoid_fused: bool) -> Optional[str]:
        params = list(_params(optimizer))
        if not params or type(optimizer).__module__.split(".")[0] != "torch":
            return None
        devices = {p.device.type for p in params}
        floating = all(p.is_floating_point() for p in params)
        can_fuse = (
            optimizer_accepts(optimizer, "fused")
            and len(devices) == 1
            and devices <= set(fused_devices())
            and floating
            and not optimizer.defaults.get("differentiable", False)
        )
        if self.mode != "foreach" and can_fuse and not avoid_fused:
            return "fused"
        if self.mode == "fused" and not can_fuse and not avoid_fused:
            rank_zero_warn(
                f"optimizer: {type(optimizer).__name__} has no fused implementation for these parameters; using foreach."
            )
        return "foreach" if optimizer_accepts(optimizer, "foreach") else None
