"""Issue 36, item 4: ``bench [options] -- COMMAND`` times the presets on the user's own command (a plain ``train.py``,
either Lightning package), each candidate in its own process through ``LIGHTNING_SPEEDUPS``, paired with plain
Lightning and its A/A twin; the pick is printed as the value to set and written as the YAML that variable takes.
``doctor --verify -- COMMAND`` times the findings' fixes the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import refused_in_process

from lightning_speedups.bench import BenchError
from lightning_speedups.bench.script import (
    PLAIN,
    PLAIN_AA,
    CommandBench,
    ScriptBenchOptions,
    applicable_presets,
    write_env_preset,
)
from lightning_speedups.presets import preset

SCRIPT = """
import sys

import {pkg} as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential({layers})

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x).flatten(1), y)

    def validation_step(self, batch, batch_idx):
        self.log("val_score", float(self.global_step))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def fit(val=False):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, {shape}), torch.randint(0, 2, (512,)))
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, val_check_interval=4 if val else 1.0,
                         limit_val_batches=1 if val else 0, num_sanity_val_steps=0)
    loader = DataLoader(data, batch_size=16)
    trainer.fit(Net(), loader, loader if val else None)
    print("SCRIPT global_step", trainer.global_step)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "fit"
    if mode == "fails-first":
        raise ValueError("my script cannot find its data")
    if mode == "no-fit":
        sys.exit(0)
    if mode == "twice":
        fit()
    fit(val=mode == "val")
"""
MLP = dict(layers="nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2)", shape="32")
CNN = dict(
    layers="nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)", shape="3, 8, 8"
)

LAUNCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT.format(pkg="lightning.pytorch", **MLP))
    (tmp_path / "train_pl.py").write_text(SCRIPT.format(pkg="pytorch_lightning", **MLP))
    (tmp_path / "train_cnn.py").write_text(SCRIPT.format(pkg="lightning.pytorch", **CNN))
    return tmp_path


def env_of(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_SPEEDUPS") and k not in LAUNCH_VARS}
    env.update(extra or {})
    return env


def run(folder: Path, *args: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lightning_speedups", *args],
        cwd=folder,
        env=env_of(env),
        capture_output=True,
        text=True,
        timeout=600,
    )


# ------------------------------------------------------------------------------ the decision, on fake runs
class FakeRuns:
    """A runner that returns given throughputs per candidate value (``None``: plain), optionally per repeat."""

    def __init__(self, rates: dict[Optional[str], Any], facts: Optional[dict[str, Any]] = None, loss: float = 1.0):
        self.rates = rates
        self.facts = facts or {"model": "Net", "convolutions": 0, "attention": 0}
        self.loss = loss
        self.calls: list[tuple[Optional[str], str]] = []
        self.losses: dict[Optional[str], float] = {}

    def __call__(self, command, value, watch, folder, timeout, grace):
        self.calls.append((value, Path(folder).name))
        n = sum(1 for v, _ in self.calls if v == value)
        rate = self.rates[value]
        if isinstance(rate, Exception):
            return {"status": "failed", "reason": str(rate)}
        if isinstance(rate, list):
            rate = rate[(n - 1) % len(rate)]
        return {
            "status": "ok",
            "samples_per_s": rate,
            "step_s": 1 / rate,
            "loss": self.losses.get(value, self.loss),
            "facts": self.facts,
            "parts": [],
        }


def bench_with(runs: FakeRuns, **options: Any) -> CommandBench:
    opts = ScriptBenchOptions(**{"repeats": 3, **options})
    b = CommandBench(["python", "train.py"], opts, runner=runs, say=lambda text: None)
    b.run()
    return b


def test_the_pick_is_the_fastest_candidate_that_clears_the_noise_and_the_sanity_check():
    runs = FakeRuns({None: [100, 101, 99], "fast": [130, 128, 131], "memory": [150, 149, 151]})
    runs.losses["memory"] = 9.0  # faster, but its loss is off plain's: never the pick
    b = bench_with(runs)
    names = [c.name for c in b.candidates]
    assert names == [PLAIN, PLAIN_AA, "fast", "memory"]
    assert b.pick is not None and b.pick.name == "fast" and b.pick.value == "fast"
    memory = b.candidates[3]
    assert not memory.pickable and "sanity" in memory.why
    assert 1.25 < b.pick.summary.speedup < 1.35


def test_the_loss_check_widens_to_what_plain_lightning_differs_from_itself_by():
    """A library that samples random windows unseeded: two plain runs differ in loss by 16%; a preset 30% off is
    within twice that, one 80% off is not."""
    runs = FakeRuns({None: [100, 101, 99], "fast": [130, 128, 131], "memory": [130, 129, 131]})

    def runner(command, value, watch, folder, timeout, grace):
        out = runs(command, value, watch, folder, timeout, grace)
        if value is None:  # plain -0.30, its A/A twin -0.35 (the folder names the candidate)
            out["loss"] = -0.35 if "A_A" in Path(folder).name else -0.3
        return out

    runs.losses.update({"fast": -0.39, "memory": -0.54})
    opts = ScriptBenchOptions(repeats=3)
    b = CommandBench(["python", "train.py"], opts, runner=runner, say=lambda text: None)
    b.run()
    assert 0.33 < b.loss_tolerance < 0.34
    fast, memory = b.candidates[2], b.candidates[3]
    assert fast.summary.sane and b.pick is fast
    assert not memory.summary.sane and "sanity" in memory.why


def test_a_slower_or_noisy_candidate_is_never_picked_plain_lightning_stays():
    b = bench_with(FakeRuns({None: [100, 100, 100], "fast": [90, 92, 91], "memory": [60, 170, 100]}))
    assert b.pick is None
    assert "slower" in b.candidates[2].why
    assert "includes 1.0" in b.candidates[3].why


def test_each_repeat_runs_every_candidate_in_another_order_after_one_first_plain_run():
    runs = FakeRuns({None: 100, "fast": 120, "memory": 100})
    bench_with(runs, repeats=3)
    assert runs.calls[0] == (None, "plain-first")
    repeats = [runs.calls[1 + 4 * r : 5 + 4 * r] for r in range(3)]
    firsts = [names[0][1] for names in repeats]
    assert firsts == ["plain-r0", "plain__A_A_-r1", "fast-r2"]
    assert all(len({name for _, name in names}) == 4 for names in repeats)


def test_the_presets_that_apply_follow_what_the_command_built():
    run_mlp, left = applicable_presets({"model": "Net", "convolutions": 0, "attention": 0}, target=False)
    assert run_mlp == ["fast", "memory"] and "convolution" in left["cnn"] and "attention" in left["transformer"]
    assert "strategy" in left["ddp"] and "strategy" in left["fsdp"]
    run_cnn, _ = applicable_presets({"convolutions": 2, "attention": 0}, target=False)
    assert "cnn" in run_cnn and "transformer" not in run_cnn
    assert applicable_presets({}, target=True)[0][0] == "fast+converge"


def test_a_failed_candidate_is_reported_and_not_picked():
    b = bench_with(FakeRuns({None: 100, "fast": RuntimeError("boom"), "memory": 101}))
    fast = b.candidates[2]
    assert fast.summary.runs_ok == 0 and fast.summary.failure == "boom" and not fast.pickable


def test_a_command_that_fails_without_the_pack_is_refused_with_its_own_lines():
    runs = FakeRuns({None: RuntimeError("the command exited with code 1")})
    with pytest.raises(BenchError, match="did not complete its first fit without the pack"):
        bench_with(runs)


def test_a_budget_too_small_for_two_repeats_names_the_flag():
    clock = iter(range(0, 10_000, 10))
    runs = FakeRuns({None: 100, "fast": 100, "memory": 100})
    opts = ScriptBenchOptions(budget=30)
    b = CommandBench(["python", "t.py"], opts, runner=runs, say=lambda t: None, clock=lambda: float(next(clock)))
    with pytest.raises(BenchError, match="--budget"):
        b.run()


def test_an_interrupted_repeat_is_left_out_whole_so_every_ratio_stays_paired():
    class Interrupting(FakeRuns):
        def __call__(self, *args):
            if len(self.calls) == 7:  # the first plain run, repeat 0 (4 runs), then 2 runs into repeat 1
                raise KeyboardInterrupt
            return super().__call__(*args)

    b = bench_with(Interrupting({None: 100, "fast": 120, "memory": 100}))
    assert b.interrupted and b.repeats_done == 1
    assert all(len(c.runs) == 1 for c in b.candidates)


def test_the_written_preset_is_what_the_variable_takes(tmp_path: Path):
    b = bench_with(FakeRuns({None: [100, 101, 99], "fast": [130, 128, 131], "memory": [100, 99, 101]}))
    path = write_env_preset(str(tmp_path / "best.yaml"), b)
    text = Path(path).read_text()
    assert f"LIGHTNING_SPEEDUPS={path} python train.py" in text
    assert preset(path).parts() == preset("fast").parts()
    plain = bench_with(FakeRuns({None: 100, "fast": 100, "memory": 100}))
    empty = write_env_preset(str(tmp_path / "plain.yaml"), plain)
    assert preset(empty).parts() == set() and "keep LIGHTNING_SPEEDUPS unset" in Path(empty).read_text()


# ------------------------------------------------------------------------------ the user's path, real commands
@pytest.mark.parametrize(("script", "repeats"), [("train.py", 2), ("train_pl.py", 1)])
def test_bench_on_a_plain_script_times_each_candidate_in_its_own_process(folder: Path, script: str, repeats: int):
    done = run(
        folder,
        "bench", "--steps", "4", "--warmup", "1", "--repeats", str(repeats), "--presets", "memory",
        "--json", "bench.json", "--write-preset", "best.yaml", "--", sys.executable, script,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    doc = json.loads((folder / "bench.json").read_text())
    assert doc["version"] == 1 and doc["mode"] == "throughput" and doc["repeats"] == repeats
    assert [c["name"] for c in doc["candidates"]] == [PLAIN, PLAIN_AA, "memory"]
    assert doc["watched"]["package"] == script.replace("train.py", "lightning").replace(
        "train_pl.py", "pytorch_lightning"
    )
    for c in doc["candidates"]:
        assert [r["status"] for r in c["runs"]] == ["ok"] * repeats, c
        for r in c["runs"]:
            assert len(r["step_times"]) == 4 and r["samples_per_s"] > 0
            active = {p[0] for p in r["parts"] if p[2] == "active"}
            # plain runs have none of the pack's parts; the preset's run has them, applied
            assert (active == set()) if c["LIGHTNING_SPEEDUPS"] is None else ("environment" in active), r["parts"]
    memory_runs = doc["candidates"][2]["runs"]
    assert any("precision" in p[0] for r in memory_runs for p in r["parts"] if p[2] == "active")
    assert "LIGHTNING_SPEEDUPS" in done.stdout and "noise floor" in done.stdout
    # the written preset, fed back to the same command as the variable, runs it to its end
    fed = subprocess.run(
        [sys.executable, script], cwd=folder, env=env_of({"LIGHTNING_SPEEDUPS": "./best.yaml"}),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert fed.returncode == 0 and "SCRIPT global_step 64" in fed.stdout, fed.stderr[-2000:]


def test_bench_picks_cnn_only_for_a_model_with_convolutions_and_times_the_nth_trainer(folder: Path):
    done = run(folder, "bench", "--steps", "2", "--warmup", "1", "--repeats", "1", "--trainer", "2",
               "--presets", "memory", "--json", "b.json", "--", sys.executable, "train_cnn.py", "twice")  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    doc = json.loads((folder / "b.json").read_text())
    assert doc["watched"]["trainer"] == 2 and doc["watched"]["convolutions"] == 1
    assert all(r["trainer"] == 2 for c in doc["candidates"] for r in c["runs"])
    run_cnn, _ = applicable_presets(doc["watched"], target=False)
    assert "cnn" in run_cnn


def test_bench_to_a_target_on_a_script(folder: Path):
    done = run(folder, "bench", "--target", "val_score=8", "--repeats", "1", "--presets", "memory",
               "--json", "t.json", "--", sys.executable, "train.py", "val")  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    doc = json.loads((folder / "t.json").read_text())
    assert doc["mode"] == "target"
    for c in doc["candidates"]:
        for r in c["runs"]:
            assert r["reached"] and r["steps_to_target"] == 8, r  # validation every 4 steps: 0, 4, 8
            assert r["status"] == "ok"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0", "--", "python", "train.py"], "--steps must be at least 1"),
        (["--presets", "fastest", "--", "python", "train.py"], "unknown preset 'fastest'"),
        (["--target", "val_acc", "--", "python", "train.py"], "--target"),
        (["--", "python", "missing.py"], "no script 'missing.py'"),
        (["--"], "nothing after `--`"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_run(
    folder: Path, args: list[str], message: str, monkeypatch, capsys
):
    code, _, err = refused_in_process(folder, monkeypatch, capsys, "bench", *args)
    assert code == 2 and message in err, err
    assert "Traceback" not in err and "bench: plain" not in err


def test_a_script_that_fails_or_builds_no_trainer_is_said_as_such(folder: Path):
    failed = run(folder, "bench", "--steps", "2", "--", sys.executable, "train.py", "fails-first")
    assert failed.returncode == 2 and "did not complete its first fit without the pack" in failed.stderr
    assert "my script cannot find its data" in failed.stderr  # its own last lines
    nothing = run(folder, "bench", "--steps", "2", "--", sys.executable, "train.py", "no-fit")
    assert nothing.returncode == 2 and "the command built no Trainer" in nothing.stderr


def test_doctor_verify_times_the_findings_fixes_on_the_command(folder: Path):
    done = run(folder, "doctor", "--steps", "4", "--no-lint", "--verify", "--verify-steps", "3", "--verify-repeats",
               "2", "--json", "v.json", "--", sys.executable, "train.py")  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-3000:]
    doc = json.loads((folder / "v.json").read_text())
    assert doc["verify"]["repeats"] == 2 and doc["verify"]["error"] is None
    timed = doc["verify"]["timed"]
    assert timed, doc["verify"]
    assert "Verified on your command" in done.stdout
    for f in doc["findings"]:
        if f["tip"] in timed:
            assert f["measured"]["verdict"] in ("pays", "no-gain", "slower", "failed", "not-timed")
            if f["measured"]["verdict"] in ("no-gain", "slower", "failed"):
                assert f["severity"] == "low" and f["measured"]["severity_before"]


def test_each_run_gets_the_candidates_variable_and_nothing_of_the_users(tmp_path: Path, monkeypatch):
    """Plain Lightning is plain even when the user's shell exports LIGHTNING_SPEEDUPS; a candidate naming the doctor
    gets the doctor's options with its own folder (the doctor's cost timed as a candidate)."""
    from lightning_speedups.bench.script import run_command_once

    monkeypatch.setenv("LIGHTNING_SPEEDUPS", "fast")
    monkeypatch.setenv("LIGHTNING_SPEEDUPS_DOCTOR", '{"steps": 99}')
    dump = "import json, os, sys; json.dump({k: v for k, v in os.environ.items() if 'SPEEDUPS' in k}, open(sys.argv[1], 'w'))"
    seen = {}
    for value in (None, "memory", "doctor"):
        out = tmp_path / f"env-{value}.json"
        result = run_command_once(
            [sys.executable, "-c", dump, str(out)],
            value,
            {"steps": 3, "doctor": {"steps": 7}},
            tmp_path / str(value),
            60,
            1,
        )
        assert result["status"] == "failed" and result["reason"] == "the command built no Trainer"
        seen[value] = json.loads(out.read_text())
    assert "LIGHTNING_SPEEDUPS" not in seen[None] and "LIGHTNING_SPEEDUPS_DOCTOR" not in seen[None]
    assert json.loads(seen[None]["LIGHTNING_SPEEDUPS_BENCH"])["steps"] == 3
    assert seen["memory"]["LIGHTNING_SPEEDUPS"] == "memory" and "LIGHTNING_SPEEDUPS_DOCTOR" not in seen["memory"]
    doctor = json.loads(seen["doctor"]["LIGHTNING_SPEEDUPS_DOCTOR"])
    assert doctor["steps"] == 7 and doctor["out"] == str(tmp_path / "doctor" / "doctor")
