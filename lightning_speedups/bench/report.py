"""The bench's outputs: a rich table, a JSON file with every raw figure, a PNG chart, a YAML preset."""

from __future__ import annotations

import json
import math
import os
import statistics
import textwrap
import time
from typing import Any, Optional

from lightning_speedups.bench.args import flatten, nest, preset_speedups, speedups_defaults
from lightning_speedups.bench.results import MEMORY_FIGURE, BenchResult, VariantRecord
from lightning_speedups.errors import SettingError

MiB = 2**20


def _fmt(value: Optional[float], fmt: str = "{:.3g}") -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else fmt.format(value)


def _pm(pct: Optional[float]) -> str:
    return "" if pct is None else f" ±{pct:.0f}%"


def sorted_records(result: BenchResult) -> list[VariantRecord]:
    """Variants by speed-up over baseline, fastest first; failed and skipped ones last."""

    def key(rec: VariantRecord) -> tuple[int, float]:
        s = rec.summary
        if s is None or not s.runs_ok or s.speedup is None:
            return (1, 0.0)
        return (0, -s.speedup)

    return sorted(result.records, key=key)


def _note(rec: VariantRecord, result: BenchResult) -> str:
    if rec.skipped:
        return rec.skipped
    s = rec.summary
    if s is None:
        return "not run"
    parts: list[str] = []
    if s.failure:
        parts.append(f"failed: {s.failure}")
    elif s.runs_failed:
        first = next((r.get("reason") for r in rec.runs if r.get("status") != "ok"), "")
        parts.append(f"{s.runs_failed} run(s) failed: {first}")
    if rec.phase > 1:
        parts.append(f"search step, vs its own baseline (phase {rec.phase})")
    skipped_parts = {
        f"{p[0]}: {p[3]}"
        for r in rec.runs
        for p in r.get("parts") or []
        if len(p) == 4 and p[2] != "active" and p[0] not in ("summary",)
    }
    if skipped_parts and rec.variant.kind != "idle":
        parts.append("; ".join(sorted(skipped_parts))[:160])
    if result.pick is rec and rec.variant.kind != "baseline":
        parts.insert(0, "PICKED")
    return "; ".join(parts)


def _speed(s: Any) -> str:
    """``1.13x [1.07-1.20]``: the ratio and its 95% interval from the paired repeats (none from one repeat)."""
    text = _fmt(s.speedup, "{:.2f}x")
    lo, hi = s.speedup_ci
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}-{hi:.2f}]"
    return text


def _target_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    metric = result.target.metric
    header = [
        "variant",
        "speed-up [95% CI]",
        "time to target s",
        "steps to target",
        "reached",
        f"best {metric}",
        "notes",
    ]
    rows: list[list[str]] = []
    for rec in sorted_records(result):
        s = rec.summary
        name = rec.variant.name + (" (picked)" if result.pick is rec and rec.variant.kind != "baseline" else "")
        if s is None or not s.runs_ok:
            rows.append([name] + ["-"] * 5 + [_note(rec, result)])
            continue
        best = [r.get("best_value") for r in rec.runs if r.get("status") == "ok"]
        best_vals = [b for b in best if b is not None]
        best_cell = (
            _fmt(max(best_vals) if result.target.mode == "max" else min(best_vals), "{:.4g}") if best_vals else "-"
        )
        t, st = s.target_time, s.target_steps
        time_cell = "-" if t.median is None else f"{t.median:.1f} ({t.low:.1f}-{t.high:.1f})"
        steps_cell = "-" if st.median is None else f"{st.median:.0f} ({st.low:.0f}-{st.high:.0f})"
        rows.append(
            [
                name,
                _speed(s),
                time_cell,
                steps_cell,
                f"{s.target_reached}/{s.runs_ok}",
                best_cell,
                _note(rec, result).replace("PICKED; ", "").replace("PICKED", ""),
            ]
        )
    return header, rows


def table_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """The table as plain strings: ``(header, rows)``, sorted by speed-up."""
    if result.target is not None:
        return _target_rows(result)
    header = [
        "variant",
        "speed-up [95% CI]",
        "samples/s",
        "step ms",
        "train mem MiB",
        "mem ratio",
        "data wait",
        "warm-up s",
        "loss",
        "sane",
        "notes",
    ]
    rows: list[list[str]] = []
    for rec in sorted_records(result):
        s = rec.summary
        name = rec.variant.name + (" (picked)" if result.pick is rec and rec.variant.kind != "baseline" else "")
        if s is None or not s.runs_ok:
            rows.append([name] + ["-"] * 9 + [_note(rec, result)])
            continue
        rows.append(
            [
                name,
                _speed(s),
                _fmt(s.samples_per_s.median, "{:.1f}") + _pm(s.samples_per_s.pct),
                _fmt(None if s.step_s.median is None else s.step_s.median * 1e3, "{:.1f}") + _pm(s.step_s.pct),
                _fmt(None if s.train_mem.median is None else s.train_mem.median / MiB, "{:.1f}"),
                _fmt(s.mem_ratio, "{:.2f}x"),
                _fmt(None if s.data_wait.median is None else 100 * s.data_wait.median, "{:.1f}%"),
                _fmt(s.warmup_excess_s.median, "{:.1f}"),
                _fmt(s.loss.median, "{:.4g}"),
                "yes" if s.sane else "NO",
                _note(rec, result).replace("PICKED; ", "").replace("PICKED", ""),
            ]
        )
    return header, rows


def markdown(result: BenchResult) -> str:
    """The table and the summary lines as Markdown (for committed results)."""
    header, rows = table_rows(result)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        out.append("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
    out.append("")
    out += [f"- {line}" for line in summary_lines(result)]
    out.append(f"- {MEMORY_FIGURE[result.info.device]}.")
    return "\n".join(out) + "\n"


def render_table(result: BenchResult, console: Any = None) -> None:
    """Print the table sorted by speed-up, then what was skipped, the search and the pick."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    device = result.info.device
    meta = result.meta
    what = (
        f"time to {result.target.text()}"
        if result.target is not None
        else f"{result.options.steps} timed steps after {result.options.warmup} warm-up"
    )
    title = (
        f"bench: {result.info.model or 'model'} on {device}"
        f" ({meta.get('cpu') or ''}{', ' + meta['gpu'] if meta.get('gpu') else ''}),"
        f" {what}, {_repeats(result)} repeat(s)"
    )
    table = Table(title=title, show_lines=False)
    header, rows = table_rows(result)
    for col in header:
        table.add_column(col, justify="left" if col in ("variant", "notes") else "right", overflow="fold")
    for rec, row in zip(sorted_records(result), rows):
        if result.pick is rec:
            row = [f"[bold green]{row[0]}[/]", *row[1:]]
        table.add_row(*row)
    console.print(table)
    if result.target is not None:
        console.print(
            "speed-up: the baseline's median time to the target over the variant's; [95% CI]: Student's t on the log"
            " ratios of the repeats paired by seed. time to target: training seconds from fit start (a range test"
            " included, validation excluded) to the first check that reached it, median (range) over repeats; steps:"
            " optimizer steps at that check. A variant that missed in any repeat has no ratio and is never picked."
        )
    else:
        console.print(
            "speed-up: median samples/s over the baseline's; [95% CI]: Student's t on the log ratios paired per repeat."
            " step ms: median over repeats of each run's median step (wait + compute), ± half the range. warm-up s: the"
            " one-off cost before the timed steps (build excluded). " + MEMORY_FIGURE[device] + "."
        )
    for line in summary_lines(result):
        console.print(line)


def _repeats(result: BenchResult) -> int:
    base = result.baselines.get(1)
    return len(base.runs) if base else 0


def summary_lines(result: BenchResult) -> list[str]:
    """Plain lines: skipped tips and presets, the search, notes and the pick."""
    lines: list[str] = []
    if result.skipped_tips:
        lines.append("not timed: " + "; ".join(f"{t} ({why})" for t, why in result.skipped_tips.items()))
    if result.skipped_presets:
        lines.append("presets not timed: " + "; ".join(f"{p} ({why})" for p, why in result.skipped_presets.items()))
    if result.search is not None:
        sr = result.search
        if not sr.helpful:
            lines.append(f"search: no tip helped alone by {result.options.min_gain:.0%} or more; nothing to combine.")
        elif len(sr.helpful) == 1:
            lines.append(f"search: only {sr.helpful[0]} helped alone; nothing to combine.")
        else:
            steps = "; ".join(f"{'+'.join(s.tips)} {s.note}" for s in sr.steps)
            lines.append(
                f"search over {', '.join(sr.helpful)}: {steps}. Best: {'+'.join(sr.best)} ({sr.speedup:.2f}x)."
            )
    aa = result.noise_record()
    if aa is not None and aa.summary is not None and aa.summary.speedup is not None:
        lo, hi = aa.summary.speedup_ci
        ci = f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
        lines.append(
            f"noise floor: the A/A pair (the baseline against itself) measured {aa.summary.speedup:.2f}x{ci}; a pick must"
            f" gain more than {100 * (result.noise or 0.0):.1f}% and --min-gain {result.options.min_gain:.0%}, with its"
            " interval above 1.0."
        )
    for rec in result.records:
        s = rec.summary
        for r in rec.runs:
            if r.get("miss"):
                lines.append(f"{rec.variant.name} (repeat {r.get('repeat', 0) + 1}) {r['miss']}")
    for note in result.notes:
        lines.append(f"note: {note}")
    pick = result.pick
    figure = "time to target" if result.target is not None else "samples/s"
    if pick is not None:
        s = pick.summary
        if pick.variant.kind == "baseline":
            best = max(
                (
                    r
                    for r in result.records
                    if r.variant.kind not in ("baseline", "aa", "idle") and r.summary and r.summary.speedup
                ),
                key=lambda r: float(r.summary.speedup or 0.0) if r.summary is not None else 0.0,
                default=None,
            )
            why = (
                f" (fastest other: {best.variant.name}, {best.summary.picked_why})"
                if best is not None and best.summary
                else ""
            )
            lines.append(f"pick: baseline. No variant was sure to beat it{why}.")
        elif s is not None:
            extra = f", {s.sanity}" if result.target is None and s.sanity else ""
            if result.target is not None and s.decided_by:
                extra = f"; {s.decided_by}"
            lines.append(f"pick: {pick.variant.name} ({s.speedup:.2f}x {figure} over baseline, {s.picked_why}{extra}).")
    return lines


def to_json(result: BenchResult, path: str) -> None:
    """Write every raw figure (all runs of all variants, the search, the context) as JSON."""
    data = result.to_dict()
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, default=str)


def plot(result: BenchResult, path: str) -> None:
    """A PNG with two panels: speed-up over baseline (with the paired range) and the memory ratio."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    # (record, its summary, its speed-up) of the variants that ran, slowest first: drawn bottom to top
    recs = [
        (r, r.summary, r.summary.speedup)
        for r in reversed(sorted_records(result))
        if r.summary is not None and r.summary.runs_ok and r.summary.speedup
    ]
    names = [r.variant.name for r, _, _ in recs]
    speed = [x for _, _, x in recs]
    lo = [max(0.0, x - (s.speedup_range[0] or x)) for _, s, x in recs]
    hi = [max(0.0, (s.speedup_range[1] or x) - x) for _, s, x in recs]
    mem = [s.mem_ratio or 0.0 for _, s, _ in recs]
    colors = ["tab:green" if r is result.pick else ("tab:red" if not s.sane else "tab:blue") for r, s, _ in recs]
    height = max(3.0, 0.35 * len(recs) + 1.5)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    y = range(len(recs))
    ax1.barh(list(y), speed, xerr=[lo, hi], color=colors, capsize=3)
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_yticks(list(y))
    ax1.set_yticklabels(names)
    ax1.set_xlabel("samples/s over baseline (x)")
    ax2.barh(list(y), mem, color=colors)
    ax2.axvline(1.0, color="black", linewidth=0.8)
    ax2.set_xlabel("train memory over baseline (x)")
    fig.suptitle(
        f"bench on {result.info.device}: {result.info.model} ({result.meta.get('date', '')}); green = picked, red = failed sanity",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def decided_speedups(record: VariantRecord) -> dict[str, Any]:
    """The ``speedups`` keys a variant decides (dotted): what its presets set, then its own overrides.

    The user's other keys are not the variant's decision: a preset written from it leaves them out, so
    that ``--config yours.yaml --config picked.yaml`` keeps them as the user's config sets them."""
    out: dict[str, Any] = {}
    for section in preset_speedups(record.variant):
        out.update(flatten(section))
    out.update(record.variant.overrides)
    out.pop("summary", None)
    return out


#: the settings of ``lr_schedule`` that only a range test reads (``max_lr: auto``)
RANGE_TEST_KEYS = ("lr_schedule.range_test_steps", "lr_schedule.peak_divisor")


def pinned_peak(record: VariantRecord) -> Optional[tuple[float, list[float]]]:
    """The peak learning rate a written preset pins in place of the variant's ``lr_schedule.max_lr: auto``, and the
    peaks it is the median of: each completed run's, as its schedule started from the range test's pick (before any
    back-off; the pick raised to the optimizer's own lr where it was below it). ``None`` where the variant does not
    range-test (the baseline and the user's own section decide nothing), or one of its runs set no peak or several
    (parameter groups with lrs of their own keep ``auto``).

    The peak is the same measurement on the same setup each time (a fit's range test is 50 to 100 steps of it),
    so a preset that carries it saves every later fit that time; ``auto`` in the preset tests again."""
    if record.variant.kind in ("baseline", "yours") or decided_speedups(record).get("lr_schedule.max_lr") != "auto":
        return None
    ok = [r for r in record.runs if r.get("status") == "ok"]
    peaks = [r.get("range_peaks") for r in ok]
    if not ok or any(not p or len(set(p)) != 1 for p in peaks):
        return None
    values = sorted(float(p[0]) for p in peaks if p)
    return float(f"{statistics.median(values):.3g}"), values


def _replaced(result: BenchResult, decided: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{key: (the user's value, bench's value)}`` for the user's keys the pick sets to another value."""
    return {
        k: (result.user_speedups.get(k), v)
        for k, v in decided.items()
        if k in result.user_speedups_keys and result.user_speedups.get(k) != v
    }


def preset_dict(result: BenchResult, record: Optional[VariantRecord] = None) -> dict[str, Any]:
    """The ``speedups:`` section bench decided, as a preset that composes after the user's config.

    Only the keys the picked variant sets (its presets' and its own, see :func:`decided_speedups`) are
    written, and of those only the ones that change something (away from the default, or away from the
    user's value): ``fit --config yours.yaml --config picked.yaml`` is the user's config plus the pick."""
    record = record or result.pick
    if record is None:
        raise SettingError("no variant to write: the bench ran nothing.")
    if record.variant.kind not in ("baseline", "yours") and not any(r.get("status") == "ok" for r in record.runs):
        raise SettingError(f"variant {record.variant.name!r} has no completed run to take its settings from.")
    defaults = speedups_defaults()
    decided = decided_speedups(record) if record.variant.kind not in ("baseline", "yours") else {}
    pinned = pinned_peak(record)
    if pinned is not None:
        decided["lr_schedule.max_lr"] = pinned[0]
        for key in RANGE_TEST_KEYS:
            decided.pop(key, None)
    keep = {
        k: v
        for k, v in decided.items()
        if defaults.get(k, object()) != v or (k in result.user_speedups_keys and result.user_speedups.get(k) != v)
    }
    return {"speedups": nest(keep)}


def write_preset(result: BenchResult, path: str, record: Optional[VariantRecord] = None) -> str:
    """Write the picked (or given) variant as a YAML preset that ``fit --config`` accepts; returns the path.

    Its header says what bench measured, which of the user's own keys the pick sets to another value
    (and to what), and that the user's other keys are left as their config sets them."""
    import yaml

    record = record or result.pick
    data = preset_dict(result, record)
    assert record is not None
    s = record.summary
    unit = f"time to {result.target.text()}" if result.target is not None else "samples/s"
    figure = f"{s.speedup:.2f}x {unit} over baseline" if s is not None and s.speedup is not None else ""
    header = [
        f"# Written by `python -m lightning_speedups bench` on {time.strftime('%Y-%m-%d')}: the fastest variant",
        f"# that passed the sanity check on this setup: {record.variant.name} ({figure}, {result.info.device},",
        f"# {result.meta.get('cpu') or result.meta.get('gpu') or 'this machine'}).",
        "# Use: python -m lightning_speedups fit --config YOUR.yaml --config THIS.yaml",
        "# Only what bench decided is here; every other setting stays as YOUR.yaml has it.",
    ]
    written = flatten(data["speedups"])
    replaced = _replaced(result, written)
    for key, (mine, theirs) in replaced.items():
        header.append(
            f"# speedups.{key}: bench's pick sets {_yaml_value(theirs)} in place of your {_yaml_value(mine)}"
            f" (measured with {record.variant.name}); delete that key below to keep yours."
        )
    pinned = pinned_peak(record)
    if pinned is not None:
        text = (
            f"speedups.lr_schedule.max_lr: {pinned[0]:g}, the median of the peaks the range tests of its"
            f" {len(pinned[1])} run(s) set ({', '.join(f'{v:.3g}' for v in pinned[1])}): a fit starts its schedule"
            " there without a range test of its own; set it to auto to test again."
        )
        header += ["# " + line for line in textwrap.wrap(text, 100, break_on_hyphens=False)]
    kept = [k for k in result.user_speedups_keys if k not in written and k != "summary"]
    if kept:
        how = (
            " (bench timed every variant with them off: --baseline reset; --baseline yours times each tip on top of them)"
            if result.options.baseline == "reset"
            else ""
        )
        text = f"Yours, not judged here and left as you set them: {', '.join(kept)}{how}."
        header += ["# " + line for line in textwrap.wrap(text, 100, break_on_hyphens=False)]
    if record.variant.kind == "yours":
        header.append("# Your config's own speedups section was fastest: nothing to change.")
    elif not data["speedups"]:
        header.append("# The baseline was fastest: nothing to turn on.")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(header) + "\n")
        yaml.safe_dump(data, fh, sort_keys=False, default_flow_style=False)
    return path


def _yaml_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
