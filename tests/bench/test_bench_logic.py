"""bench: the logic without processes (tip planning, sanity, search, interleaving, picking, presets)."""

from __future__ import annotations

import math

import pytest
import yaml
from helpers import FakeLauncher

from lightning_speedups.bench import (
    Bench,
    BenchError,
    BenchOptions,
    main,
    reset_args,
    user_speedups_keys,
)
from lightning_speedups.bench.report import (
    preset_dict,
    render_table,
    summary_lines,
    to_json,
    write_preset,
)
from lightning_speedups.bench.stats import Spread, sanity_check, summarize
from lightning_speedups.bench.variants import (
    NOT_TIMED,
    TIP_VARIANTS,
    BudgetExhausted,
    greedy_search,
    idle_overrides,
    plan_tips,
    resolve_tips,
)
from lightning_speedups.inspection import SetupInfo
from lightning_speedups.tips import BY_ID

TINY_CNN = ["--model=helpers.TinyCNN"]
TINY_TRANSFORMER = ["--model=helpers.TinyTransformer"]


# ------------------------------------------------------------------------------------ tip planning


def test_every_tip_is_timed_or_has_a_reason():
    assert set(TIP_VARIANTS) | set(NOT_TIMED) == set(BY_ID)
    assert not set(TIP_VARIANTS) & set(NOT_TIMED)


def test_plan_tips_skips_inapplicable_with_reasons():
    cnn = SetupInfo(device="cpu", conv_modules=3, conv_bias_pairs=2, repeated_blocks=0, compile_targets=2)
    timed, skipped = plan_tips(cnn)
    assert timed == ["T02", "T05", "T06", "T16", "T22", "T24"]
    assert "CUDA" in skipped["T07"] and "cpu" in skipped["T07"]
    assert "repeated blocks" in skipped["T09"]
    transformer = SetupInfo(device="cuda", conv_modules=0, conv_bias_pairs=0, repeated_blocks=2, compile_targets=3)
    timed, skipped = plan_tips(transformer)
    assert "T24" not in timed and "convolutions" in skipped["T24"]
    assert "T16" not in timed and "BatchNorm" in skipped["T16"]
    assert {"T03", "T07", "T09"} <= set(timed)


def test_plan_tips_restricted_and_part_that_failed_to_inspect():
    info = SetupInfo(device="cpu", conv_modules=None, errors={"channels_last": "ImportError: boom"})
    timed, skipped = plan_tips(info, ["T24", "T06"])
    assert timed == ["T06"]
    assert "ImportError: boom" in skipped["T24"]
    assert set(skipped) == {"T24"}


def test_idle_overrides_are_the_parts_with_nothing_to_do():
    info = SetupInfo(device="cpu", conv_modules=0, conv_bias_pairs=0, repeated_blocks=2, compile_targets=3)
    _, skipped = plan_tips(info)
    idle = idle_overrides(info, skipped)
    assert idle == {
        "loaders.pin_memory": True,
        "cudnn_benchmark": "on",
        "conv_bias": True,
        "channels_last": True,
        "tf32": "auto",
    }


def test_resolve_tips_ids_slugs_commas_and_unknown():
    assert resolve_tips(["t24", "fusion,T06"]) == ["T24", "T22", "T06"]
    assert resolve_tips(None) is None
    with pytest.raises(KeyError, match="T99"):
        resolve_tips(["T99"])


# ------------------------------------------------------------------------------------ sanity


def test_sanity_check():
    assert sanity_check(2.1, 2.0, 0.25)[0]
    ok, why = sanity_check(3.0, 2.0, 0.25)
    assert not ok and "tolerance" in why
    assert not sanity_check(float("nan"), 2.0, 0.25)[0]
    assert not sanity_check(float("inf"), 2.0, 0.25)[0]
    assert sanity_check(0.02, 0.0, 0.25)[0]  # absolute floor near zero
    assert sanity_check(None, 2.0, 0.25)[0]  # manual optimisation: nothing to compare


def test_summarize_and_spread():
    runs = [
        {"status": "ok", "samples_per_s": 100.0, "step_s": 0.1, "loss": 1.0, "repeat": 0},
        {"status": "ok", "samples_per_s": 110.0, "step_s": 0.09, "loss": 1.1, "repeat": 1},
        {"status": "failed", "reason": "out of memory", "repeat": 2},
    ]
    s = summarize(runs)
    assert (s.runs_ok, s.runs_failed) == (2, 1)
    assert s.samples_per_s.median == pytest.approx(105.0)
    assert s.samples_per_s.pct == pytest.approx(100 * 10 / (2 * 105))
    assert summarize([runs[2]]).failure == "out of memory"
    assert Spread.of([None, float("nan")]).median is None


# ------------------------------------------------------------------------------------ search


def test_greedy_search_with_injected_timings():
    singles = {"T24": 1.20, "T22": 1.40, "T16": 1.05, "T05": 0.85, "T06": None}
    combos = {("T22", "T24"): 1.62, ("T16", "T22", "T24"): 1.63}  # T16 adds < 2 %: dropped
    calls = []

    def measure(tips):
        calls.append(tips)
        return combos[tips]

    r = greedy_search(singles, measure, min_gain=0.02)
    assert r.helpful == ["T22", "T24", "T16"]
    assert calls == [("T22", "T24"), ("T16", "T22", "T24")]
    assert r.best == ("T22", "T24") and r.speedup == pytest.approx(1.62)
    assert [s.accepted for s in r.steps] == [True, False]


def test_greedy_search_insane_combination_is_not_kept():
    r = greedy_search({"A": 1.3, "B": 1.2}, lambda tips: None)
    assert r.best == ("A",) and r.speedup == pytest.approx(1.3)
    assert r.steps[0].accepted is False


def test_greedy_search_nothing_helps_and_budget_stops():
    assert greedy_search({"A": 0.9, "B": 1.01}, lambda t: 2.0).best == ()

    def out_of_budget(tips):
        raise BudgetExhausted()

    r = greedy_search({"A": 1.3, "B": 1.2, "C": 1.1}, out_of_budget)
    assert r.best == ("A",) and len(r.steps) == 1 and "budget" in r.steps[0].note


# ------------------------------------------------------------------------------------ the runner, with a fake launcher


@pytest.fixture(autouse=True)
def _bench_dir(tmp_path, monkeypatch):
    """Bench's working folder inside the test's tmp_path (nothing left in /tmp)."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


def _bench(launcher, **kw):
    opts = dict(args=TINY_CNN, steps=2, warmup=1, repeats=2, presets=["none"], progress=False)
    opts.update(kw)
    bench = Bench(BenchOptions(**opts), launcher=launcher, clock=launcher.clock)
    bench.prepare()
    return bench


def test_runner_interleaves_repeats_and_picks_fastest_sane():
    rates = {
        "baseline": 100.0,
        "T24 channels-last": 120.0,
        "T22 fusion": 150.0,
        "T16 conv-bias": 101.0,
        "T22+T24": 170.0,
    }
    fake = FakeLauncher(rates, losses={"T05 amp": float("nan")}, fail={"T06 optimizer"})
    bench = _bench(fake, extras=False)
    result = bench.run()
    names = [r.variant.name for r in result.records if r.phase == 1]
    assert names[0] == "baseline" and "T24 channels-last" in names and "T09 activation-checkpointing" not in names
    # round-robin: every phase-1 variant runs once before any runs a second time
    n = len(names)
    assert sorted(fake.calls[:n]) == sorted(names) and sorted(fake.calls[n : 2 * n]) == sorted(names)
    assert fake.calls[n : 2 * n] != fake.calls[:n]  # rotated order in the second repeat
    # the failed variant is recorded, the insane one never picked, the search combined the two winners
    t06 = result.record("T06 optimizer")
    assert t06.summary.failure.startswith("out of memory")
    t05 = result.record("T05 amp")
    assert not t05.summary.sane
    assert result.search.best == ("T22", "T24")
    combo = result.record("T22+T24")
    assert combo.phase == 2 and combo.summary.speedup == pytest.approx(1.7)
    assert any(c.startswith("baseline (phase 2") for c in fake.calls)
    assert result.pick is combo


def test_pick_ignores_a_combination_the_search_dropped():
    # T05+T22+T24 measures 1.71 vs 1.70 for T22+T24: under the 2 % minimum gain, so T22+T24 is picked
    rates = {
        "baseline": 100.0,
        "T24 channels-last": 120.0,
        "T22 fusion": 150.0,
        "T05 amp": 110.0,
        "T22+T24": 170.0,
        "T05+T22+T24": 171.0,
    }
    result = _bench(FakeLauncher(rates), extras=False, tips=["T05", "T22", "T24"]).run()
    assert [s.accepted for s in result.search.steps] == [True, False]
    assert result.pick.variant.name == "T22+T24"
    lines = summary_lines(result)
    assert any(line.startswith("pick: T22+T24") for line in lines)


def test_runner_picks_baseline_when_nothing_helps(tmp_path):
    fake = FakeLauncher({"baseline": 100.0}, losses={})
    result = _bench(fake, tips=["T24", "T06"]).run()
    assert result.pick.variant.kind == "baseline"
    path = write_preset(result, str(tmp_path / "p.yaml"))
    data = yaml.safe_load(open(path))
    assert data == {"speedups": {}}  # nothing decided: nothing that could override the user's own keys


def test_runner_budget_too_small_after_baseline_keeps_the_baselines_figures():
    fake = FakeLauncher({"baseline": 100.0}, wall=15.0)
    result = _bench(fake, budget=25.0).run()
    assert fake.calls == ["baseline"]  # nothing else fits: not run, not refused
    base = result.records[0]
    assert base.summary.samples_per_s.median == 100.0
    assert any("left no time for a variant" in n and "give at least 36 s" in n for n in result.notes)
    assert all(r.skipped and "--budget" in r.skipped for r in result.records[1:])


def _timed_out(timeout):
    """What the launcher returns for a run it stopped at ``timeout``."""
    return {
        "status": "failed",
        "reason": f"timed out after {timeout:.0f} s",
        "timed_out": True,
        "timeout_s": timeout,
        "wall_s": timeout,
    }


def test_a_baseline_that_times_out_is_a_timeout_with_what_to_give():
    class Slow(FakeLauncher):
        def run(self, spec, name, timeout=None):
            self.calls.append(spec["variant"])
            self.now += timeout
            return _timed_out(timeout)

    fake = Slow({"baseline": 100.0})
    with pytest.raises(BenchError) as err:
        _bench(fake, budget=60.0).run()
    text = str(err.value)
    assert "stopped at 30 s" in text and "a time-out, not a failure to train" in text and "does not train" not in text
    assert "--budget" in text and "--steps" in text and "--timeout" in text


def test_a_run_the_budget_stops_says_so_not_that_the_variant_failed():
    class SlowVariant(FakeLauncher):
        def run(self, spec, name, timeout=None):
            if spec["variant"] == "baseline":
                return super().run(spec, name, timeout)
            self.calls.append(spec["variant"])
            self.now += timeout
            return _timed_out(timeout)

    fake = SlowVariant({"baseline": 100.0}, wall=10.0)
    result = _bench(fake, tips=["T24"], budget=80.0, repeats=1, search=False, extras=False).run()
    run = result.record("T24 channels-last").runs[0]
    assert run["reason"] == "stopped after 75 s when the --budget ran out (not a fault of the variant)"
    assert result.records[0].runs[0]["status"] == "ok"


def test_runner_budget_reduces_repeats_and_skips():
    fake = FakeLauncher({"baseline": 100.0}, wall=10.0)
    result = _bench(fake, budget=45.0, repeats=3, search=False, extras=False).run()
    assert any("1 repeat(s) instead of 3" in note for note in result.notes)
    assert len(fake.calls) == 4  # 40 s of runs in a 45 s budget
    skipped = [r for r in result.records if r.skipped]
    assert skipped and all("--budget" in r.skipped for r in skipped)
    assert fake.calls[0] == "baseline"


def test_json_and_table(tmp_path, capsys):
    import json

    from rich.console import Console

    fake = FakeLauncher({"baseline": 100.0, "T24 channels-last": 125.0})
    result = _bench(fake, tips=["T24"]).run()
    path = tmp_path / "b.json"
    to_json(result, str(path))
    data = json.loads(path.read_text())
    assert {"meta", "options", "setup", "variants", "search", "pick", "memory_figure", "skipped_tips"} <= set(data)
    base = data["variants"][0]
    assert base["name"] == "baseline" and len(base["runs"]) == 2
    assert base["summary"]["samples_per_s"]["median"] == 100.0
    t24 = next(v for v in data["variants"] if v["name"] == "T24 channels-last")
    assert t24["summary"]["speedup"] == pytest.approx(1.25) and t24["overrides"] == {"channels_last": True}
    console = Console(width=200, record=True)
    render_table(result, console)
    assert "T24 channels-last" in console.export_text()
    from lightning_speedups.bench.report import markdown

    md = markdown(result)
    assert (
        md.splitlines()[0].startswith("| variant | speed-up [95% CI] |")
        and "| T24 channels-last (picked) | 1.25x" in md
    )


# ------------------------------------------------------------------------------------ presets and the reset


def test_user_keys_and_reset_give_the_baseline(tmp_path):
    from lightning_speedups.config import Speedups
    from lightning_speedups.session import build

    cfg = tmp_path / "mine.yaml"
    cfg.write_text("speedups:\n  channels_last: true\n  compile:\n    enabled: true\n")
    args = TINY_CNN + ["--config", str(cfg), "--speedups.optimizer=auto"]
    keys = user_speedups_keys(args)
    assert set(keys) == {"channels_last", "compile.enabled", "optimizer"}
    cli = build(args + reset_args(keys))
    assert cli._get(cli.config_init, "speedups") == Speedups()


def test_written_preset_round_trips_through_build(tmp_path):
    from lightning_speedups.session import build

    cfg = tmp_path / "mine.yaml"
    cfg.write_text("speedups:\n  precision: half\n")
    fake = FakeLauncher({"baseline": 100.0, "T24 channels-last": 130.0})
    result = _bench(fake, args=TINY_CNN + ["--config", str(cfg)], tips=["T24"], extras=False).run()
    assert result.pick.variant.name == "T24 channels-last"
    path = write_preset(result, str(tmp_path / "fastest.yaml"))
    # only what bench decided: the user's own precision is not its decision and stays as they set it
    assert preset_dict(result) == {"speedups": {"channels_last": True}}
    assert "Yours, not judged here and left as you set them: precision" in open(path).read()
    cli = build(TINY_CNN + ["--config", str(cfg), "--config", path])
    speedups = cli._get(cli.config_init, "speedups")
    assert speedups.channels_last is True and speedups.precision == "half"


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tips", "T99"], "unknown tip"),
        (["--budget", "1"], "too small to run one variant"),
        (["--steps", "0"], "--steps"),
        (["--presets", "nosuch"], "unknown preset"),
        (["--model=nosuch_module.Model"], "does not build"),
        (["--model=helpers.TinyCNN", "--model.lr=oops"], "does not build"),
    ],
)
def test_bad_input_exits_2(argv, message, capsys):
    assert main(argv + ["--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_cuda_requested_without_cuda(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(TINY_CNN + ["--device", "cuda", "--no-progress"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_transformer_setup_skips_conv_tips():
    bench = Bench(BenchOptions(args=TINY_TRANSFORMER, presets=["none"], progress=False), launcher=FakeLauncher({}))
    bench.prepare()
    assert "T24" in bench.skipped_tips and "T16" in bench.skipped_tips
    idle = next(v for v in bench.variants if v.kind == "idle")
    assert idle.overrides["channels_last"] is True and idle.overrides["conv_bias"] is True
    assert math.isfinite(len(bench.variants))


@pytest.mark.parametrize("baseline", ["reset", "yours"])
def test_baseline_yours_keeps_the_users_speedups_and_adds_each_tip_on_top(baseline):
    """``--baseline reset`` turns off what the user's config turns on; ``yours`` keeps it (doctor --verify)."""
    fake = FakeLauncher({"baseline": 100.0})
    options = BenchOptions(
        args=["--speedups.channels_last=true"],
        tips=["T16"],
        presets=["none"],
        repeats=1,
        steps=2,
        warmup=0,
        search=False,
        extras=False,
        progress=False,
        noise_pair=False,
        baseline=baseline,
    )
    Bench(options, launcher=fake, clock=fake.clock).run()
    by_name = {spec["variant"]: spec for spec in fake.specs}
    # "yours" is a variant of its own beside a reset baseline, and not beside a baseline that is yours
    assert set(by_name) == {"baseline", "T16 conv-bias"} | ({"yours"} if baseline == "reset" else set())
    base_args, tip_args = by_name["baseline"]["args"], by_name["T16 conv-bias"]["args"]
    reset = "--speedups.channels_last=false"
    assert (reset in base_args) == (baseline == "reset") and (reset in tip_args) == (baseline == "reset")
    assert by_name["T16 conv-bias"]["speedups_overrides"] == {"conv_bias": True}


def test_an_unknown_baseline_is_refused_with_the_choices():
    with pytest.raises(BenchError, match="--baseline must be one of reset, yours"):
        BenchOptions(baseline="mine").validate()


def test_the_timed_window_starts_with_the_garbage_collected_and_the_warm_up_frozen():
    """A full collection over the process's objects took 250 ms at one timed step of some variants and not others
    (T16 measured 4.5x samples/s for it). The probe collects and freezes at the end of the warm-up, so the timed
    steps run with the warm-up's objects out of the collector's reach, and gives them back when the fit ends."""
    import gc

    import lightning.pytorch as pl
    import torch
    from helpers import quiet_trainer
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_speedups.bench.measure import BenchProbe

    frozen: list[int] = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            frozen.append(gc.get_freeze_count())

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)

    gc.unfreeze()
    probe = BenchProbe(warmup=2, steps=3, memory_step=False)
    quiet_trainer(max_steps=20, callbacks=[probe, Spy()]).fit(Model())
    assert frozen[:2] == [0, 0] and all(n > 0 for n in frozen[2:5]), frozen
    assert gc.get_freeze_count() == 0 and probe.results()["completed"]


def test_the_busy_note_takes_the_benchs_own_last_run_out_of_the_load_at_the_end(monkeypatch):
    """A bench alone on 2 cores ended at a load average of 2.2, most of it its own last run's 2 threads, and called
    the machine busy. Its own threads are taken out of the end's load; another process's load still counts."""
    from lightning_speedups.bench.machine import busy_note

    meta = {"cpus_usable": 2, "torch_threads": 2, "load_average": (0.3, 0.3, 0.3)}
    monkeypatch.setattr("os.getloadavg", lambda: (2.2, 1.3, 1.3))
    assert busy_note(dict(meta)) is None
    monkeypatch.setattr("os.getloadavg", lambda: (4.5, 3.0, 2.0))  # two more threads of someone else's
    note = busy_note(dict(meta))
    assert note is not None and "a load average of 2.5 from other processes on 2 CPUs" in note
    monkeypatch.setattr("os.getloadavg", lambda: (2.2, 1.3, 1.3))
    assert busy_note({**meta, "load_average": (2.6, 2.0, 1.0)}) is not None  # busy before it started
