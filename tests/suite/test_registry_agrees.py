"""The registry and the suite agree: no setting escapes the suite, and the gap table names real tests."""

from __future__ import annotations

from typing import Any

from lightning_speedups.presets import parse_speedups
from lightning_speedups.tips import TIPS
from lightning_speedups.tips.record import KINDS
from suite.cases import BY_ID, ENTRIES
from suite.harness import nest
from suite.known_gaps import CHECKS, GAPS, PAIR_GAPS


def _value(speedups: Any, path: str) -> Any:
    value = speedups
    for name in path.split("."):
        value = getattr(value, name)
    return value


def test_every_tip_with_settings_has_a_case() -> None:
    missing = [tip.id for tip in TIPS if tip.settings and not tip.suite]
    assert not missing, f"tips with settings but no suite case: {missing}"


def test_every_setting_is_turned_on_by_some_case() -> None:
    built = [parse_speedups(nest(e.case.settings), source=e.id) for e in ENTRIES if e.case.settings]
    escaped = [
        f"{tip.id} {setting.path}"
        for tip in TIPS
        for setting in tip.settings
        if not any(setting.is_on(_value(s, setting.path)) for s in built)
    ]
    assert not escaped, f"settings no suite case turns on: {escaped}"


def test_cases_are_well_formed() -> None:
    problems = []
    for e in ENTRIES:
        c = e.case
        given = [name for name in ("settings", "callback", "function") if getattr(c, name)]
        if len(given) != 1:
            problems.append(f"{e.id}: exactly one of settings, callback, function (got {given})")
        unknown = set(c.kinds) - set(KINDS)
        if unknown:
            problems.append(f"{e.id}: unknown kinds {sorted(unknown)}")
        if c.maths not in ("unchanged", "dtype", "changed"):
            problems.append(f"{e.id}: unknown maths {c.maths!r}")
    assert not problems, "\n".join(problems)


def test_known_gaps_name_real_tests() -> None:
    stale = [key for key in GAPS if key[0] not in BY_ID or key[1] not in KINDS or key[2] not in CHECKS]
    stale += [key for key in PAIR_GAPS if key[0] not in BY_ID or key[1] not in BY_ID or key[2] not in KINDS]
    assert not stale, f"known_gaps entries that name no case, kind or check: {stale}"
