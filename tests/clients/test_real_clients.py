"""Issue 27 item 5 and issue 35 item 6: every single-device preset inside real libraries from PyPI, once through
the library's own documented way of passing callbacks and Trainer flags, once through ``LIGHTNING_SPEEDUPS`` (zero
code), and the precision presets once more on the other precision path (this CPU's bf16 kernels forced to the
opposite). With any preset, a run that plain Lightning completes completes.

A run passes when it trains (every planned step, finite losses), its losses equal the library's plain run
within the noise when the preset keeps the maths (fp32 throughout, the library's clipping and accumulation,
no schedule), and its start-up summary is true to what the Trainer did (the precision and the clipping seen
inside the training steps, the callbacks the environment path says it added).

The libraries come from the ``clients`` extra (``pip install -e '.[test,clients]'``, as ``.ci/run`` does); one
that is not installed skips with its reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
from typing import Any

import pytest

from clients.libraries import LIBRARIES, Library, Seen
from lightning_speedups.callbacks import SpeedupCallback, SpeedupsSummary
from lightning_speedups.callbacks.from_environment import SpeedupsFromEnvironment
from lightning_speedups.environment import ENV_VAR
from lightning_speedups.functional.precision import CPU_BF16_ENV, cpu_fast_bf16
from lightning_speedups.presets import list_presets, preset

STEPS = 4
#: a plan long enough for the start-up probe to repay itself (its least planned run is about 1,000 steps)
PLAN = 2000
#: the presets for one device (ddp and fsdp start several processes: tests/distributed)
PRESETS = [name for name in list_presets() if name not in ("ddp", "fsdp")]
#: parts that change the optimisation on purpose: a run with one of them active is not compared loss by loss
OPTIMISATION_PARTS = ("LRSchedule", "LargestBatch", "EffectiveBatchSize", "AdaptiveGradientClipping")


def _installed(lib: Library) -> Library:
    try:
        importlib.import_module(lib.module)
    except Exception as err:  # a library that is not installed, or does not import here, skips with the reason
        pytest.skip(f"{lib.name} is not importable ({type(err).__name__}: {err}); pip install -e '.[test,clients]'")
    return lib


_PLAIN: dict[str, Seen] = {}


def plain(lib: Library, monkeypatch: pytest.MonkeyPatch) -> Seen:
    """The library's own run, without the pack (computed once per library)."""
    if lib.name not in _PLAIN:
        monkeypatch.delenv(ENV_VAR, raising=False)
        _PLAIN[lib.name] = lib.run([], {}, STEPS)
    return _PLAIN[lib.name]


def pack_callbacks(seen: Seen) -> list[Any]:
    return [cb for cb in seen.trainer.callbacks if isinstance(cb, SpeedupCallback)]


def summary_of(seen: Seen) -> list[str]:
    found = [cb for cb in seen.trainer.callbacks if isinstance(cb, SpeedupsSummary)]
    assert len(found) == 1, f"{len(found)} start-up summaries in the Trainer"
    return found[0].lines


def truth_problems(seen: Seen, base: Seen, lines: list[str]) -> list[str]:
    """Where the summary says something the Trainer did not do."""
    problems = []
    said_bf16 = any(line.startswith("  on ") and "precision (T05)" in line and "bf16-mixed" in line for line in lines)
    ran = set(seen.precision)
    if said_bf16 and ran != {"bf16-mixed"}:
        problems.append(f"the summary says bf16-mixed, the steps ran {sorted(ran)}")
    if not said_bf16 and ran != set(base.precision):
        problems.append(
            f"the summary says no precision change, the steps ran {sorted(ran)} (plain: {base.precision[:1]})"
        )
    clip = [line for line in lines if "grad_clip (T15)" in line]
    if clip and clip[0].startswith("  on "):
        runs = re.search(r"runs gradient_clip_val=([\d.]+)", clip[0]) or re.search(r" at ([\d.]+)", clip[0])
        want = float(runs.group(1)) if runs else None
        if want is None or any(c is None or not math.isclose(float(c), want) for c in seen.clip):
            problems.append(
                f"the summary says {clip[0].strip()!r}, the steps clipped at {sorted(set(map(str, seen.clip)))}"
            )
        if want is not None and runs is None and "by norm" in clip[0]:
            over = [n for n in seen.grad_norm if n > want * (1 + 1e-3) + 1e-6]
            if over:
                problems.append(f"the summary says clipping by norm at {want}, the steps stepped with norms {over}")
    elif seen.clip != base.clip:
        problems.append(f"no clipping said, but the steps clipped at {seen.clip} (plain: {base.clip})")
    if seen.accumulate != base.accumulate and not any("accumulat" in line or "effective" in line for line in lines):
        problems.append(f"accumulation changed to {seen.accumulate} without a word")
    env = [cb for cb in seen.trainer.callbacks if isinstance(cb, SpeedupsFromEnvironment)]
    if env and env[0].active:
        said = re.search(r"(\d+) callback\(s\) added", env[0].status[1])
        added = [cb for cb in env[0].added if cb in seen.trainer.callbacks]
        if said is None or int(said.group(1)) != len(added):
            problems.append(f"the environment line says {env[0].status[1]!r}, {len(added)} are in the Trainer")
    return problems


def maths_kept(seen: Seen, base: Seen) -> bool:
    active = {type(cb).__name__ for cb in pack_callbacks(seen) if cb.active}
    return (
        set(seen.precision) <= {"32-true", "32"}
        and seen.clip == base.clip
        and seen.accumulate == base.accumulate
        and not active & set(OPTIMISATION_PARTS)
    )


def check(seen: Seen, base: Seen, what: str) -> None:
    assert len(seen.losses) == STEPS and all(math.isfinite(x) for x in seen.losses), f"{what}: losses {seen.losses}"
    lines = summary_of(seen)
    problems = truth_problems(seen, base, lines)
    if maths_kept(seen, base):
        for i, (a, b) in enumerate(zip(seen.losses, base.losses)):
            if not math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-5):
                problems.append(f"step {i}: loss {a:.6g} where the plain run had {b:.6g} (fp32, maths kept)")
                break
    assert not problems, f"{what}:\n  " + "\n  ".join(problems) + "\nsummary:\n" + "\n".join(lines)


CASES = [pytest.param(lib, name, id=f"{lib.name}-{name}") for lib in LIBRARIES for name in PRESETS]
#: the other precision path: this CPU's view of its bf16 kernels forced to the opposite (a CPU with bf16 kernels
#: where this one has none), under the presets whose precision follows it (fast's probe, transformer's auto) and
#: memory's 16-bit activations
OTHER_PATH = "0" if cpu_fast_bf16() else "1"
PRECISION_CASES = [
    pytest.param(lib, name, id=f"{lib.name}-{name}") for lib in LIBRARIES for name in ("fast", "memory", "transformer")
]


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "name"), CASES)
def test_preset_through_the_librarys_own_arguments(lib: Library, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _installed(lib)
    base = plain(lib, monkeypatch)
    monkeypatch.delenv(ENV_VAR, raising=False)
    p = preset(name)
    seen = lib.run(p.callbacks(), p.trainer_kwargs(), STEPS)
    check(seen, base, f"{lib.name} + {name} via {lib.passes}")


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "name"), CASES)
def test_preset_through_the_environment(lib: Library, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _installed(lib)
    base = plain(lib, monkeypatch)
    monkeypatch.setenv(ENV_VAR, name)
    seen = lib.run([], {}, STEPS)
    env = [cb for cb in seen.trainer.callbacks if isinstance(cb, SpeedupsFromEnvironment)]
    assert len(env) == 1 and env[0].status is not None, f"{lib.name}: the environment callback did not run"
    check(seen, base, f"{lib.name} + {ENV_VAR}={name}")


@pytest.mark.slow
@pytest.mark.parametrize("lib", LIBRARIES, ids=[lib.name for lib in LIBRARIES])
def test_fast_with_a_plan_long_enough_for_the_probe(lib: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a plan the start-up probe can repay (2,000 steps, stopped after a few as a user's stop would), the
    parts that wait for it decide on the library's own model and batches, and the summary is true to them."""
    lib = _installed(lib)
    monkeypatch.delenv(ENV_VAR, raising=False)
    base = lib.run([], {}, STEPS, plan=PLAN)
    monkeypatch.setenv(ENV_VAR, "fast")
    seen = lib.run([], {}, STEPS, plan=PLAN)
    probe = next(cb for cb in seen.trainer.callbacks if type(cb).__name__ == "AutoProbe")
    assert probe.result is not None and probe.result.steps > 0, probe.status
    check(seen, base, f"{lib.name} + {ENV_VAR}=fast over a {PLAN}-step plan")


@pytest.mark.slow
@pytest.mark.parametrize(("lib", "name"), PRECISION_CASES)
def test_the_other_precision_path(lib: Library, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same runs as if this CPU's bf16 kernels were the opposite of what they are
    (``LIGHTNING_SPEEDUPS_CPU_BF16``), over a plan the start-up probe can repay: the probe times bf16 on the
    library's model (an op with no bf16 kernel here makes that candidate fail, not the run), the Safeguard tries
    what is chosen, and the summary is true to what the steps ran."""
    lib = _installed(lib)
    monkeypatch.delenv(ENV_VAR, raising=False)
    base = lib.run([], {}, STEPS, plan=PLAN)
    monkeypatch.setenv(CPU_BF16_ENV, OTHER_PATH)
    monkeypatch.setenv(ENV_VAR, name)
    seen = lib.run([], {}, STEPS, plan=PLAN)
    check(seen, base, f"{lib.name} + {ENV_VAR}={name} with {CPU_BF16_ENV}={OTHER_PATH}")


@pytest.mark.parametrize("lib", LIBRARIES, ids=[lib.name for lib in LIBRARIES])
def test_the_library_builds_trainers_of_the_package_we_think(lib: Library, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _installed(lib)
    seen = plain(lib, monkeypatch)
    assert type(seen.trainer).__module__.startswith(lib.namespace), type(seen.trainer).__module__
    assert len(seen.losses) == STEPS


@pytest.mark.slow
@pytest.mark.parametrize("lib", LIBRARIES, ids=[lib.name for lib in LIBRARIES])
def test_schedule_free_through_the_environment(
    lib: Library, monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    """Issue 37's plan-free part in real libraries, asked for the way a user would (a YAML as LIGHTNING_SPEEDUPS):
    the fit plain Lightning completes still completes, and the summary's line is the truth: on where the library's
    optimizer now is its schedule-free twin, skipped with a reason where it has none (its own scheduler, an optimizer
    with no twin)."""
    lib = _installed(lib)
    base = plain(lib, monkeypatch)
    own = tmp_path / "schedule_free.yaml"  # type: ignore[operator]
    own.write_text("speedups:\n  schedule_free:\n    enabled: true\n")
    monkeypatch.setenv(ENV_VAR, str(own))
    seen = lib.run([], {}, STEPS)
    assert len(seen.losses) == len(base.losses) and all(math.isfinite(x) for x in seen.losses), seen.losses
    lines = [line for line in summary_of(seen) if "schedule_free (T01)" in line]
    assert lines, summary_of(seen)
    line = lines[0]
    optimizers = [type(o).__name__ for o in seen.trainer.optimizers]
    if line.startswith("  on "):
        assert any("ScheduleFree" in name for name in optimizers), (line, optimizers)
    else:
        assert "skipped" in line or "off" in line, line
        assert not any("ScheduleFree" in name for name in optimizers), (line, optimizers)
