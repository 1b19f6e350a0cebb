"""``python -m lightning_speedups bench``: time every tip on the user's own setup and pick the fastest.

Runs variants of the user's config (``baseline``, each applicable tip alone, the packaged presets,
the static all-on combination, the parts with nothing to do, and a greedy search over the tips that
helped), each in its own process, interleaved over repeats; prints a table sorted by speed-up and can
write JSON (``--json``), a chart (``--plot``) and the fastest sane variant as a preset
(``--write-preset``).

Example::

    python -m lightning_speedups bench --config my.yaml --steps 30 --repeats 3 \\
        --json bench.json --plot bench.png --write-preset fastest.yaml
    python -m lightning_speedups fit --config my.yaml --config fastest.yaml
"""

from lightning_speedups.bench.args import (
    flatten,
    override_args,
    reset_args,
    speedups_defaults,
    trainer_overrides,
    user_speedups,
    user_speedups_keys,
    variant_args,
)
from lightning_speedups.bench.command import main, options_from_argv, parser, run_bench
from lightning_speedups.bench.launcher import Launcher
from lightning_speedups.bench.machine import machine_meta, resolve_device
from lightning_speedups.bench.options import (
    BASELINES,
    DEVICES,
    ISOLATIONS,
    MIN_BUDGET_S,
    BenchError,
    BenchOptions,
)
from lightning_speedups.bench.results import MEMORY_FIGURE, BenchResult, VariantRecord
from lightning_speedups.bench.runner import Bench
from lightning_speedups.bench.variants import (
    BASELINE,
    NOT_TIMED,
    PRESETS_NOT_TIMED,
    TIP_VARIANTS,
    BudgetExhausted,
    SearchResult,
    SearchStep,
    Variant,
    build_variants,
    greedy_search,
    plan_tips,
    resolve_tips,
)

__all__ = [
    "BASELINE",
    "BASELINES",
    "DEVICES",
    "ISOLATIONS",
    "MEMORY_FIGURE",
    "MIN_BUDGET_S",
    "NOT_TIMED",
    "PRESETS_NOT_TIMED",
    "TIP_VARIANTS",
    "Bench",
    "BenchError",
    "BenchOptions",
    "BenchResult",
    "BudgetExhausted",
    "Launcher",
    "SearchResult",
    "SearchStep",
    "Variant",
    "VariantRecord",
    "build_variants",
    "flatten",
    "greedy_search",
    "machine_meta",
    "main",
    "options_from_argv",
    "override_args",
    "parser",
    "plan_tips",
    "reset_args",
    "resolve_device",
    "resolve_tips",
    "run_bench",
    "speedups_defaults",
    "trainer_overrides",
    "user_speedups",
    "user_speedups_keys",
    "variant_args",
]
