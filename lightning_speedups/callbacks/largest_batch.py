"""T04 largest batch that fits, with learning-rate scaling, as a callback."""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.parsing import (
    lightning_getattr,
    lightning_hasattr,
    lightning_setattr,
)
from lightning.pytorch.utilities.rank_zero import rank_zero_debug
from lightning.pytorch.utilities.seed import isolate_rng
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import BadInput, SettingError, SettingTypeError
from lightning_speedups.functional.batch_size import (
    find_largest_batch_size,
    largest_divisor_batch,
    lr_scale_factor,
    round_down,
)
from lightning_speedups.functional.compile import eager_while
from lightning_speedups.functional.memory import (
    MemoryBudget,
    format_bytes,
    is_out_of_memory,
    parse_memory_budget,
    release_device_memory,
    total_memory_bytes,
)
from lightning_speedups.trainer.attributes import set_at_init
from lightning_speedups.trainer.batch_trials import (
    measure_trial_peak,
    multi_process_error,
    scale_trainer_lrs,
    too_small_error,
    train_set_length,
)
from lightning_speedups.trainer.internals import data_source
from lightning_speedups.trainer.namespace import is_lightning
from lightning_speedups.trainer.refusal import SetupRefused
from lightning_speedups.trainer.trial_steps import drop_loaders, fit_loop_trials

_LR_RULES = ("linear", "sqrt", None)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class LargestBatch(SpeedupCallback):
    """T04: train with the largest batch that fits, and scale the learning rate to match.

    What it does: when ``fit`` starts, runs a few real training steps at growing batch sizes (multiples of
    ``multiple``: doubling, then bisection), keeps the largest that fits, sets it where Lightning's
    ``BatchSizeFinder`` does (the ``batch_size`` attribute of the model, its ``hparams`` or the datamodule,
    through ``lightning_setattr``), rebuilds the loaders, and scales every optimizer group's learning rate by
    the linear rule (or the square root) relative to ``base_batch_size``. Model, optimizer and scheduler
    states and the random number generators are put back after the trials, so training starts as if the batch
    size had been set by hand.

    Card: tip T04 ``max-batch``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Fits means: on a CUDA device without ``memory_budget``, no out-of-memory error (then the size
    is reduced by ``margin``); with a ``memory_budget`` (required on the CPU, where nothing runs out
    of memory in time), a peak memory of the trial steps at most ``(1 - margin) * memory_budget``.
    The peak is ``torch.cuda.max_memory_allocated`` on CUDA and, elsewhere, the peak bytes of live
    tensors counted by :class:`~lightning_speedups.functional.memory.LiveTensorMemory` (parameters,
    buffers, gradients, optimizer state, activations, batch; see its module for what it cannot see).
    A CPU trial stops as soon as it goes over the budget, so a search never takes more memory than
    that. Trials run Lightning's own fit loop for ``steps_per_trial`` optimizer steps, with loggers,
    callbacks and validation off (as ``BatchSizeFinder`` does), with ``accumulate_grad_batches`` 2
    when the run accumulates (gradients then stay alive during the next forward).

    Learning rates: ``factor = new effective batch / base_batch_size`` (``"linear"``) or its square
    root (``"sqrt"``), the effective batch being ``batch_size x accumulate_grad_batches x
    world_size``. Scaled: every group's ``lr`` (and ``initial_lr``, ``OneCycleLR``'s ``max_lr`` and
    ``min_lr``), schedulers' ``base_lrs``, ``CyclicLR.max_lrs``, ``ReduceLROnPlateau.min_lrs``,
    cosine ``eta_min``. With ``scale_schedule_lengths``, schedulers stepped every optimizer step
    (``interval="step"``) keep their length in samples: ``OneCycleLR.total_steps``, warm-up
    ``total_iters``, ``T_max``, ``step_size``, milestones and cyclic periods are multiplied by
    ``old effective batch / new effective batch``. Epoch-interval schedulers keep their lengths.

    Resuming: the chosen batch size, accumulation and learning rates are in the callback's
    ``state_dict``; a run resumed from a checkpoint sets them again and does not search (the
    optimizer and scheduler states in the checkpoint already hold the scaled rates).

    Multi-process runs: the trials would need every process in lockstep, so the callback does not
    search there. Run the search once single-process (``devices=1``, e.g. with ``max_steps=1``),
    then pass the batch size it prints as ``LargestBatch(batch_size=...)``, which applies it and
    scales the learning rates on every rank without a search; resuming from a checkpoint of a run
    that searched works too. Otherwise the callback raises when ``fit`` starts, on every rank at the
    same point and before any collective call, so nothing hangs. Strategies that restore checkpoints
    after setup (FSDP, DeepSpeed) are treated the same way (no search; ``batch_size=`` or a resumed
    state).

    Args:
        memory_budget: bytes (``int`` or ``"2GiB"`` / ``"512MB"``) or a fraction of the memory
            (``0.25``, ``"0.25"``, ``"25%"``) of the machine's RAM (CPU) or the GPU's memory.
            Required on the CPU; ``None`` on CUDA searches until out of memory.
        multiple: the batch size is a multiple of this (8 suits tensor cores).
        base_batch_size: the effective batch the configured learning rates are meant for; ``None``
            for the effective batch before the search.
        lr_rule: ``"linear"``, ``"sqrt"`` or ``None`` (learning rates unchanged).
        keep_effective_batch: hold ``batch x accumulate_grad_batches x world_size`` constant: the
            batch may only grow up to the effective batch, to a size that divides it, and
            ``accumulate_grad_batches`` shrinks to match (the learning rates then stay unless
            ``base_batch_size`` says otherwise).
        max_batch_size: the largest batch to try (also capped at the training set's length).
        margin: safety margin in ``[0, 1)``: the share of ``memory_budget`` kept free, or (without a
            budget, on CUDA) the share taken off the largest batch that ran.
        batch_size: skip the search and use this batch size (e.g. one found single-process, for a
            multi-process run); learning rates are scaled as after a search.
        steps_per_trial: optimizer steps per trial (2 sees the optimizer state allocated).
        max_trials: the most trials.
        batch_arg_name: the attribute holding the batch size, as for ``BatchSizeFinder``.
        scale_schedule_lengths: rescale lengths of step-interval schedulers (see above).

    Example::

        # the module reads self.batch_size in train_dataloader(); lr 0.1 was tuned for batch 256
        trainer = Trainer(callbacks=[LargestBatch(memory_budget="4GiB", base_batch_size=256)])
        trainer.fit(model)   # prints e.g. "largest_batch: active, batch 32 -> 512, lr x2 (linear) ..."
    """

    tip = "T04"
    part = "largest_batch"

    def __init__(
        self,
        memory_budget: Optional[MemoryBudget] = None,
        multiple: int = 8,
        base_batch_size: Optional[int] = None,
        lr_rule: Optional[str] = "linear",
        keep_effective_batch: bool = False,
        max_batch_size: Optional[int] = None,
        margin: float = 0.1,
        batch_size: Optional[int] = None,
        steps_per_trial: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        scale_schedule_lengths: bool = True,
    ) -> None:
        super().__init__()
        if memory_budget is not None:
            # syntax and sign now; the size against the device's memory in ``setup``
            parse_memory_budget(memory_budget, total=1 << 62)
        if not _is_int(multiple) or multiple < 1:
            raise SettingError(
                f"`multiple` must be an int >= 1 (8 suits tensor cores, 1 allows any size); got {multiple!r}."
            )
        if base_batch_size is not None and (not _is_int(base_batch_size) or base_batch_size < 1):
            raise SettingError(
                "`base_batch_size` must be a positive int, the effective batch your learning rates were tuned for, "
                f"or None to use the effective batch before the search; got {base_batch_size!r}."
            )
        if lr_rule not in _LR_RULES:
            raise SettingError(
                f"`lr_rule` must be 'linear', 'sqrt' or None (learning rates unchanged); got {lr_rule!r}."
            )
        if not isinstance(keep_effective_batch, bool):
            raise SettingTypeError(f"`keep_effective_batch` must be True or False; got {keep_effective_batch!r}.")
        if max_batch_size is not None and (not _is_int(max_batch_size) or max_batch_size < multiple):
            raise SettingError(
                f"`max_batch_size` must be None or an int >= `multiple` ({multiple}); got {max_batch_size!r}."
            )
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise SettingError(f"`margin` must be a number in [0, 1), e.g. 0.1 to keep 10% free; got {margin!r}.")
        if batch_size is not None and (not _is_int(batch_size) or batch_size < 1):
            raise SettingError(f"`batch_size` must be None (search) or a positive int (use it); got {batch_size!r}.")
        if not _is_int(steps_per_trial) or steps_per_trial < 1:
            raise SettingError(f"`steps_per_trial` must be an int >= 1; got {steps_per_trial!r}.")
        if not _is_int(max_trials) or max_trials < 1:
            raise SettingError(f"`max_trials` must be an int >= 1; got {max_trials!r}.")
        if not isinstance(batch_arg_name, str) or not batch_arg_name:
            raise SettingTypeError(
                f"`batch_arg_name` must be the name of the batch size attribute; got {batch_arg_name!r}."
            )
        self.memory_budget = memory_budget
        self.multiple = multiple
        self.base_batch_size = base_batch_size
        self.lr_rule = lr_rule
        self.keep_effective_batch = keep_effective_batch
        self.max_batch_size = max_batch_size
        self.margin = float(margin)
        self.batch_size = batch_size
        self.steps_per_trial = steps_per_trial
        self.max_trials = max_trials
        self.batch_arg_name = batch_arg_name
        self.scale_schedule_lengths = scale_schedule_lengths

        self.budget_bytes: Optional[int] = None
        self.trials: list[tuple[int, Optional[int]]] = []  # (batch size, peak bytes or None if over / OOM)
        self._state: dict[str, Any] = {}
        self._restored = False  # ``_state`` came from a checkpoint
        self._skip: Optional[str] = None
        self._applied = False
        self._deferred = False

    # ------------------------------------------------------------------ checks
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._skip = None
        self._applied = False
        self._deferred = False
        self.budget_bytes = None
        if stage != "fit":
            self._skip = f"skipped, only used in fit (stage {stage!r})"
            return
        if set_at_init(trainer).fast_dev_run:
            self._skip = "skipped, fast_dev_run is on"
            return
        if not lightning_hasattr(pl_module, self.batch_arg_name):
            self._skip_with_warning(
                f"no `{self.batch_arg_name}` attribute on the model, its hparams or the datamodule. Store the batch "
                f"size there and read it in `train_dataloader()` (as for Lightning's BatchSizeFinder)."
            )
            return
        source = data_source(trainer.fit_loop)
        if source is not None and hasattr(source, "is_module") and not source.is_module():
            self._skip_with_warning(
                "the train dataloaders were passed to `fit()` directly, so their batch size cannot change. Build them "
                f"in `train_dataloader()` of the LightningModule or a LightningDataModule from `{self.batch_arg_name}`."
            )
            return
        callbacks = set_at_init(trainer).callbacks
        if self.keep_effective_batch and any(is_lightning(c, "GradientAccumulationScheduler") for c in callbacks):
            raise SetupRefused(
                "LargestBatch(keep_effective_batch=True) sets `accumulate_grad_batches`, which a "
                "GradientAccumulationScheduler callback also changes; remove one of them."
            )
        device = trainer.strategy.root_device
        if self.memory_budget is None:
            if device.type != "cuda" and self.batch_size is None:
                self._skip_with_warning(
                    f"on a {device.type.upper()} nothing runs out of memory in time, so a `memory_budget` is needed, "
                    "e.g. LargestBatch(memory_budget='4GiB') or memory_budget=0.25 (a quarter of the RAM)."
                )
                return
        else:
            total = total_memory_bytes(device)
            self.budget_bytes = parse_memory_budget(self.memory_budget, total=total)

    def _skip_with_warning(self, why: str) -> None:
        self._skip = f"skipped, {why}"
        rank_zero_warn(f"LargestBatch is off: {why}", category=PossibleUserWarning)
        self.report(False, self._skip.split(". ")[0])

    # ------------------------------------------------------------------ main
    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._skip is not None:
            self.report(False, self._skip)
            return
        if self._state and self._restored:
            self._apply_restored(trainer, pl_module)
            return
        if self._state:  # the same callback in a second fit: keep its batch, scale the fresh optimizers again
            st = self._state
            self._finish(
                trainer,
                old_batch=int(st["previous_batch_size"]),
                old_accumulate=int(st["previous_accumulate_grad_batches"]),
                base=int(st["base_batch_size"]),
                new_batch=int(st["batch_size"]),
                new_accumulate=int(st["accumulate_grad_batches"]),
                how="kept from the previous fit",
            )
            return
        if trainer.ckpt_path is not None:
            rank_zero_warn(
                "LargestBatch: resuming from a checkpoint without LargestBatch state, so the batch size and learning "
                "rates are kept as they are (no search on resume).",
                category=PossibleUserWarning,
            )
            self.report(False, "skipped, resumed from a checkpoint without its state")
            return
        if self.batch_size is None and trainer.strategy.restore_checkpoint_after_setup:
            # FSDP / DeepSpeed load checkpoints (and this callback's state) after this hook: decided in on_train_start
            self._deferred = True
            return
        if self.batch_size is None and trainer.world_size > 1:
            raise multi_process_error(trainer)

        # whatever the user stores there (checked to exist in setup); Lightning types the getter Optional[Any]
        current: Any = lightning_getattr(pl_module, self.batch_arg_name)
        old_batch = int(current)
        old_accumulate = int(trainer.accumulate_grad_batches)
        world = int(trainer.world_size)
        old_effective = old_batch * old_accumulate * world
        base = self.base_batch_size or old_effective
        per_process = old_batch * old_accumulate  # batch x accumulation kept constant with keep_effective_batch
        if self.keep_effective_batch and per_process % self.multiple:
            raise SettingError(
                f"LargestBatch(keep_effective_batch=True): the effective batch {old_effective} (batch {old_batch} x "
                f"accumulate_grad_batches {old_accumulate} x {world} processes) cannot be split into per-process "
                f"batches that are multiples of {self.multiple}: {per_process} is not divisible by {self.multiple}. "
                f"Choose a batch size and accumulation whose product is a multiple of {self.multiple}, or lower "
                "`multiple`."
            )

        if self.batch_size is not None:
            new_batch = self.batch_size
            how = "given"
        else:
            new_batch = self._search(trainer, pl_module, old_accumulate, per_process)
            how = "searched"
        if self.keep_effective_batch:
            fitted = new_batch
            new_batch = largest_divisor_batch(new_batch, per_process, 1 if how == "given" else self.multiple)
            if new_batch == 0 or (how == "given" and new_batch != fitted):
                raise SettingError(
                    f"LargestBatch(keep_effective_batch=True): batch size {fitted} does not divide the per-process "
                    f"effective batch {per_process} (batch {old_batch} x accumulate_grad_batches {old_accumulate}); "
                    f"pass a `batch_size` that divides {per_process}."
                )
            new_accumulate = per_process // new_batch
        else:
            new_accumulate = old_accumulate
        self._finish(trainer, old_batch, old_accumulate, base, new_batch, new_accumulate, how)

    def _finish(
        self,
        trainer: pl.Trainer,
        old_batch: int,
        old_accumulate: int,
        base: int,
        new_batch: int,
        new_accumulate: int,
        how: str,
    ) -> None:
        world = int(trainer.world_size)
        self._apply_batch(trainer, trainer.lightning_module, new_batch, new_accumulate)
        old_effective = old_batch * old_accumulate * world
        new_effective = new_batch * new_accumulate * world
        factor = lr_scale_factor(new_effective, base, self.lr_rule)
        length_factor = old_effective / new_effective if self.scale_schedule_lengths else None
        lrs, changed = scale_trainer_lrs(trainer, factor, length_factor)
        self._state = {
            "batch_size": new_batch,
            "accumulate_grad_batches": new_accumulate,
            "previous_batch_size": old_batch,
            "previous_accumulate_grad_batches": old_accumulate,
            "effective_batch_size": new_effective,
            "base_batch_size": base,
            "lr_rule": self.lr_rule,
            "lr_factor": factor,
            "lrs": lrs,
            "budget_bytes": self.budget_bytes,
            "trials": [list(t) for t in self.trials],
        }
        self._applied = True
        self._restored = False
        acc = f", accumulate {old_accumulate} -> {new_accumulate}" if new_accumulate != old_accumulate else ""
        peak = self._peak_of(new_batch)
        mem = f", peak {format_bytes(peak)} of {format_bytes(self.budget_bytes)}" if peak and self.budget_bytes else ""
        if self.lr_rule:
            lr_text = (
                f"lr x{factor:.4g} ({self.lr_rule}, effective batch {new_effective} vs base {base}) -> "
                + ", ".join(f"{lr:.4g}" for group in lrs for lr in group)
            )
        else:
            lr_text = "learning rates unchanged"
        self.report(True, f"batch {old_batch} -> {new_batch} ({how}{mem}){acc}, {lr_text}", echo=True)
        if changed:
            self.tell(f"schedule lengths x{length_factor:.4g}: {', '.join(changed)}")
        self._log(trainer)

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # strategies that restore checkpoints after setup (FSDP, DeepSpeed) load our state after on_fit_start
        if self._skip is None and self._state and self._restored and not self._applied:
            self._apply_restored(trainer, pl_module)
        elif self._deferred:
            raise multi_process_error(trainer)

    def _apply_restored(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch, accumulate = int(self._state["batch_size"]), int(self._state["accumulate_grad_batches"])
        self._apply_batch(trainer, pl_module, batch, accumulate)
        self._applied = True
        self._restored = False  # a later fit of this callback scales its fresh optimizers again
        self.report(
            True,
            f"batch {batch}, accumulate {accumulate} restored from the checkpoint (no search; learning rates come "
            "from the restored optimizer state)",
            echo=True,
        )

    def _apply_batch(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: int, accumulate: int) -> None:
        lightning_setattr(pl_module, self.batch_arg_name, batch)
        trainer.accumulate_grad_batches = accumulate
        drop_loaders(trainer)

    def _log(self, trainer: pl.Trainer) -> None:
        metrics: dict[str, float] = {
            "largest_batch/batch_size": float(self._state["batch_size"]),
            "largest_batch/accumulate_grad_batches": float(self._state["accumulate_grad_batches"]),
            "largest_batch/lr_factor": float(self._state["lr_factor"]),
        }
        for i, group_lrs in enumerate(self._state["lrs"]):
            for j, lr in enumerate(group_lrs):
                metrics[f"largest_batch/lr_opt{i}_group{j}"] = float(lr)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def _peak_of(self, batch: int) -> Optional[int]:
        for size, peak in self.trials:
            if size == batch and peak is not None:
                return peak
        return None

    # ------------------------------------------------------------------ search
    def _search(self, trainer: pl.Trainer, pl_module: pl.LightningModule, old_accumulate: int, per_process: int) -> int:
        limit = None if self.budget_bytes is None else int(self.budget_bytes * (1 - self.margin))
        cap = self.max_batch_size
        if self.keep_effective_batch:
            cap = per_process if cap is None else min(cap, per_process)
        with isolate_rng():
            dataset_len = train_set_length(trainer)
        if dataset_len is not None:
            cap = dataset_len if cap is None else min(cap, dataset_len)
        if cap is not None and cap < self.multiple:
            raise SettingError(
                f"LargestBatch: the largest allowed batch ({cap}: max_batch_size, training set length or effective "
                f"batch) is below `multiple={self.multiple}`; lower `multiple`."
            )
        self.trials = []
        device = trainer.strategy.root_device
        batch_before: Any = lightning_getattr(pl_module, self.batch_arg_name)
        try:
            # eager trials: compiled modules would recompile at every trial size (see eager_while)
            with fit_loop_trials(trainer, pl_module, max_steps=self.steps_per_trial) as trials, eager_while(pl_module):
                trainer.limit_train_batches = 1.0

                def fits(batch: int) -> bool:
                    accumulate = self._trial_accumulation(batch, old_accumulate, per_process)
                    out_of_memory = False
                    try:
                        peak = self.measure_peak(trainer, pl_module, batch, accumulate, limit)
                    except Exception as ex:  # only out-of-memory errors are swallowed
                        if not is_out_of_memory(ex):
                            raise
                        out_of_memory = True
                    # out of the except block: the exception and its traceback (whose frames hold the
                    # trial's activations) are gone, so the memory can really be given back now
                    trials.rewind()
                    if out_of_memory:
                        self.trials.append((batch, None))
                        release_device_memory(device)
                        return False
                    self.trials.append((batch, peak))
                    return limit is None or peak <= limit

                found, _ = find_largest_batch_size(
                    fits, multiple=self.multiple, max_batch_size=cap, max_trials=self.max_trials
                )
                if found == 0:
                    raise self._too_small_error(trainer, pl_module, old_accumulate, per_process, limit)
        finally:
            lightning_setattr(pl_module, self.batch_arg_name, batch_before)
            # the run's own peak-memory figures start here, not at the largest trial's peak
            release_device_memory(device)
        if limit is None and self.margin > 0:  # out-of-memory search: keep a margin of batch
            found = max(self.multiple, round_down(int(found * (1 - self.margin)), self.multiple))
        tried = ", ".join(f"{b}:{format_bytes(p) if p is not None else 'over'}" for b, p in self.trials)
        self.tell(f"trials {tried}; largest that fits: {found}")
        return found

    def _trial_accumulation(self, batch: int, old_accumulate: int, per_process: int) -> int:
        will_accumulate = batch < per_process if self.keep_effective_batch else old_accumulate > 1
        return 2 if will_accumulate else 1

    def _too_small_error(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        old_accumulate: int,
        per_process: int,
        limit: Optional[int],
    ) -> BadInput:
        peak = None
        if limit is not None:
            try:  # measure once without a limit, to say how much is needed
                accumulate = self._trial_accumulation(self.multiple, old_accumulate, per_process)
                peak = self.measure_peak(trainer, pl_module, self.multiple, accumulate, None)
            except Exception as err:  # the error that follows is the message: the need is only a figure in it
                peak = None
                rank_zero_debug(f"LargestBatch: could not measure the memory one batch needs: {err}")
        return too_small_error(self.memory_budget, self.budget_bytes, limit, self.margin, self.multiple, peak)

    def measure_peak(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch_size: int,
        accumulate_grad_batches: int,
        limit: Optional[int],
    ) -> int:
        """Run ``steps_per_trial`` real training steps at ``batch_size`` and return their peak memory in bytes.

        Subclasses may override this to measure another way (the search only needs a monotone
        peak). It may raise an out-of-memory error (``torch.cuda.OutOfMemoryError`` or
        :class:`~lightning_speedups.functional.memory.MemoryBudgetExceeded` once ``limit`` is
        passed), which counts as "does not fit". Model, optimizer and loop states are restored by the
        caller after each trial.
        """
        return measure_trial_peak(trainer, pl_module, self.batch_arg_name, batch_size, accumulate_grad_batches, limit)

    # ------------------------------------------------------------------ state
    @property
    @override
    def state_key(self) -> str:
        # one per trainer; the same key for subclasses, so a checkpoint resumes whatever measure made it
        return "LargestBatch"

    @override
    def state_dict(self) -> dict[str, Any]:
        return dict(self._state)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("batch_size"):
            self._state = dict(state_dict)
            self._restored = True
            self._applied = False
