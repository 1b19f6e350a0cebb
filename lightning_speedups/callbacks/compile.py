"""T22 fusion as a callback: ``torch.compile`` the model's inner modules, falling back to eager on failure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.functional.checkpointing import Target, normalize_targets
from lightning_speedups.functional.compile import (
    compile_modules,
    compile_status,
    default_compile_targets,
    validate_compile_options,
)
from lightning_speedups.trainer.hooks import forget_after_configure_model, run_after_configure_model


class CompileModules(SpeedupCallback):
    """T22: compile the LightningModule's inner modules with ``torch.compile``.

    What it does: in ``setup`` the chosen sub-modules are compiled in place
    (:func:`~lightning_speedups.functional.compile.compile_modules`); the LightningModule itself stays eager,
    so ``training_step`` and ``self.log`` work as usual. ``state_dict`` keys do not change (no ``_orig_mod.``
    prefix), so checkpoints load with or without this callback. Compilation happens at the first call; a
    module whose compilation fails switches to eager with one warning carrying the compiler's first line of
    reason (or raises with ``strict=True``).

    Card: tip T22 ``fusion``; its seeds, expected gain and when it hurts are stated once, in the tip's
    record (``python -m lightning_speedups tips``).

    Args:
        modules: ``None`` (default): the LightningModule's top-level children that hold parameters
            (losses and metrics without parameters stay eager). Or class(es), class names, or
            qualified-name globs / ``"re:<regex>"``; an entry matching nothing is an error.
        mode: ``torch.compile`` mode: ``None``, ``"default"``, ``"reduce-overhead"``,
            ``"max-autotune"`` or ``"max-autotune-no-cudagraphs"``.
        dynamic: ``torch.compile``'s ``dynamic``.
        fullgraph: make graph breaks errors.
        backend: backend name (``"inductor"``) or callable.
        strict: raise the compiler's error instead of falling back to eager.

    Example::

        trainer = Trainer(callbacks=[CompileModules(mode="max-autotune")])
    """

    tip = "T22"
    part = "compile"

    def __init__(
        self,
        modules: None | Target | Iterable[Target] = None,
        mode: str | None = None,
        dynamic: bool | None = None,
        fullgraph: bool = False,
        backend: str | Callable[..., Any] = "inductor",
        strict: bool = False,
    ) -> None:
        super().__init__()
        self.modules = None if modules is None else normalize_targets(modules, argument="modules")
        validate_compile_options(mode, dynamic, fullgraph, backend, strict)
        self.mode = mode
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.backend = backend
        self.strict = strict
        self._checked = False

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # layers built in the model's configure_model exist only after it: the surgery runs right then
        if not run_after_configure_model(pl_module, self, lambda: self._apply(trainer, pl_module, stage)):
            self._apply(trainer, pl_module, stage)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.modules is None and not default_compile_targets(pl_module):
            self.report(False, "skipped, the model has no sub-module with parameters to compile", echo=True)
            return
        names = compile_modules(
            pl_module,
            self.modules,
            mode=self.mode,
            dynamic=self.dynamic,
            fullgraph=self.fullgraph,
            backend=self.backend,
            strict=self.strict,
        )
        if not names:
            self.report(False, "skipped, the chosen modules were already compiled by the user", echo=True)
            return
        self._checked = False
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        self.report(True, f"{len(names)} modules compiled lazily ({shown})")

    def _check(self, pl_module: pl.LightningModule) -> None:
        if self._checked or not self.active:
            return
        self._checked = True
        status = compile_status(pl_module)
        failed = {n: s for n, s in status.items() if s.startswith("eager")}
        if failed:
            compiled = len(status) - len(failed)
            first = next(iter(failed.items()))
            self.report(compiled > 0, f"{compiled} compiled, {len(failed)} fell back to eager ({first[0]}: {first[1]})")

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any) -> None:
        self._check(pl_module)

    @override
    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        self._check(pl_module)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        forget_after_configure_model(pl_module, self)
