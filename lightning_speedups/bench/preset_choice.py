"""Which presets a bench runs: those asked with ``--presets`` (names, files, ``+`` compositions), or its defaults.

Used by :meth:`lightning_speedups.bench.runner.Bench.prepare`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Optional

from lightning_speedups.bench.options import BenchError
from lightning_speedups.bench.variants import PRESETS_NOT_TIMED
from lightning_speedups.presets import list_presets

__all__ = ["TARGET_PRESETS", "TARGET_PRESETS_NOT_RUN", "chosen_presets"]

#: the presets a time-to-target bench runs by default (those that exist), likeliest winner first
TARGET_PRESETS = ("fast+converge", "converge", "fast")
#: presets a time-to-target bench never runs (several devices; deliberately slow)
TARGET_PRESETS_NOT_RUN = {k: v for k, v in PRESETS_NOT_TIMED.items() if k in ("ddp", "debug")}


def chosen_presets(asked: Optional[Sequence[str]], target: bool) -> tuple[list[str], dict[str, str]]:
    """The presets to run, and those asked for that a bench does not run, each with why.

    Raises:
        BenchError: an unknown preset (neither a packaged one nor a file).
    """
    available = list(list_presets())
    if asked is None:
        if target:
            names = [p for p in TARGET_PRESETS if all(q in available for q in p.split("+"))]
        else:
            names = [p for p in available if p != "baseline"]
    else:
        names = []
        for p in asked:
            for name in str(p).split(","):
                name = name.strip()
                if not name or name == "none":
                    continue
                for part in name.split("+"):
                    if part not in available and not os.path.isfile(part):
                        raise BenchError(
                            f"unknown preset {part!r}; presets: {', '.join(available)} (compose with +, e.g. fast+converge)"
                        )
                if name not in names and name != "baseline":
                    names.append(name)
    not_run = TARGET_PRESETS_NOT_RUN if target else PRESETS_NOT_TIMED
    return [p for p in names if p not in not_run], {p: not_run[p] for p in names if p in not_run}
