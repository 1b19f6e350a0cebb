"""The callback that applies a preset to a Trainer the pack did not build (``LIGHTNING_SPEEDUPS``).

See :mod:`lightning_speedups.environment` for the user's side. This callback gets the composed preset and
does the work in ``setup``, the first hook where the model and the Trainer's device are known.
"""

from __future__ import annotations

from typing import Any, Optional

from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, refuse_mixed_namespaces
from lightning_speedups.callbacks.safeguard import Safeguard
from lightning_speedups.callbacks.summary import without_theirs
from lightning_speedups.trainer.namespace import namespace_of
from lightning_speedups.trainer.trainer_flags import current_flag, set_flags, take_back_flags


class SpeedupsFromEnvironment(SpeedupCallback):
    """Apply a composed preset to the Trainer it is in, in ``setup``: its callbacks and its Trainer flags.

    Args:
        chosen: the composed :class:`~lightning_speedups.presets.Preset` (``preset("fast", "converge")``).
        source: how the user asked for it, for the summary (``"LIGHTNING_SPEEDUPS=fast"``).
        built_by_pack: the attribute the pack's CLI sets on the Trainers it builds (their parts are there).

    Example::

        trainer = Trainer(callbacks=[SpeedupsFromEnvironment(preset("fast"), source="fast")])
    """

    part = "environment"

    def __init__(
        self, chosen: Any, source: str, built_by_pack: str = "", rebuild: Optional[tuple[Any, str]] = None
    ) -> None:
        super().__init__()
        self.preset = chosen
        self.source = source
        self.built_by_pack = built_by_pack
        self.rebuild = rebuild
        self.added: list[Any] = []
        self._restore: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # a spawn launcher pickles the Trainer: the composed preset (generated dataclasses) is rebuilt from the
        # environment's value instead (``rebuild``: a module-level function and its argument)
        state = dict(self.__dict__)
        if self.rebuild is not None:
            state["preset"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.preset is None and self.rebuild is not None:
            make, value = self.rebuild
            self.preset = make(value)

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        refuse_mixed_namespaces(trainer)
        # a second fit / validate on the same Trainer builds the parts again, for the model it now has
        self._take_back(trainer)
        if stage != "fit":
            # validation, test and predict runs (a library's predict Trainer too) stay as Lightning runs them: the
            # presets' parts and precision are for training
            what = getattr(stage, "value", stage)  # Lightning passes its TrainerFn enum
            self.report(False, f"{self.source}: nothing added to a {what} run (the presets apply to fit)")
            return
        if self.built_by_pack and getattr(trainer, self.built_by_pack, False):
            self.report(False, f"{self.source}: nothing added, the pack's CLI built this Trainer with its parts")
            return
        # the pack's parts the Trainer has already (a doctor that only watches, LIGHTNING_SPEEDUPS=fast+doctor, is none)
        theirs = [
            cb
            for cb in trainer.callbacks
            if isinstance(cb, SpeedupCallback) and cb is not self and not getattr(cb, "watches_only", False)
        ]
        if theirs:
            self.report(
                False,
                f"{self.source}: nothing added, the Trainer has the pack's parts already"
                f" ({', '.join(sorted({type(cb).__name__ for cb in theirs}))})",
            )
            return
        device = trainer.strategy.root_device.type
        accelerator = "gpu" if device == "cuda" else device
        kwargs, notes = self.preset.speedups.trainer_kwargs(
            accelerator=accelerator, devices=trainer.num_devices, model=pl_module
        )
        wanted = {**kwargs, **{k: v for k, v in self.preset.trainer.items() if k != "callbacks"}}
        notes = set_flags(trainer, wanted, list(notes), self._restore)
        parts = self.preset.speedups.callbacks(notes, accelerator=accelerator, model=pl_module)
        for part in parts:  # a preset's precision that fails here falls back on the one the Trainer had
            if isinstance(part, Safeguard) and "precision" in self._restore:
                part.plain_precision = self._restore["precision"]
        self.added = without_theirs(parts, trainer.callbacks, "the Trainer's callbacks")
        # right after this callback: Lightning's hook loop walks this list, so they join this very setup
        at = trainer.callbacks.index(self) + 1
        trainer.callbacks[at:at] = self.added
        flags = ", ".join(f"{k}={current_flag(trainer, k)!r}" for k in self._restore) or "no Trainer flag"
        self.report(
            True,
            f"{self.source}: {len(self.added)} callback(s) added to this {namespace_of(trainer)} Trainer, {flags} set",
        )

    def _take_back(self, trainer: Any) -> None:
        """Undo what an earlier ``setup`` on this Trainer did: its flags and the callbacks it added."""
        take_back_flags(trainer, self._restore)
        if self.added:
            trainer.callbacks[:] = [cb for cb in trainer.callbacks if all(cb is not a for a in self.added)]
            self.added = []
