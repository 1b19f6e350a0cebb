"""Trainer flags that Lightning accepts only under automatic optimization, set once the model is known.

``Trainer(gradient_clip_val=...)`` and ``Trainer(accumulate_grad_batches=...)`` make Lightning refuse to
fit a model with ``automatic_optimization = False`` ("Automatic gradient clipping is not supported
for manual optimization"). When a preset asks for them and the model is not known while the Trainer
arguments are built (``Trainer(**preset("transformer").trainer_kwargs(), callbacks=...)`` from
Python), they are left out of the Trainer's arguments and this callback sets them in ``setup``, which
runs after Lightning's check: on an automatic-optimization model they apply as if passed to the
Trainer; on a manual one the part reports skipped, naming what ``training_step`` must call instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingError
from lightning_speedups.trainer.trainer_flags import LIGHTNING_DEFAULTS, apply_flag, flags_set_on, merge_flags

#: The values Lightning accepts under manual optimization (the Trainer's defaults).
DEFAULTS: dict[str, Any] = {
    k: LIGHTNING_DEFAULTS[k] for k in ("gradient_clip_val", "gradient_clip_algorithm", "accumulate_grad_batches")
}


class AutomaticOptimizationFlags(SpeedupCallback):
    """Set Trainer flags that need automatic optimization in ``setup``, or skip them with the fix.

    Args:
        name: the part's name in the start-up summary (``"grad_clip (T15)"``).
        tip: the tip that asked for them (``"T15"``).
        flags: Trainer attributes and values (``{"gradient_clip_val": 1.0, "gradient_clip_algorithm": "norm"}``).
        what: the summary line when they apply.
        fix: what a manual-optimization ``training_step`` calls instead.

    Example::

        flags = AutomaticOptimizationFlags("grad_clip", "T15", {"gradient_clip_val": 1.0}, "clip at 1.0",
                                           "call self.clip_gradients(opt, gradient_clip_val=1.0)")
        trainer = Trainer(callbacks=[flags])
    """

    def __init__(self, name: str, tip: str, flags: Mapping[str, Any], what: str, fix: str) -> None:
        super().__init__()
        unknown = sorted(set(flags) - set(DEFAULTS))
        if unknown:
            raise SettingError(f"`flags` may hold {sorted(DEFAULTS)}; got {unknown}.")
        self.part = name.removesuffix(f" ({tip})")  # the summary adds the tip
        self.tip = tip
        self.flags = dict(flags)
        self.what = what
        self.fix = fix
        self.flags_notes: list[str] = []
        #: flags the user passed themselves (``preset(...).trainer_kwargs(gradient_clip_val=0)``): their value wins
        #: even when it means "off"; any other value on the Trainer (a library's default) is judged by the off rule
        self.explicit: set[str] = set()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not pl_module.automatic_optimization:
            asked = ", ".join(f"{k}={v!r}" for k, v in self.flags.items() if v != DEFAULTS[k])
            self.report(
                False,
                f"skipped: the model uses manual optimization, where Lightning refuses Trainer({asked}); {self.fix}",
            )
            return
        # the Trainer's own value wins when it turns something on; one that means "off" (a library's
        # gradient_clip_val=0.0) does not block the preset (the rule of merge_flags, with the summary's line)
        given = flags_set_on(trainer, self.flags)
        applied, notes = merge_flags(self.flags, given, "the Trainer", explicit=self.explicit)
        first = next(iter(self.flags))
        if first not in applied:
            self.report(False, f"skipped: {notes[0][2]}")
            return
        self.flags_notes = [text for _, _, text in notes]
        for key, value in applied.items():
            apply_flag(trainer, key, value)
        self.report(True, "; ".join([self.what, *self.flags_notes]))
