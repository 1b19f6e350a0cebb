"""The start-up summary: which speed-ups are active and which were skipped, and why."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import lightning.pytorch as pl
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback, refuse_mixed_namespaces, summary_pending
from lightning_speedups.messages import say
from lightning_speedups.trainer.attributes import set_at_init


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
        self._shown = False

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # a Lightning built-in callback of the other package than the Trainer's: named with the fix, before training
        refuse_mixed_namespaces(trainer)

    def summarize(self, trainer: pl.Trainer) -> list[str]:
        rows = [(name, active, reason) for name, active, reason in self.notes]
        told: dict[str, list[str]] = {}
        for cb in set_at_init(trainer).callbacks:
            if isinstance(cb, SpeedupCallback) and cb is not self and cb.status is not None and cb.shown_in_summary:
                state, reason = cb.status
                tip = f" ({cb.tip})" if cb.tip else ""
                rows.append((f"{cb.part}{tip}", state == "active", reason))
                told.setdefault(rows[-1][0], []).extend(cb.told)
        rows = merge_kept(rows, trainer)
        width = max((len(name) for name, _, _ in rows), default=0)
        lines = []
        for name, active, reason in rows:
            lines.append(f"  {'on ' if active else 'off'}  {name:<{width}}  {reason}")
            # what the part told while the block waited: under its own line, indented past the names
            lines.extend(f"       {'':<{width}}  - {said}" for said in told.get(name, ()))
        return lines

    def _print(self, trainer: pl.Trainer) -> None:
        if self._shown:
            return
        self._shown = True
        self.lines = self.summarize(trainer)
        for cb in set_at_init(trainer).callbacks:
            if isinstance(cb, SpeedupCallback):
                cb._summarized = True  # what a part tells from now on goes into the closing block
        if self.lines:
            say(
                f"lightning_speedups: (its parts took {_seconds(spent_by_parts(trainer))} so far)\n"
                + "\n".join(self.lines)
            )

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # what the parts measured through the fit (the data wait, the syncs): one closing block, when there is any
        late = [
            f"  {cb.part}: {said}"
            for cb in set_at_init(trainer).callbacks
            if isinstance(cb, SpeedupCallback) and cb is not self
            for said in cb.told_late
        ]
        for cb in set_at_init(trainer).callbacks:
            if isinstance(cb, SpeedupCallback):
                cb.told_late.clear()
        if late:
            say("lightning_speedups, at the end of the run:\n" + "\n".join(late))

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the start-up probe decides its parts at the first batch, the Safeguard tries them there: the summary waits
        if not summary_pending(trainer):
            self._print(trainer)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._print(trainer)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.training and trainer.state.fn != "fit":
            self._print(trainer)

    @override
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print(trainer)

    @override
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._print(trainer)


def spent_by_parts(trainer: pl.Trainer) -> float:
    """Seconds the pack's callbacks in ``trainer`` spent in their hooks so far (their trials and probes included)."""
    return sum(cb.hook_seconds for cb in set_at_init(trainer).callbacks if isinstance(cb, SpeedupCallback))


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def without_theirs(pack: Sequence[Any], theirs: Iterable[Any], where: str) -> list[Any]:
    """The pack's callbacks whose type ``theirs`` (the user's own callbacks) does not hold already: adding the pack's
    too would run a part twice (and Lightning refuses two stateful callbacks with one state_key). Each one left out
    is said in the pack's start-up summary (``kept yours from <where> (not added twice)``)."""
    types = {type(cb) for cb in theirs}
    kept = [cb for cb in pack if type(cb) not in types]
    summary = next((cb for cb in kept if isinstance(cb, SpeedupsSummary)), None)
    if summary is not None:
        summary.notes.extend(
            (type(cb).__name__, True, f"kept yours from {where} (not added twice)") for cb in pack if type(cb) in types
        )
    return kept


_KEPT = re.compile(r"kept trainer\.(\w+)=")


def merge_kept(rows: list[tuple[str, bool, str]], trainer: Any = None) -> list[tuple[str, bool, str]]:
    """One line per setting: a part's line that names the Trainer flags it set (``gradient_clip_val=1.0``)
    absorbs the "kept trainer.K=..." lines for those flags (the user's own value won), and says the values
    that run, read from the Trainer.

    Examples:
        >>> rows = [("grad_clip (T15)", True, "clip gradients by norm at 1.0 (gradient_clip_val=1.0,"
        ...          " gradient_clip_algorithm='norm')"),
        ...         ("gradient_clip_val", False, "kept trainer.gradient_clip_val=5 from the config (speedups wanted 1.0)")]
        >>> for row in merge_kept(rows): print(row)
        ('grad_clip (T15)', True, "runs gradient_clip_val=5, gradient_clip_algorithm='norm': kept trainer.gradient_clip_val=5 from the config (speedups wanted 1.0)")
    """
    kept = {m.group(1): i for i, (_, _, reason) in enumerate(rows) if (m := _KEPT.match(reason))}
    if not kept:
        return rows
    out: list[tuple[str, bool, str]] = []
    absorbed: set[int] = set()
    merged: dict[int, tuple[str, bool, str]] = {}
    for i, (name, active, reason) in enumerate(rows):
        if i in kept.values() or not active:
            continue
        named = re.findall(r"\b(\w+)=(\S+?)[,)]", reason)
        mine = [k for k, _ in named if k in kept]
        if not mine:
            continue
        values = []
        for key, wanted in named:
            if trainer is not None and hasattr(trainer, key):
                value: Any = getattr(trainer, key)
                value = getattr(value, "value", value)  # Lightning's GradClipAlgorithmType
                values.append(f"{key}={value!r}")
            elif key in kept:  # no Trainer to read: the kept value, as its line says it
                values.append(f"{key}={rows[kept[key]][2].split('=', 1)[1].split(' ', 1)[0]}")
            else:
                values.append(f"{key}={wanted}")
        why = "; ".join(rows[kept[k]][2] for k in mine)
        merged[i] = (name, active, f"runs {', '.join(values)}: {why}")
        absorbed.update(kept[k] for k in mine)
    for i, row in enumerate(rows):
        if i in absorbed:
            continue
        out.append(merged.get(i, row))
    return out
