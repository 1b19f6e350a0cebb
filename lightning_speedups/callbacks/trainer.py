"""Trainer-level tips as callbacks: T07 cudnn.benchmark, TF32, T10 effective batch, T01 one-cycle /
cyclic schedules stepped per optimizer step, T06 fused / foreach optimizers, and the start-up summary."""

from __future__ import annotations

import inspect
import math
from typing import Any, Iterable, Literal, Optional, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.types import LRSchedulerConfig
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, on_cuda
from lightning_speedups.functional.debug import batch_shape_signature
from lightning_speedups.functional.precision import resolve_matmul_precision


class CudnnBenchmark(SpeedupCallback):
    """T07: turn on ``torch.backends.cudnn.benchmark`` for fixed input shapes, and restore it after.

    Card:
        What: cuDNN times several convolution algorithms for each new input shape and keeps the
        fastest. Seed tip: A#6 / B#15 ("1.27x to 1.70x forward+backward").
        Expected gain: 5% to 70% on convolution-heavy models with fixed shapes, on GPUs only.
        When it hurts: with shapes that change every batch (variable resolution, variable sequence
        lengths), each new shape is benchmarked again. This callback watches the shapes of the
        first ``watch_steps`` batches and turns benchmarking off again (with a warning) once more than
        ``max_shapes`` distinct shapes have been seen.

    Args:
        mode: ``"auto"`` (on when training on a CUDA device), ``"on"`` or ``"off"``.
        max_shapes: distinct input shapes tolerated before benchmarking is switched back off.
        watch_steps: how many training batches to watch.

    Example::

        trainer = Trainer(accelerator="gpu", callbacks=[CudnnBenchmark()])
    """

    tip = "T07"
    part = "cudnn_benchmark"

    def __init__(self, mode: Literal["auto", "on", "off"] = "auto", max_shapes: int = 4, watch_steps: int = 50) -> None:
        super().__init__()
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"`mode` must be 'auto', 'on' or 'off'; got {mode!r}.")
        if not isinstance(max_shapes, int) or max_shapes < 1:
            raise ValueError(f"`max_shapes` must be a positive integer; got {max_shapes!r}.")
        self.mode = mode
        self.max_shapes = max_shapes
        self.watch_steps = watch_steps
        self._previous: Optional[bool] = None
        self.shapes: set[tuple] = set()

    @override
    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self.mode == "off":
            self.report(False, "off")
            return
        if self.mode == "auto" and not on_cuda(trainer):
            self.report(False, "skipped, cuDNN is only used on CUDA devices")
            return
        self._previous = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        self.report(True, "cudnn.benchmark on (input shapes are watched, restored after the run)")

    @override
    def on_train_batch_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", batch: Any, batch_idx: int) -> None:
        if self._previous is None or trainer.global_step >= self.watch_steps or not torch.backends.cudnn.benchmark:
            return
        self.shapes.add(batch_shape_signature(batch))
        if len(self.shapes) > self.max_shapes:
            torch.backends.cudnn.benchmark = self._previous
            self.report(False, f"turned off again: {len(self.shapes)} distinct input shapes in {batch_idx + 1} batches")
            rank_zero_warn(
                f"cudnn_benchmark: the input shapes changed {len(self.shapes)} times in the first {batch_idx + 1} batches;"
                " cuDNN re-tunes at every new shape, so benchmarking was turned off again. Pad or bucket the"
                " inputs to a few fixed shapes to benefit from it."
            )

    @override
    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self._previous is not None:
            torch.backends.cudnn.benchmark = self._previous
            self._previous = None

    @override
    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "fit")


class MatmulPrecision(SpeedupCallback):
    """TF32: ``torch.set_float32_matmul_precision("high")`` on GPUs with TF32 tensor cores, restored after.

    Card:
        What: fp32 matrix products run on TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate).
        Beyond the seeds, expected by users of the best tools. Expected gain: up to 8x on matmul-bound fp32
        work on Ampere or newer. When it hurts: results that need full fp32 matmul accuracy.

    Args:
        mode: ``"auto"`` (``"high"`` on Ampere or newer GPUs), ``"highest"``, ``"high"`` or ``"medium"``.
    """

    tip = "T05"
    part = "tf32"

    def __init__(self, mode: str = "auto") -> None:
        super().__init__()
        resolve_matmul_precision(mode, "cpu")  # validates the value
        self.mode = mode
        self._previous: Optional[str] = None

    @override
    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        value, reason = resolve_matmul_precision(self.mode, trainer.strategy.root_device.type)
        if value is None:
            self.report(False, f"skipped, {reason}")
            return
        self._previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(value)
        self.report(True, f"float32 matmul precision {value!r}: {reason}")

    @override
    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self._previous is not None:
            torch.set_float32_matmul_precision(self._previous)
            self._previous = None

    @override
    def on_exception(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", exception: BaseException) -> None:
        self.teardown(trainer, pl_module, "fit")


def loader_batch_size(loader: Any) -> Optional[int]:
    """The per-step batch size of a DataLoader (or the first loader of a Lightning CombinedLoader)."""
    if loader is None:
        return None
    flattened = getattr(loader, "flattened", None)
    if flattened:
        loader = flattened[0]
    elif isinstance(loader, dict) and loader:
        loader = next(iter(loader.values()))
    elif isinstance(loader, (list, tuple)) and loader:
        loader = loader[0]
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(size) if size is not None else None


def accumulation_for(effective_batch_size: int, batch_size: int, world_size: int) -> int:
    """``accumulate_grad_batches`` that reaches ``effective_batch_size`` = batch x world x accumulation.

    Raises:
        ValueError: naming ``effective_batch_size`` and the values that would divide, when it does not divide.
    """
    per_step = batch_size * world_size
    if effective_batch_size % per_step:
        lower = max(per_step, effective_batch_size // per_step * per_step)
        raise ValueError(
            f"`speedups.effective_batch_size={effective_batch_size}` is not a multiple of batch size {batch_size}"
            f" x {world_size} process(es) = {per_step}. Use {lower} or {lower + per_step}, or change the batch size."
        )
    return effective_batch_size // per_step


class EffectiveBatchSize(SpeedupCallback):
    """T10: set ``accumulate_grad_batches`` so that batch x devices x nodes x accumulation = a target.

    Card:
        What: gradients of several micro-batches are summed before one optimizer step, simulating a
        large batch that does not fit. Seed tip: A#9 / B#13. Expected gain: the convergence of a big
        batch within the memory of a small one. When it hurts: BatchNorm still sees the micro-batch;
        per-step overhead is paid for every micro-batch.

    Args:
        effective_batch_size: samples per optimizer step across all processes.

    Example::

        trainer = Trainer(devices=2, callbacks=[EffectiveBatchSize(256)])  # loader batch 32 -> accumulate 4
    """

    tip = "T10"
    part = "grad_accumulation"

    def __init__(self, effective_batch_size: int) -> None:
        super().__init__()
        if not isinstance(effective_batch_size, int) or isinstance(effective_batch_size, bool) or effective_batch_size < 1:
            raise ValueError(f"`effective_batch_size` must be a positive integer; got {effective_batch_size!r}.")
        self.effective_batch_size = effective_batch_size

    @override
    def on_fit_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if trainer.train_dataloader is None:
            trainer.fit_loop.setup_data()
        batch_size = loader_batch_size(trainer.train_dataloader)
        if batch_size is None:
            raise ValueError(
                "`speedups.effective_batch_size` needs the train loader's batch size, but the loader has none"
                " (an iterable dataset batching by itself?). Set `trainer.accumulate_grad_batches` instead."
            )
        accumulate = accumulation_for(self.effective_batch_size, batch_size, trainer.world_size)
        if trainer.accumulate_grad_batches not in (1, accumulate):
            raise ValueError(
                f"Both `trainer.accumulate_grad_batches={trainer.accumulate_grad_batches}` and"
                f" `speedups.effective_batch_size={self.effective_batch_size}` are set and disagree"
                f" (the latter needs {accumulate}). Remove one of them."
            )
        trainer.accumulate_grad_batches = accumulate
        self.report(
            True,
            f"accumulate_grad_batches={accumulate}: {batch_size} per batch x {trainer.world_size} process(es)"
            f" x {accumulate} = {self.effective_batch_size}",
        )


class _OneCycleThenHold(torch.optim.lr_scheduler.OneCycleLR):
    """OneCycleLR that holds its final learning rate once its planned steps are done.

    A run resumed with a larger ``max_steps`` / ``max_epochs`` trains past the plan; plain OneCycleLR
    would raise "Tried to step N times".
    """

    def step(self, epoch: Optional[int] = None) -> None:  # type: ignore[override]
        if self.last_epoch >= self.total_steps:
            return
        super().step(epoch)


def _has_momentum(optimizer: torch.optim.Optimizer) -> bool:
    defaults = optimizer.defaults
    return "betas" in defaults or defaults.get("momentum", 0) > 0


class LRSchedule(SpeedupCallback):
    """T01: a one-cycle or cyclic learning-rate schedule with no hand-written ``total_steps``.

    The schedule is built when training starts, from ``trainer.estimated_stepping_batches`` (which
    counts accumulation, devices, ``max_steps`` and ``limit_train_batches``) and stepped once per
    optimizer step, never per epoch. The peak learning rate defaults to the one the optimizer was
    built with. The schedule's position survives a resume through this callback's state.

    Card:
        What: Smith's one-cycle ("super-convergence") and cyclical schedules. Seed tip: A#1.
        Expected gain: fewer epochs to the same accuracy; large in the best case, none in others.
        When it hurts: a one-cycle schedule stepped per epoch (the plain LightningCLI
        ``--lr_scheduler OneCycleLR`` trap) barely moves; this callback steps per optimizer step.

    Args:
        name: ``"onecycle"`` or ``"cyclic"``.
        max_lr: peak learning rate (one value for all parameter groups); default: each group's lr.
        pct_start: one-cycle: share of the steps spent warming up.
        div_factor: one-cycle: initial lr = max_lr / div_factor.
        final_div_factor: one-cycle: final lr = initial lr / final_div_factor.
        anneal_strategy: one-cycle: ``"cos"`` or ``"linear"``.
        base_lr: cyclic: lowest lr; default max_lr / div_factor.
        cycles: cyclic: number of full cycles over the run (sets ``step_size_up``).
        mode: cyclic: ``"triangular"``, ``"triangular2"`` or ``"exp_range"``.

    Example::

        trainer = Trainer(max_epochs=10, callbacks=[LRSchedule("onecycle")])
    """

    tip = "T01"
    part = "lr_schedule"

    def __init__(
        self,
        name: Literal["onecycle", "cyclic"] = "onecycle",
        max_lr: Optional[float] = None,
        pct_start: float = 0.25,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        base_lr: Optional[float] = None,
        cycles: int = 2,
        mode: Literal["triangular", "triangular2", "exp_range"] = "triangular",
    ) -> None:
        super().__init__()
        if name not in ("onecycle", "cyclic"):
            raise ValueError(f"`name` must be 'onecycle' or 'cyclic'; got {name!r}.")
        if max_lr is not None and max_lr <= 0:
            raise ValueError(f"`max_lr` must be positive or None (the optimizer's lr); got {max_lr!r}.")
        if not 0.0 < pct_start < 1.0:
            raise ValueError(f"`pct_start` must be between 0 and 1; got {pct_start!r}.")
        if not isinstance(cycles, int) or cycles < 1:
            raise ValueError(f"`cycles` must be a positive integer; got {cycles!r}.")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"`anneal_strategy` must be 'cos' or 'linear'; got {anneal_strategy!r}.")
        if mode not in ("triangular", "triangular2", "exp_range"):
            raise ValueError(f"`mode` must be 'triangular', 'triangular2' or 'exp_range'; got {mode!r}.")
        self.name = name
        self.max_lr = max_lr
        self.pct_start = pct_start
        self.div_factor = div_factor
        self.final_div_factor = final_div_factor
        self.anneal_strategy = anneal_strategy
        self.base_lr = base_lr
        self.cycles = cycles
        self.mode = mode
        self.scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._peaks: Optional[list[float]] = None
        self._total_steps: Optional[int] = None
        self._pending_state: Optional[dict[str, Any]] = None

    @override
    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage == "fit":
            self.report(True, f"{self.name} schedule, stepped per optimizer step (total steps from the trainer)")

    @override
    def on_fit_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        # Trap T01: an existing one-cycle / cyclic scheduler stepped per epoch.
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            if isinstance(sched, (torch.optim.lr_scheduler.OneCycleLR, torch.optim.lr_scheduler.CyclicLR)) and config.interval != "step":
                rank_zero_warn(
                    f"lr_schedule: {type(sched).__name__} is stepped once per epoch (interval='{config.interval}');"
                    " a one-cycle/cyclic schedule is meant to step per optimizer step. Return"
                    " {'scheduler': ..., 'interval': 'step'} from configure_optimizers, or use speedups.lr_schedule."
                )

    @override
    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if not trainer.optimizers:
            self.report(False, "skipped, the model has no optimizer")
            return
        optimizer = trainer.optimizers[0]
        if any(c.scheduler.optimizer is optimizer for c in trainer.lr_scheduler_configs):
            self.report(False, "skipped, configure_optimizers already returns a scheduler for this optimizer")
            rank_zero_warn("lr_schedule: the model already schedules its optimizer's learning rate; not adding another.")
            return
        total = trainer.estimated_stepping_batches
        if not math.isfinite(total):
            raise ValueError(
                "`speedups.lr_schedule` needs a finite number of steps: set `trainer.max_steps` or"
                " `trainer.max_epochs`, or use a loader with a length."
            )
        state = self._pending_state
        self._total_steps = int(state["total_steps"]) if state else max(int(total), 1)
        if state and int(total) != self._total_steps:
            rank_zero_warn(
                f"lr_schedule: the resumed schedule was planned for {self._total_steps} optimizer steps but this run"
                f" has {int(total)}; it keeps the original plan"
                + (" and holds the final learning rate after it ends." if total > self._total_steps else ".")
            )
        self._peaks = list(state["peaks"]) if state else [
            self.max_lr if self.max_lr is not None else group["lr"] for group in optimizer.param_groups
        ]
        current = [group["lr"] for group in optimizer.param_groups]
        self.scheduler = self._build(optimizer)
        if state:
            self.scheduler.load_state_dict(state["scheduler"])
            for group, lr in zip(optimizer.param_groups, current):
                group["lr"] = lr  # the constructor reset them to the schedule's start
            self._pending_state = None
        trainer.strategy.lr_scheduler_configs.append(
            LRSchedulerConfig(self.scheduler, name=f"speedups-{self.name}", interval="step", frequency=1)
        )
        peak = ", ".join(f"{p:.3g}" for p in self._peaks)
        kind = "OneCycleLR" if self.name == "onecycle" else "CyclicLR"
        self.report(True, f"{kind} over {self._total_steps} optimizer steps, peak lr {peak}")

    def _build(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        assert self._peaks is not None and self._total_steps is not None
        momentum = _has_momentum(optimizer)
        if self.name == "onecycle":
            return _OneCycleThenHold(
                optimizer,
                max_lr=self._peaks,
                total_steps=self._total_steps,
                pct_start=self.pct_start,
                anneal_strategy=self.anneal_strategy,
                div_factor=self.div_factor,
                final_div_factor=self.final_div_factor,
                cycle_momentum=momentum,
            )
        base = [self.base_lr if self.base_lr is not None else p / self.div_factor for p in self._peaks]
        step_size_up = max(1, self._total_steps // (2 * self.cycles))
        return torch.optim.lr_scheduler.CyclicLR(
            optimizer,
            base_lr=base,
            max_lr=self._peaks,
            step_size_up=step_size_up,
            mode=self.mode,
            cycle_momentum="momentum" in optimizer.defaults and momentum,
        )

    @override
    def state_dict(self) -> dict[str, Any]:
        if self.scheduler is None:
            return {}
        return {"scheduler": self.scheduler.state_dict(), "peaks": self._peaks, "total_steps": self._total_steps}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_state = dict(state_dict) if state_dict else None

    @override
    def teardown(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if self.scheduler is not None:
            configs = trainer.strategy.lr_scheduler_configs
            trainer.strategy.lr_scheduler_configs = [c for c in configs if c.scheduler is not self.scheduler]


def fused_devices() -> tuple[str, ...]:
    """Device types that have fused optimizer kernels in this torch build."""
    try:
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


class FusedOptimizer(SpeedupCallback):
    """T06: switch the model's optimizers to their fused (or foreach) implementation.

    Fused kernels update all parameters in one kernel per step instead of several per parameter.
    The switch is made in place when training starts (after ``configure_optimizers`` and after a
    checkpoint's optimizer state is restored), so schedulers built on the optimizer keep working and
    the optimizer state is untouched.

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
    def _clips_gradients(trainer: "pl.Trainer") -> bool:
        if trainer.gradient_clip_val:
            return True
        return any(getattr(cb, "needs_unscaled_grads", False) for cb in trainer.callbacks)

    @override
    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
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
            if choice == "fused" and scaler is not None:
                # what the constructor does for fused=True: the GradScaler then hands its scale to the
                # step. Without a scaler (fp32, bf16) it must stay off: Lightning's mixed-precision
                # plugin refuses to clip gradients of an optimizer that says it unscales internally.
                optimizer._step_supports_amp_scaling = True
            self.changed.append(f"{type(optimizer).__name__}->{choice}")
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
            optimizer_accepts(optimizer, "fused") and len(devices) == 1 and devices <= set(fused_devices()) and floating
            and not optimizer.defaults.get("differentiable", False)
        )
        if self.mode != "foreach" and can_fuse and not avoid_fused:
            return "fused"
        if self.mode == "fused" and not can_fuse and not avoid_fused:
            rank_zero_warn(f"optimizer: {type(optimizer).__name__} has no fused implementation for these parameters; using foreach.")
        return "foreach" if optimizer_accepts(optimizer, "foreach") else None


class SpeedupsSummary(SpeedupCallback):
    """Prints which speed-ups are active and which were skipped, and why, once per run (rank zero).

    Args:
        notes: extra lines decided before the Trainer existed (e.g. ``precision: bf16-mixed, ...``).
    """

    part = "summary"

    def __init__(self, notes: Sequence[tuple[str, bool, str]] = ()) -> None:
        super().__init__()
        self.notes = list(notes)
        self.lines: list[str] = []

    def summarize(self, trainer: "pl.Trainer") -> list[str]:
        rows = [(name, active, reason) for name, active, reason in self.notes]
        for cb in trainer.callbacks:
            if isinstance(cb, SpeedupCallback) and cb is not self and cb.status is not None:
                state, reason = cb.status
                tip = f" ({cb.tip})" if cb.tip else ""
                rows.append((f"{cb.part}{tip}", state == "active", reason))
        width = max((len(name) for name, _, _ in rows), default=0)
        return [f"  {'on ' if active else 'off'}  {name:<{width}}  {reason}" for name, active, reason in rows]

    def _print(self, trainer: "pl.Trainer") -> None:
        if self.lines:
            return
        self.lines = self.summarize(trainer)
        if self.lines:
            rank_zero_info("lightning_speedups:\n" + "\n".join(self.lines))

    @override
    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._print(trainer)

    @override
    def on_validation_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        if not trainer.training and trainer.state.fn != "fit":
            self._print(trainer)

    @override
    def on_test_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._print(trainer)

    @override
    def on_predict_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._print(trainer)
