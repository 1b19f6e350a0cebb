"""Runtime guards: device syncs (T08), debugging tools left on (T14), autograd in evaluation (T17),
changing input shapes under ``cudnn.benchmark`` (T07).

Thin Lightning callbacks over :mod:`lightning_speedups.functional.debug`.

- :class:`SyncGuard` counts (or forbids) device synchronisations inside the training step.
- :class:`DebugToolsCheck` warns about debugging tools left on, with what each costs.
- :class:`DebugMode` turns the useful debugging tools on deliberately (the ``debug`` preset); the
  check stays quiet about what it turned on.
- :class:`NoGradEvalCheck` warns when validation / test / prediction steps build autograd graphs.
- :class:`ShapeWatch` counts distinct input shapes and warns when ``cudnn.benchmark`` re-tunes.

Example:
    >>> from lightning.pytorch import Trainer
    >>> from lightning_speedups.callbacks.guards import DebugToolsCheck, NoGradEvalCheck, SyncGuard
    >>> trainer = Trainer(callbacks=[SyncGuard(), DebugToolsCheck(), NoGradEvalCheck()])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal, Optional, Union

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.callbacks.base import on_cuda as _on_cuda
from lightning_speedups.functional.debug import (
    DEBUG_TOOL_IDS,
    DebugTool,
    EvalGradWatch,
    ShapeTracker,
    SyncSite,
    SyncWatcher,
    find_debug_tools,
    tensors_requiring_grad,
)

__all__ = ["DebugMode", "DebugToolsCheck", "NoGradEvalCheck", "ShapeWatch", "SyncGuard"]

_SYNC_MODES = ("count", "warn", "error")


# ---------------------------------------------------------------------------------------------------
# T08
# ---------------------------------------------------------------------------------------------------


class SyncGuard(SpeedupCallback):
    """Count, report or forbid device synchronisations inside the training step (tip T08 ``no-sync``).

    On CUDA, turns on ``torch.cuda.set_sync_debug_mode("warn")`` from ``on_train_batch_start`` to
    ``on_train_batch_end`` (the forward, backward and optimizer step), catches the warning torch
    emits for each synchronising call (``.item()``, ``.cpu()``, ``print(tensor)``, boolean-mask
    indexing, ``torch.nonzero`` ...) and attributes it from the Python stack: the user's code
    (file:line), the model's backward ops, Lightning itself (progress-bar values, logging, the AMP
    grad scaler, multi-device reduce) or another library. Lightning's own syncs are named as such
    and never blamed on the user. The previous sync-debug mode is back after every step window and
    at teardown. On CPU it reports "skipped, nothing to check on CPU" once and does nothing.

    Card:
        Seed: A#7, B#5 (beware CPU<->GPU transfers). Expected gain: each sync stalls the CPU until
        the GPU queue drains, so the next step's kernels cannot be queued ahead; removing per-step
        syncs matters most for small models and fast GPUs. When it hurts: the watch itself costs a
        Python warning per sync, so use it to find syncs, not in long production runs.

    Args:
        mode: ``"warn"`` (default) warns once per new location in the user's code and prints a
            summary at the end; ``"count"`` only counts (see :attr:`user_syncs`, :attr:`sites`) and
            prints the summary; ``"error"`` raises
            :class:`~lightning_speedups.functional.debug.SyncError` at the first sync in the
            user's code (Lightning's own syncs are still only counted).

    Example:
        >>> guard = SyncGuard(mode="count")
        >>> # trainer = Trainer(accelerator="gpu", callbacks=[guard]); trainer.fit(model)
        >>> guard.user_syncs, guard.lightning_syncs
        (0, 0)
    """

    tip = "T08"
    part = "sync_guard"

    def __init__(self, mode: Literal["count", "warn", "error"] = "warn") -> None:
        super().__init__()
        if mode not in _SYNC_MODES:
            raise ValueError(f"`SyncGuard(mode=...)` must be one of {_SYNC_MODES}, got {mode!r}.")
        self.mode = mode
        self._watcher = SyncWatcher(mode)
        self._enabled = False

    # -- results ------------------------------------------------------------------------------------
    @property
    def watcher(self) -> SyncWatcher:
        return self._watcher

    @property
    def user_syncs(self) -> int:
        """Syncs in the user's code (including the model's backward ops)."""
        return self._watcher.user_syncs

    @property
    def lightning_syncs(self) -> int:
        """Syncs Lightning makes itself (progress bar, logging, AMP scaler, multi-device reduce)."""
        return self._watcher.lightning_syncs

    @property
    def library_syncs(self) -> int:
        """Syncs inside other installed libraries (e.g. torchmetrics), located at the user's call."""
        return self._watcher.library_syncs

    @property
    def debug_syncs(self) -> int:
        """Syncs made by debugging tools (anomaly detection's NaN check in backward, under DebugMode)."""
        return self._watcher.debug_syncs

    @property
    def sites(self) -> Counter[SyncSite]:
        """Count per location (:class:`~lightning_speedups.functional.debug.SyncSite`)."""
        return self._watcher.sites

    @property
    def steps(self) -> int:
        """Training steps watched."""
        return self._watcher.windows

    def summary(self) -> str:
        return self._watcher.summary()

    def findings(self) -> list[dict[str, Any]]:
        return self._watcher.findings()

    # -- hooks --------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not _on_cuda(trainer):
            self._enabled = False
            self.report(False, "skipped, nothing to check on CPU", echo=True)
            return
        self._watcher = SyncWatcher(self.mode)  # fresh counts per fit
        self._watcher.install()
        self._enabled = True
        self.report(True, f"counting device syncs in the training step (mode={self.mode!r})")

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._enabled:
            self._watcher.start()

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._enabled:
            return
        self._watcher.stop()
        new_sites, self._watcher.new_user_sites = self._watcher.new_user_sites, []
        for site in new_sites:
            rank_zero_warn(
                f"SyncGuard: device synchronisation inside the training step at {site.describe()}"
                f" (step {batch_idx}). It stalls the CPU until the GPU catches up. Keep the value on the"
                " device (self.log accepts tensors), or compute it every N steps.",
                category=PossibleUserWarning,
            )

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._enabled:
            return
        self._watcher.stop()
        rank_zero_info(f"SyncGuard: {self._watcher.summary()}")
        self.report(True, f"{self._watcher.total} device syncs in {self.steps} steps, {self.user_syncs} in your code")

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning does not call `teardown` after an exception: restore everything here too
        self._release()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._release()

    def _release(self) -> None:
        self._watcher.uninstall()
        self._enabled = False


# ---------------------------------------------------------------------------------------------------
# T14
# ---------------------------------------------------------------------------------------------------


class DebugMode(SpeedupCallback):
    """Turn the useful debugging tools on deliberately, and off again afterwards (the ``debug`` preset).

    Anomaly detection is switched on when training starts (inside Lightning's own
    ``detect_anomaly`` context, which would otherwise switch it back off), deterministic algorithms
    in ``setup``, and a :class:`SyncGuard` watches the training step. Everything is restored in
    ``teardown`` (and in ``on_exception``: Lightning skips ``teardown`` when a run fails).
    :class:`DebugToolsCheck` does not warn about the tools this callback turned on.

    Card:
        Seed: A#13 (debugging tools on only while debugging). Expected gain: none, this is the
        slow, careful mode: NaN sources reported where they arise, syncs located, reproducible
        kernels. When it hurts: always slower; never leave it in a training preset.

    Args:
        anomaly: turn on autograd anomaly detection during training.
        check_nan: with ``anomaly``, also raise on NaN in backward outputs.
        sync_guard: mode of the inner :class:`SyncGuard` (``"count"``, ``"warn"``, ``"error"``), or
            ``None`` for no sync guard. When the trainer has a :class:`SyncGuard` of its own, that one
            does the job and the inner one stays off (no double reports).
        deterministic: ``True`` or ``"warn"`` turns on ``torch.use_deterministic_algorithms`` and
            ``cudnn.deterministic`` for the run (``"warn"``: warn instead of failing on ops without
            a deterministic implementation).

    Example:
        >>> from lightning.pytorch import Trainer
        >>> trainer = Trainer(callbacks=[DebugMode(anomaly=True, sync_guard="warn"), DebugToolsCheck()])
    """

    tip = "T14"
    part = "debug_mode"

    def __init__(
        self,
        anomaly: bool = True,
        check_nan: bool = True,
        sync_guard: Optional[Literal["count", "warn", "error"]] = "warn",
        deterministic: Union[bool, Literal["warn"]] = False,
    ) -> None:
        super().__init__()
        for name, value in (("anomaly", anomaly), ("check_nan", check_nan)):
            if not isinstance(value, bool):
                raise TypeError(f"`DebugMode({name}=...)` must be a bool, got {value!r}.")
        if sync_guard is not None and sync_guard not in _SYNC_MODES:
            raise ValueError(f"`DebugMode(sync_guard=...)` must be None or one of {_SYNC_MODES}, got {sync_guard!r}.")
        if not (isinstance(deterministic, bool) or deterministic == "warn"):
            raise ValueError(f"`DebugMode(deterministic=...)` must be True, False or 'warn', got {deterministic!r}.")
        self.anomaly = anomaly
        self.check_nan = check_nan
        self.deterministic = deterministic
        self.sync_guard: Optional[SyncGuard] = SyncGuard(sync_guard) if sync_guard is not None else None
        self._guard_on = False
        self._saved: Optional[dict[str, Any]] = None

    @property
    def deliberate_tools(self) -> frozenset[str]:
        """Ids of :func:`~lightning_speedups.functional.debug.find_debug_tools` this callback turns on."""
        ids = set()
        if self.anomaly:
            ids.add("anomaly_detection")
        if self.sync_guard is not None:
            ids.add("sync_debug_mode")
        if self.deterministic:
            ids.update(("deterministic_algorithms", "cudnn_deterministic"))
        return frozenset(ids)

    def _save(self) -> None:
        if self._saved is not None:
            return
        self._saved = {
            "anomaly": torch.is_anomaly_enabled(),
            "check_nan": torch.is_anomaly_check_nan_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
        }

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._save()
        if self.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=self.deterministic == "warn")
            torch.backends.cudnn.deterministic = True
        # a SyncGuard of the trainer's own (e.g. the preset's `monitors.sync_guard`) takes precedence
        other_guard = any(isinstance(cb, SyncGuard) for cb in getattr(trainer, "callbacks", []))
        self._guard_on = self.sync_guard is not None and not other_guard
        if self._guard_on:
            self.sync_guard.setup(trainer, pl_module, stage)  # type: ignore[union-attr]
        on = sorted(self.deliberate_tools)
        self.report(True, "debugging tools on: " + (", ".join(on) if on else "none"))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.anomaly:
            # Lightning wraps fit_loop.run in set_detect_anomaly(trainer.detect_anomaly): set it inside
            torch.autograd.set_detect_anomaly(True, check_nan=self.check_nan)

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._guard_on:
            self.sync_guard.on_train_batch_start(trainer, pl_module, batch, batch_idx)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._guard_on:
            self.sync_guard.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._guard_on:
            self.sync_guard.on_train_end(trainer, pl_module)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        # Lightning does not call `teardown` after an exception: restore everything here too
        if self._guard_on:
            self.sync_guard.on_exception(trainer, pl_module, exception)  # type: ignore[union-attr]
        self._restore()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._guard_on:
            self.sync_guard.teardown(trainer, pl_module, stage)  # type: ignore[union-attr]
        self._guard_on = False
        self._restore()

    def _restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        torch.autograd.set_detect_anomaly(saved["anomaly"], check_nan=saved["check_nan"])
        torch.use_deterministic_algorithms(saved["deterministic"], warn_only=saved["warn_only"])
        torch.backends.cudnn.deterministic = saved["cudnn_deterministic"]


class DebugToolsCheck(SpeedupCallback):
    """Warn about debugging tools left on, with what each costs and the fix (tip T14 ``debug-off``).

    When training starts, runs :func:`~lightning_speedups.functional.debug.find_debug_tools` on the
    trainer (anomaly detection, the torch / autograd profiler, NVTX ranges, a Lightning profiler,
    deterministic algorithms, cuDNN switches, sync-debug mode, ``CUDA_LAUNCH_BLOCKING`` and
    friends, a debugger or coverage tracer, logging every step) and warns once, listing each.
    Tools turned on deliberately by a :class:`DebugMode` (or a :class:`SyncGuard`) in the same
    trainer, or named in ``ignore``, are not reported.

    Card:
        Seed: A#13. Expected gain: whatever the forgotten tool costs: anomaly detection often
        several times slower backward, ``CUDA_LAUNCH_BLOCKING`` no overlap at all. When it hurts:
        never; it only reads state.

    Args:
        ignore: tool ids not to report (see
            :data:`~lightning_speedups.functional.debug.DEBUG_TOOL_IDS`), e.g.
            ``("deterministic_algorithms",)`` when reproducibility is required.

    Example:
        >>> check = DebugToolsCheck(ignore=["deterministic_algorithms"])
        >>> # after fit: check.found lists the DebugTool records that were reported
    """

    tip = "T14"
    part = "debug_tools_check"

    def __init__(self, ignore: Iterable[str] = ()) -> None:
        super().__init__()
        if isinstance(ignore, str):
            raise TypeError("`DebugToolsCheck(ignore=...)` must be a list of tool ids, not a single string.")
        ignore = tuple(ignore)
        unknown = [i for i in ignore if i not in DEBUG_TOOL_IDS]
        if unknown:
            raise ValueError(
                f"`DebugToolsCheck(ignore=...)` has unknown tool ids {unknown}; known ids: {', '.join(DEBUG_TOOL_IDS)}."
            )
        self.ignore = frozenset(ignore)
        self.found: list[DebugTool] = []
        self.deliberate: list[DebugTool] = []

    @staticmethod
    def deliberate_ids(trainer: Trainer) -> frozenset[str]:
        """Tool ids that other callbacks of ``trainer`` turn on on purpose."""
        ids: set[str] = set()
        for cb in getattr(trainer, "callbacks", []):
            if isinstance(cb, DebugMode):
                ids |= cb.deliberate_tools
            elif isinstance(cb, SyncGuard):
                ids.add("sync_debug_mode")
        return frozenset(ids)

    def check(self, trainer: Optional[Trainer] = None) -> list[DebugTool]:
        """Run the check now; return the tools to report (also stored in :attr:`found`)."""
        skip = self.ignore | (self.deliberate_ids(trainer) if trainer is not None else frozenset())
        tools = find_debug_tools(trainer)
        self.found = [t for t in tools if t.id not in skip]
        self.deliberate = [t for t in tools if t.id in skip]
        return self.found

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        found = self.check(trainer)
        if not found:
            self.report(False, "skipped, no debugging tools left on")
            return
        lines = "\n".join(f"  - {t}" for t in found)
        rank_zero_warn(
            f"{len(found)} debugging tool(s) left on slow this training run down (tip T14):\n{lines}\n"
            "Use the `debug` preset (DebugMode) to turn them on deliberately while debugging.",
            category=PossibleUserWarning,
        )
        self.report(True, "debugging tools left on: " + ", ".join(t.id for t in found))


# ---------------------------------------------------------------------------------------------------
# T17
# ---------------------------------------------------------------------------------------------------

_STAGES = ("validate", "test", "predict")
_STAGE_WORD = {"validate": "validation", "test": "test", "predict": "prediction"}


class NoGradEvalCheck(SpeedupCallback):
    """Warn when validation, test or prediction steps build autograd graphs (tip T17 ``no-grad-eval``).

    Lightning runs evaluation under ``torch.inference_mode`` (or ``no_grad``), but user code can
    turn gradients back on (``torch.enable_grad()``, ``torch.set_grad_enabled(True)``, a custom
    loop). For the first ``check_batches`` batches of each evaluation run the check looks at:
    grad mode at batch start, forward hooks on the model's sub-modules (a forward with grad mode on
    whose output requires grad is building a graph), and the step's outputs. Grad mode on with
    nothing requiring grad (a frozen model) costs nothing and is not reported. Warns once per stage
    with the evidence; then removes its hooks, so later batches run untouched.

    Card:
        Seed: A#16, B#14 (no gradients during validation / inference). Expected gain: no saved
        activations (less memory, bigger eval batches) and no graph bookkeeping. When it hurts:
        when evaluation really needs gradients (input gradients, adversarial evaluation): leave
        that stage out of ``stages``.

    Args:
        check_batches: how many batches of each evaluation run to inspect.
        stages: which of ``"validate"``, ``"test"``, ``"predict"`` to check.

    Example:
        >>> check = NoGradEvalCheck(check_batches=2)
        >>> # after trainer.validate(model): check.findings lists what was found
    """

    tip = "T17"
    part = "no_grad_eval_check"

    def __init__(self, check_batches: int = 2, stages: Iterable[str] = _STAGES) -> None:
        super().__init__()
        if not isinstance(check_batches, int) or isinstance(check_batches, bool) or check_batches < 1:
            raise ValueError(f"`NoGradEvalCheck(check_batches=...)` must be an int >= 1, got {check_batches!r}.")
        if isinstance(stages, str):
            stages = (stages,)
        stages = tuple(stages)
        bad = [s for s in stages if s not in _STAGES]
        if bad:
            raise ValueError(f"`NoGradEvalCheck(stages=...)` has unknown stages {bad}; choose from {_STAGES}.")
        self.check_batches = check_batches
        self.stages = frozenset(stages)
        self.findings: list[dict[str, Any]] = []
        self._warned: set[str] = set()
        self._watch: Optional[EvalGradWatch] = None
        self._seen_batches = 0
        self._grad_at_start = False

    # -- core ---------------------------------------------------------------------------------------
    def _start(self, stage: str, pl_module: LightningModule) -> None:
        self._stop()
        if stage not in self.stages or stage in self._warned:
            return
        self._watch = EvalGradWatch(pl_module).attach()
        self._seen_batches = 0
        if not self.findings:
            self.report(True, f"checking the first {self.check_batches} batches of each evaluation for autograd")

    def _batch_start(self) -> None:
        if self._watch is not None:
            self._grad_at_start = torch.is_grad_enabled()

    def _batch_end(self, stage: str, trainer: Trainer, outputs: Any, batch_idx: int) -> None:
        watch = self._watch
        if watch is None:
            return
        self._seen_batches += 1
        grad_outputs = tensors_requiring_grad(outputs)
        if watch.events or grad_outputs:
            word = _STAGE_WORD[stage] + (" (sanity check)" if getattr(trainer, "sanity_checking", False) else "")
            evidence = [e.describe() for e in watch.events[:3]]
            if grad_outputs:
                evidence.append(", ".join(p for p, _ in grad_outputs[:3]) + " returned by the step require grad")
            if self._grad_at_start:
                evidence.append("torch.is_grad_enabled() was already True when the batch started")
            finding = {
                "tip": "T17",
                "slug": "no-grad-eval",
                "severity": "medium",
                "stage": stage,
                "evidence": f"{word} batch {batch_idx} ran with gradients: " + "; ".join(evidence),
                "fix": "remove torch.enable_grad() / set_grad_enabled(True) / requires_grad_() from the"
                f" {_STAGE_WORD[stage]} step and keep Trainer(inference_mode=True); if the gradients are"
                f" needed there, drop {stage!r} from NoGradEvalCheck(stages=...)",
            }
            self.findings.append(finding)
            self._warned.add(stage)
            rank_zero_warn(f"NoGradEvalCheck (tip T17): {finding['evidence']}. Fix: {finding['fix']}.", category=PossibleUserWarning)
            self.report(True, f"{_STAGE_WORD[stage]} steps build autograd graphs")
            self._stop()
        elif self._seen_batches >= self.check_batches:
            self._stop()

    def _stop(self) -> None:
        if self._watch is not None:
            self._watch.detach()
            self._watch = None

    # -- hooks --------------------------------------------------------------------------------------
    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("validate", pl_module)

    @override
    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("test", pl_module)

    @override
    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("predict", pl_module)

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_test_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._batch_start()

    @override
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("validate", trainer, outputs, batch_idx)

    @override
    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("test", trainer, outputs, batch_idx)

    @override
    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batch_end("predict", trainer, outputs, batch_idx)

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._stop()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stop()


# ---------------------------------------------------------------------------------------------------
# T07
# ---------------------------------------------------------------------------------------------------


class ShapeWatch(SpeedupCallback):
    """Count distinct training input shapes; warn when ``cudnn.benchmark`` keeps re-tuning (tip T07).

    Records the shapes of the floating-point tensors of every training batch (all tensors when a
    batch has none, e.g. token ids). With ``torch.backends.cudnn.benchmark`` on, cuDNN times every
    convolution algorithm again at each new shape; when more than ``max_shapes`` distinct shapes
    appear on a CUDA device the callback warns once with the evidence ("N distinct input shapes in
    M steps"). On CPU it only counts (benchmark mode does nothing there).

    Card:
        Seed: A#6, B#15 (``cudnn.benchmark = True`` when shapes are fixed). Expected gain: avoids
        the re-tuning cost that eats benchmark mode's 1.27x-1.70x when shapes vary. When it hurts:
        never; one tuple per step.

    Args:
        max_shapes: distinct shapes that are fine (default 2: full batches and the last one).

    Example:
        >>> watch = ShapeWatch()
        >>> # after fit: watch.distinct_shapes, watch.steps
    """

    tip = "T07"
    part = "shape_watch"

    def __init__(self, max_shapes: int = 2) -> None:
        super().__init__()
        if not isinstance(max_shapes, int) or isinstance(max_shapes, bool) or max_shapes < 1:
            raise ValueError(f"`ShapeWatch(max_shapes=...)` must be an int >= 1, got {max_shapes!r}.")
        self.max_shapes = max_shapes
        self.tracker = ShapeTracker(max_shapes=max_shapes)
        self.warned = False
        self._cuda = False

    @property
    def distinct_shapes(self) -> int:
        """Distinct input shapes seen in this fit."""
        return self.tracker.distinct_shapes

    @property
    def steps(self) -> int:
        return self.tracker.steps

    @property
    def shape_counts(self) -> dict[tuple, int]:
        """Batches seen per shape signature (``((path, shape), ...)``)."""
        return self.tracker.shape_counts

    def finding(self) -> Optional[dict[str, Any]]:
        return self.tracker.finding()

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self.tracker = ShapeTracker(max_shapes=self.max_shapes)
        self.warned = False
        self._cuda = _on_cuda(trainer)
        self.report(True, "watching training input shapes" + ("" if self._cuda else " (cudnn not used on CPU)"))

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        new = self.tracker.update(batch)
        if not new or self.warned or not self._cuda:
            return
        finding = self.tracker.finding()
        if finding is not None:
            self.warned = True
            rank_zero_warn(
                f"ShapeWatch (tip T07): {finding['evidence']}: benchmark mode re-tunes every convolution at"
                f" each new shape. Fix: {finding['fix']}.",
                category=PossibleUserWarning,
            )

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.report(True, f"{self.distinct_shapes} distinct input shapes in {self.steps} steps")
