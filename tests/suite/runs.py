"""The 2-step fit of one case on one kind, run once and shared by the acted, flags and resume tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from suite import flags
from suite.harness import Entry, Parts, apply_functions, build_parts, fingerprint, fit
from suite.kinds import SuiteModel, make
from suite.namespace import pl

STEPS = 2


@dataclass
class Run:
    """What a 2-step fit of a case on a kind left behind."""

    entry: Entry
    kind: str
    model: SuiteModel
    parts: Parts
    trainer: Optional[pl.Trainer] = None
    checkpoint: Optional[str] = None
    error: Optional[BaseException] = None
    flag_changes: list[str] = field(default_factory=list)
    function_results: list[Any] = field(default_factory=list)
    before: Any = None  # fingerprint before the functional parts were applied
    after: Any = None

    def raise_error(self) -> None:
        if self.error is not None:
            raise AssertionError(
                f"{self.entry.id} on {self.kind}: the 2-step fit raised {type(self.error).__name__}: {self.error}"
            ) from self.error


class Runs:
    """A cache of 2-step fits, keyed by (case id, kind), writing checkpoints under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._runs: dict[tuple[str, str], Run] = {}

    def two_steps(self, entry: Entry, kind: str) -> Run:
        key = (entry.id, kind)
        if key not in self._runs:
            self._runs[key] = self._fit(entry, kind)
        return self._runs[key]

    def _fit(self, entry: Entry, kind: str) -> Run:
        root = os.path.join(self.root, f"{entry.id}-{kind}")
        os.makedirs(root, exist_ok=True)
        saved = flags.snapshot()
        model = make(kind)
        run = Run(entry, kind, model, build_parts(entry.case))
        try:
            run.before = fingerprint(model)
            run.function_results = apply_functions(model, run.parts)
            run.after = fingerprint(model)
            run.trainer = fit(model, run.parts, STEPS, root=root)
            run.checkpoint = os.path.join(root, "two-steps.ckpt")
            run.trainer.save_checkpoint(run.checkpoint)
        except Exception as err:  # reported by every test that uses this run
            run.error = err
        finally:
            run.flag_changes = flags.changes(saved, flags.snapshot())
            flags.restore(saved)
        return run
