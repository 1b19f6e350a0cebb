"""T06: fused / foreach optimizer implementations, switched in place."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from typing import Any, Literal, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, probe_pending
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.probe import Axis, Option
from lightning_speedups.trainer.attributes import set_at_init


def fused_devices() -> tuple[str, ...]:
    """Device types that have fused optimizer kernels in this torch build."""
    try:
        # private: torch's own list of devices with fused optimizer kernels; there is no public query
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        return tuple(_get_fused_kernels_supported_devices())
    except (ImportError, AttributeError):  # pragma: no cover - older torch: CUDA only
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


def implementation_of(optimizer: torch.optim.Optimizer) -> str:
    """The implementation an optimizer's step runs: ``"fused"``, ``"foreach"`` or ``"for-loop"`` (torch's
    default where the flags are unset: foreach when every parameter is on CUDA / XPU, else the for-loop)."""
    groups = optimizer.param_groups
    if any(g.get("fused") for g in groups):
        return "fused"
    if any(g.get("foreach") for g in groups):
        return "foreach"
    devices = {p.device.type for p in _params(optimizer)}
    default_foreach = all(g.get("foreach") is None for g in groups) and optimizer_accepts(optimizer, "foreach")
    return "foreach" if default_foreach and devices and devices <= {"cuda", "xpu", "mtia"} else "for-loop"


def switch_implementation(optimizer: torch.optim.Optimizer, choice: str, scaler: bool) -> int:
    """Switch ``optimizer`` in place to ``choice`` (``"fused"``, ``"foreach"`` or ``"for-loop"``); returns how
    many ``step`` tensors moved (:func:`place_step_tensors`). ``scaler``: a GradScaler runs (fp16 mixed)."""
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
    # (an instance attribute the Optimizer class does not declare: set in __dict__, as _restore_flags does)
    optimizer.__dict__["_step_supports_amp_scaling"] = choice == "fused" and scaler
    return place_step_tensors(optimizer)


def _flags(optimizer: torch.optim.Optimizer) -> Any:
    """What :func:`switch_implementation` changes, to put back with :func:`_restore_flags`."""
    groups = [{k: g[k] for k in ("fused", "foreach") if k in g} for g in optimizer.param_groups]
    defaults = {k: optimizer.defaults[k] for k in ("fused", "foreach") if k in optimizer.defaults}
    return groups, defaults, optimizer.__dict__.get("_step_supports_amp_scaling", _UNSET)


def _restore_flags(optimizer: torch.optim.Optimizer, saved: Any) -> None:
    groups, defaults, amp = saved
    for group, flags in zip(optimizer.param_groups, groups):
        for key in ("fused", "foreach"):
            if key in flags:
                group[key] = flags[key]
            else:
                group.pop(key, None)
    for key in ("fused", "foreach"):
        if key in defaults:
            optimizer.defaults[key] = defaults[key]
        else:
            optimizer.defaults.pop(key, None)
    if amp is _UNSET:
        optimizer.__dict__.pop("_step_supports_amp_scaling", None)
    else:
        optimizer.__dict__["_step_supports_amp_scaling"] = amp


_UNSET = object()


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

    What it does: ``fused=True`` / ``foreach=True`` in torch's Adam, AdamW, SGD, Adagrad (fused) and the other
    built-in optimizers (foreach).

    Card: tip T06 ``optimizer``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        mode: ``"auto"``, ``"fused"`` or ``"foreach"``. With the start-up probe
            (:class:`~lightning_speedups.callbacks.AutoProbe`) in the callbacks, ``auto`` times every
            implementation torch has for the optimizer (for-loop, foreach, fused) on the model at the
            first batch and keeps the fastest beyond the noise (or the one it has); without it, fused
            where the class and device support it, else foreach.
    """

    tip = "T06"
    part = "optimizer"

    def __init__(self, mode: Literal["auto", "fused", "foreach"] = "auto") -> None:
        super().__init__()
        if mode not in ("auto", "fused", "foreach"):
            raise SettingError(f"`mode` must be 'auto', 'fused' or 'foreach'; got {mode!r}.")
        self.mode = mode
        self.changed: list[str] = []
        self._awaiting = False
        self._lines: list[str] = []

    @staticmethod
    def _clips_gradients(trainer: pl.Trainer) -> bool:
        if trainer.gradient_clip_val:
            return True
        return any(getattr(cb, "needs_unscaled_grads", False) for cb in set_at_init(trainer).callbacks)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the checkpoint's optimizer state was restored (it would overwrite the flags).
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        avoid_fused = scaler is not None and self._clips_gradients(trainer)
        self.changed = []
        self._awaiting = self.mode == "auto" and probe_pending(trainer)
        if self._awaiting:
            self.report(False, "auto: waits for the start-up probe at the first batch")
            return
        for optimizer in trainer.optimizers:
            choice = self._choose(optimizer, avoid_fused)
            if choice is None:
                continue
            moved = switch_implementation(optimizer, choice, scaler is not None)
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

    @property
    def uses_probe(self) -> bool:
        return self.mode == "auto"

    @override
    def probe_axes(self, trainer: Any, pl_module: Any) -> list[Axis]:
        if not self._awaiting:
            return []
        self._awaiting = False
        scaler = getattr(trainer.precision_plugin, "scaler", None) is not None
        avoid_fused = scaler and self._clips_gradients(trainer)
        self._lines = []
        axes = []
        for optimizer in trainer.optimizers:
            keep = implementation_of(optimizer)
            options = [
                self._option(optimizer, choice, scaler)
                for choice in self._implementations(optimizer, avoid_fused)
                if choice != keep
            ]
            name = f"optimizer {type(optimizer).__name__}"
            if options:
                axes.append(Axis(name, keep, options, functools.partial(self._decide, optimizer, keep, scaler)))
            else:
                self._lines.append(f"{type(optimizer).__name__} stays {keep}: no other implementation here")
        if not axes:
            self.report(False, "; ".join(self._lines) or "skipped, no optimizer")
        return axes

    def _option(self, optimizer: torch.optim.Optimizer, choice: str, scaler: bool) -> Option:
        saved: list[Any] = []

        def apply() -> None:
            saved.append(_flags(optimizer))
            switch_implementation(optimizer, choice, scaler)

        def undo() -> None:
            _restore_flags(optimizer, saved.pop())
            place_step_tensors(optimizer)

        return Option(choice, apply, undo)

    def _implementations(self, optimizer: torch.optim.Optimizer, avoid_fused: bool) -> list[str]:
        """The implementations torch has for this optimizer and its parameters (``[]``: not a torch built-in)."""
        params = list(_params(optimizer))
        if (
            not params
            or type(optimizer).__module__.split(".")[0] != "torch"
            or not optimizer_accepts(optimizer, "foreach")
        ):
            return []
        out = ["for-loop", "foreach"]
        if self._choose(optimizer, avoid_fused, quiet=True) == "fused":
            out.append("fused")
        return out

    def _decide(self, optimizer: torch.optim.Optimizer, keep: str, scaler: bool, option: Any, reason: str) -> None:
        name = type(optimizer).__name__
        if option is None:
            self._lines.append(f"{name} {reason}")
        else:
            moved = switch_implementation(optimizer, option.label, scaler)
            self.changed.append(f"{name}->{option.label}")
            self._lines.append(f"{name}->{reason}" + (f" ({moved} step tensors moved)" if moved else ""))
        self.report(bool(self.changed), "; ".join(self._lines))

    def _choose(self, optimizer: torch.optim.Optimizer, avoid_fused: bool, quiet: bool = False) -> Optional[str]:
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
        if self.mode == "fused" and not can_fuse and not avoid_fused and not quiet:
            rank_zero_warn(
                f"optimizer: {type(optimizer).__name__} has no fused implementation for these parameters; using foreach."
            )
        return "foreach" if optimizer_accepts(optimizer, "foreach") else None
