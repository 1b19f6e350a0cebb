"""How often a line runs, as a value: :class:`Runs` and its ``how`` constants (most frequent first in
:data:`ORDER`), the method names whose bodies run per step, and what counts as a step by itself. Plain data
and pure functions; :mod:`lightning_speedups.lint.where` works the answers out."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Optional, Union

from lightning_speedups.lint.astutil import terminal_name

PER_BATCH = "per batch"
PER_SAMPLE = "per sample"
EVERY_N = "every N batches"
PER_EPOCH = "per epoch"
ONCE = "once"
ON_ERROR = "on error"
UNKNOWN = "unknown"
#: Most frequent first: a helper called from several places runs as often as its busiest caller.
ORDER = (PER_SAMPLE, PER_BATCH, EVERY_N, PER_EPOCH, UNKNOWN, ONCE, ON_ERROR)


#: Methods whose body runs once per batch of training (LS201 / LS202 look there).
STEP_METHODS = frozenset({"training_step", "validation_step"})
#: Lightning hooks (of a LightningModule or a Callback) that run once per training step.
TRAIN_BATCH_HOOKS = frozenset(
    {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "training_step_end",
    }
)

#: A function or method (what :attr:`~lightning_speedups.lint.loops.Loops.functions` lists) and a loop (what
#: :data:`~lightning_speedups.lint.astutil.LOOP_TYPES` matches).
FuncDef = Union[ast.FunctionDef, ast.AsyncFunctionDef]
Loop = Union[ast.For, ast.AsyncFor, ast.While]


@dataclass(frozen=True)
class Runs:
    """How often a line runs: ``how`` (one of the constants above), ``where`` (words for messages:
    ``"training_step"``, ``"a training loop (line 12)"``), ``training`` (it is part of the training
    step itself, where LS201 / LS202 look)."""

    how: str
    where: str
    training: bool = False
    #: ``path:line`` of the call in another file through which this line runs per step ("" when the
    #: file shows it by itself): LS206 reports syncs reached that way.
    via: str = ""
    #: the training loop that makes it per step lives in a file that never leaves the CPU.
    root_cpu: bool = False
    #: the user's switch the line runs under (`` `if self.args.nan_detection:` (line 62)``): how often is then
    #: unsure, since the code does not show the switch's default.
    flag: str = ""
    #: the call in another file named by ``via``, and that file's context (what it passes).
    via_call: Optional[ast.AST] = field(default=None, compare=False)
    via_ctx: Optional[object] = field(default=None, compare=False)

    def every_n(self) -> Runs:
        return replace(self, how=EVERY_N) if self.how in (PER_BATCH, PER_SAMPLE) else self


def is_step_call(call: ast.Call) -> bool:
    """A call :meth:`~lightning_speedups.lint.loops.Loops.calls_step` takes for a step by itself (backward, an optimizer or scaler step,
    ``loss_scaler(loss, optimizer, ...)``)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        attr = func.attr
        if attr in ("backward", "manual_backward"):
            return True
        if attr == "step":
            owner = terminal_name(func.value).lower()
            if "opt" in owner or "scaler" in owner:
                return True
    return len(call.args) >= 2 and terminal_name(func).lower().endswith("scaler")


#: How a message says that a line runs only under a switch (the default lint set leaves such lines out).
UNDER_FLAG = " (under "


def flagged(r: Runs, flag: str) -> Runs:
    if not flag or r.flag or r.how not in (PER_BATCH, PER_SAMPLE):
        return r
    return replace(r, flag=flag, where=f"{r.where}{UNDER_FLAG}{flag})")
