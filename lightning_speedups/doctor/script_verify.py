"""``doctor --verify -- COMMAND``: time each finding's fix on the user's own command, as ``bench -- COMMAND`` times.

Each finding whose tip bench can time (:data:`~lightning_speedups.bench.TIP_VARIANTS`) becomes a candidate: a
one-tip YAML (``speedups: {precision: half}``) that the command gets through ``LIGHTNING_SPEEDUPS``, run in a fresh
process beside plain Lightning and its A/A twin, over paired repeats
(:class:`~lightning_speedups.bench.script.CommandBench`). Each finding then carries its measurement and is demoted
when the fix does not pay, by the rule ``doctor --verify --config`` follows
(:func:`~lightning_speedups.doctor.verify.judge`). A paying fix is said as the YAML its tip needs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional

from lightning_speedups.bench import NOT_TIMED, TIP_VARIANTS, BenchError
from lightning_speedups.bench.args import nest
from lightning_speedups.bench.script import CommandBench, Runner, ScriptBenchOptions, run_command_once
from lightning_speedups.doctor.verify import DEMOTED_SEVERITY, judge
from lightning_speedups.environment import ENV_VAR
from lightning_speedups.inspection import Measured
from lightning_speedups.inspection.findings import DEMOTING, severity_rank

__all__ = ["verify_command"]


def _yaml_for(tip: str, folder: Path) -> Path:
    import yaml

    path = folder / f"{tip}.yaml"
    path.write_text(
        f"# the fix of {tip} alone, as doctor --verify timed it\n"
        + yaml.safe_dump({"speedups": nest(TIP_VARIANTS[tip].overrides)}, sort_keys=False)
    )
    return path


def verify_command(
    command: list[str],
    doc: dict[str, Any],
    options: ScriptBenchOptions,
    fail_on: str = "high",
    runner: Runner = run_command_once,
    say: Optional[Callable[[str], None]] = None,
) -> list[str]:
    """Time the fixes of ``doc``'s findings on ``command``; mark the findings in ``doc`` (``measured``, demoted
    severities, ``verify``, ``exit_code``) and return the lines to print."""
    findings = [f for f in doc.get("findings", []) if f.get("status") == "finding"]
    for f in findings:
        if f["tip"] not in TIP_VARIANTS:
            f["measured"] = Measured(
                "not-timed", NOT_TIMED.get(f["tip"], "bench has no variant for this tip")
            ).to_dict()
    timed = [f for f in findings if f["tip"] in TIP_VARIANTS]
    report: dict[str, Any] = {"timed": [], "repeats": 0, "steps": options.steps, "noise_floor": None, "error": None}
    doc["verify"] = report
    if not timed:
        return ["verify: no finding has a fix bench can time on this command"]
    goals = {f["tip"]: TIP_VARIANTS[f["tip"]].goal for f in timed}
    options.memory_step = "memory" in goals.values()
    with tempfile.TemporaryDirectory(prefix="lightning_speedups_verify_") as folder:
        candidates = [(f"{tip} fix", str(_yaml_for(tip, Path(folder)))) for tip in goals]
        kwargs: dict[str, Any] = {"runner": runner} if say is None else {"runner": runner, "say": say}
        bench = CommandBench(command, options, candidates=candidates, **kwargs)
        try:
            bench.run()
        except BenchError as err:
            report["error"] = f"bench could not time the fixes: {str(err).splitlines()[0]}"
            for f in timed:
                f["measured"] = Measured("not-timed", report["error"], goal=goals[f["tip"]]).to_dict()
            doc["exit_code"] = 2
            return [f"verify: {report['error']}"]
        finally:
            bench.cleanup()
    report.update(repeats=bench.repeats_done, noise_floor=bench.noise, seconds=round(bench.seconds, 1))
    lines = [
        f"Verified on your command ({bench.repeats_done} paired repeats of {options.steps} steps, beside plain"
        f" Lightning; A/A noise floor {100 * bench.noise:.1f}%):"
    ]
    by_tip = {c.name.split()[0]: c for c in bench.candidates[2:]}
    for f in timed:
        tip = f["tip"]
        skipped = _not_applied(by_tip[tip].runs, tip)
        if skipped is not None:  # the part decided against its fix here: nothing was timed, nothing to demote
            measured = Measured("not-timed", f"the fix did not apply on this command: {skipped}", goal=goals[tip])
        else:
            measured = judge(by_tip[tip].summary, goals[tip], options.min_gain, bench.noise)
        if measured.demotes:
            measured.severity_before = f["severity"]
            f["severity"] = DEMOTED_SEVERITY
        f["measured"] = measured.to_dict()
        report["timed"].append(tip)
        how = ""
        if measured.verdict == "pays":
            flat = ", ".join(f"{k}: {v}" for k, v in TIP_VARIANTS[tip].overrides.items())
            how = f" -> a YAML with `speedups: {{{flat}}}` as {ENV_VAR}=that.yaml"
        lines.append(f"  {tip} {measured.verdict}: {measured.figure}{how}")
    doc["exit_code"] = _exit_code(doc["findings"], fail_on)
    return lines


def _not_applied(runs: list[dict[str, Any]], tip: str) -> Optional[str]:
    """Why the tip's part applied nothing in any completed run (``None``: it applied, or no run completed)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return None
    mine = [p for r in ok for p in r.get("parts") or [] if len(p) >= 4 and p[1] == tip]
    if any(p[2] == "active" for p in mine):
        return None
    return mine[0][3] if mine else "no part of the pack took it up"


def _exit_code(findings: list[Mapping[str, Any]], fail_on: str) -> int:
    if fail_on == "never":
        return 0
    for f in findings:
        measured = f.get("measured") or {}
        demoted = measured.get("verdict") in DEMOTING
        if f.get("status") == "finding" and not demoted and severity_rank(f["severity"]) >= severity_rank(fail_on):
            return 1
    return 0
