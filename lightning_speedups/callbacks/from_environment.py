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
from lightning_speedups.trainer.namespace import (
    is_lightning,
    lightning_class_name,
    namespace_of,
)
from lightning_speedups.trainer.trainer_flags import (
    FOLLOWS,
    LIVE_FLAGS,
    apply_flag,
    current_flag,
    flags_set_on,
    merge_flags,
)


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
        theirs = [cb for cb in trainer.callbacks if isinstance(cb, SpeedupCallback) and cb is not self]
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
        notes = self._set_flags(trainer, wanted, list(notes))
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

    def _set_flags(self, trainer: Any, wanted: dict[str, Any], notes: list[tuple[str, bool, str]]) -> list:
        live = {k: v for k, v in wanted.items() if k in LIVE_FLAGS}
        given = flags_set_on(trainer, live)
        applied, flag_notes = merge_flags(live, given, "the Trainer")
        refused: dict[str, str] = {k: text for k, use, text in flag_notes if not use}
        notes.extend((k, True, text) for k, use, text in flag_notes if use)
        for key, value in applied.items():
            if current_flag(trainer, key) == value or FOLLOWS.get(key) in refused:
                continue  # nothing to change (a follower keeps to the Trainer's own value of the flag it follows)
            before = current_flag(trainer, key) if key != "precision" else trainer.strategy.precision_plugin
            why = apply_flag(trainer, key, value)
            if why is None:
                self._restore.setdefault(key, before)
            else:
                refused[key] = f"not applied: {why}"
        for key in wanted.keys() - live.keys():
            kind = lightning_class_name(wanted[key]) if key == "strategy" else ""
            if kind and is_lightning(trainer.strategy, kind):
                refused[key] = (
                    f"the Trainer's own {type(trainer.strategy).__name__} runs; the preset's settings for it need"
                    f" strategy=preset(...).trainer_kwargs(...)['strategy'] where the library takes Trainer arguments"
                )
                continue
            how = (
                "pass strategy=preset(...).trainer_kwargs(model=model)['strategy'] where the library takes Trainer"
                " arguments"
                if key == "strategy"
                else f"pass Trainer({key}=...)"
            )
            refused[key] = f"not applied: Lightning fixes trainer.{key} when the Trainer is built; {how}"
        return _flip(notes, refused)

    def _take_back(self, trainer: Any) -> None:
        """Undo what an earlier ``setup`` on this Trainer did: its flags and the callbacks it added."""
        for key, value in self._restore.items():
            if key == "precision":
                trainer.strategy.precision_plugin = value
            else:
                apply_flag(trainer, key, value)
        self._restore = {}
        if self.added:
            trainer.callbacks[:] = [cb for cb in trainer.callbacks if all(cb is not a for a in self.added)]
            self.added = []


def _flip(notes: list[tuple[str, bool, str]], refused: dict[str, str]) -> list[tuple[str, bool, str]]:
    """The notes with each refused flag's lines turned off and its reason said, so the summary is true to the
    Trainer (a part whose Trainer flag did not apply did not act)."""
    if not refused:
        return notes
    out: list[tuple[str, bool, str]] = []
    said: set[str] = set()
    for name, active, reason in notes:
        key = name.split(" ")[0]
        flag = key if key in refused else _FLAG_OF_PART.get(key)
        if flag in refused and flag not in said:
            out.append((name, False, refused[flag]))
            said.add(flag)
        elif flag not in refused:
            out.append((name, active, reason))
    out.extend((key, False, why) for key, why in refused.items() if key not in said)
    return out


#: the summary's part names whose work is a Trainer flag
_FLAG_OF_PART: dict[str, Optional[str]] = {
    "grad_clip": "gradient_clip_val",
    "ddp": "strategy",
    "fsdp": "strategy",
    "effective_batch_size": "accumulate_grad_batches",
}
