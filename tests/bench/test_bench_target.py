"""bench --target and the confidence intervals: injected figures and fake clocks, no wall-clock assertion."""

from __future__ import annotations

import dataclasses
import gzip
import math
import struct

import numpy as np
import pytest
import yaml
from helpers import nested_speedups

from lightning_speedups.bench import Bench, BenchError, BenchOptions
from lightning_speedups.bench.report import markdown, summary_lines, write_preset
from lightning_speedups.bench.stats import VariantSummary, pick_verdict, ratio_interval
from lightning_speedups.bench.target import Target, TargetProbe, parse_target
from lightning_speedups.bench.variants import NOT_TIMED, TARGET_VARIANTS, target_tip_variants
from lightning_speedups.functional.lr_range import pick_peak_lr, steepest_lr

TINY_CNN = ["--model=helpers.TinyCNN"]


@pytest.fixture(autouse=True)
def _bench_dir(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


class FakeLauncher:
    """Made-up results: ``figures[variant][repeat]`` is samples/s (throughput) or the time to target
    (target mode; ``None`` = a miss). Each run advances the fake clock by one second, or by ``walls[variant]``."""

    def __init__(self, figures, target=False, walls=None):
        self.figures = figures
        self.walls = walls or {}
        self.target = target
        self.calls: list[tuple[str, int]] = []
        self.now = 0.0

    def clock(self):
        return self.now

    def run(self, spec, name, timeout=None):
        v = spec["variant"]
        repeat = int(name.rsplit("-r", 1)[1])
        self.calls.append((v, spec["seed"]))
        key = "baseline" if v.startswith("baseline") else v
        wall = self.walls.get(key, 1.0)
        self.now += wall
        value = self.figures.get(key, self.figures["baseline"])[repeat]
        flat_at = None
        if isinstance(
            value, tuple
        ):  # ("flat", s): the probe stopped it at s of training, its curve flat after annealing
            flat_at, value = value[1], None
        out = {"status": "ok", "speedups": nested_speedups(spec["speedups_overrides"]), "wall_s": wall, "loss": 2.0}
        if self.target and spec["target"] is None:  # a samples/s run of target mode's stack phase
            value = self.figures.get("samples/s", {}).get(v, [100.0] * 8)[repeat]
            out.update(samples_per_s=value, step_s=64 / value, step_times=[64 / value] * 3, train_mem_bytes=1000)
            return out
        if self.target:
            cap = spec["target_max_time"]
            if value is not None and value > cap:  # the worker's probe stops the run at its cap
                value = None
                out.update(
                    timed_out=True,
                    cap_s=cap,
                    cap_reason=spec["cap_reason"],
                    cap_leader=spec.get("cap_leader"),
                    cap_baseline_s=spec.get("cap_baseline_s"),
                )
            out.update(
                reached=value is not None,
                time_to_target_s=value,
                steps_to_target=None if value is None else int(10 * value),
                best_value=0.9 if value is not None else 0.8,
                checks=[{"step": 1}],
            )
            if flat_at is not None:
                out.update(flattened=True, train_s=flat_at, cap_s=cap, miss="flattened: ...")
            elif value is None:
                out["miss"] = "missed: best val_acc 0.8 by the end of the configured training"
        else:
            out.update(samples_per_s=value, step_s=64 / value, step_times=[64 / value] * 3, train_mem_bytes=1000)
        return out


def _bench(launcher, **kw):
    opts = dict(
        args=TINY_CNN,
        steps=2,
        warmup=1,
        repeats=4,
        presets=["none"],
        progress=False,
        search=False,
        extras=False,
        stack=False,
    )
    opts.update(kw)
    bench = Bench(BenchOptions(**opts), launcher=launcher, clock=launcher.clock)
    bench.prepare()
    return bench


# --------------------------------------------------------------------------- intervals and the noise floor


def test_ratio_interval_is_symmetric_in_log_and_needs_two_repeats():
    g, lo, hi = ratio_interval([2.0, 0.5])
    assert g == pytest.approx(1.0) and lo < 1.0 < hi and lo * hi == pytest.approx(1.0)
    assert ratio_interval([1.3]) == (pytest.approx(1.3), None, None)
    assert ratio_interval([]) == (None, None, None)


def test_pick_verdict_reasons():
    s = VariantSummary.empty()
    s.speedup, s.speedup_ci = 1.10, (0.97, 1.25)
    assert pick_verdict(s, 0.02) == (False, "95% CI 0.97-1.25 includes 1.0")
    s.speedup_ci = (None, None)
    assert "no confidence interval" in pick_verdict(s, 0.02)[1]
    s.speedup_ci = (1.01, 1.02)
    s.speedup = 1.015
    assert "below --min-gain" in pick_verdict(s, 0.02)[1]
    s.target_missed = 1
    assert "missed the target" in pick_verdict(s, 0.0)[1]


def test_a_gain_within_the_noise_is_not_picked():
    """T24 is 4% faster in every pair, but the A/A pair of baselines differs by 6%: not picked."""
    figures = {"baseline": [100.0, 100.0, 100.0, 100.0], "T24 channels-last": [104.0, 104.0, 104.0, 104.0]}
    fake = FakeLauncher(figures)
    bench = _bench(fake, tips=["T24"])
    real_run = fake.run

    def run(spec, name, timeout=None):  # the A/A copy of the baseline lands 6% higher
        out = real_run(spec, name, timeout)
        if spec["variant"] == "baseline (A/A)":
            out["samples_per_s"] = 106.0
        return out

    fake.run = run  # type: ignore[method-assign]
    result = bench.run()
    t24 = result.record("T24 channels-last").summary
    assert t24.speedup == pytest.approx(1.04) and t24.speedup_ci[0] > 1.0  # sure, but small
    assert result.noise == pytest.approx(0.06)
    assert result.pick.variant.name == "baseline"
    assert "within the noise floor" in t24.picked_why
    assert any(line.startswith("noise floor: the A/A pair") for line in summary_lines(result))


def test_a_noisy_gain_whose_interval_includes_one_is_not_picked_and_a_clear_one_is():
    figures = {
        "baseline": [100.0, 100.0, 100.0, 100.0],
        "T24 channels-last": [130.0, 80.0, 135.0, 85.0],  # 1.05x median, all over the place
        "T16 conv-bias": [120.0, 118.0, 121.0, 119.0],
    }
    result = _bench(FakeLauncher(figures), tips=["T24", "T16"]).run()
    assert "includes 1.0" in result.record("T24 channels-last").summary.picked_why
    assert result.pick.variant.name == "T16 conv-bias"
    lo, hi = result.pick.summary.speedup_ci
    assert 1.0 < lo < 1.195 < hi
    assert f"| T16 conv-bias (picked) | {result.pick.summary.speedup:.2f}x [{lo:.2f}-{hi:.2f}] |" in markdown(result)


# --------------------------------------------------------------------------- target mode, injected figures


def test_parse_target_directions_and_errors():
    assert parse_target("val_acc=0.9") == Target("val_acc", 0.9, "max")
    assert parse_target("val_loss=0.3").mode == "min"
    assert parse_target("val_f1>=0.5").mode == "max" and parse_target("score<=3").mode == "min"
    assert parse_target("val_error=0.1", "max").mode == "max"
    for bad in ("val_acc", "val_acc=high", "=0.9"):
        with pytest.raises(ValueError):
            parse_target(bad)
    with pytest.raises(BenchError, match="--target-max-time"):
        BenchOptions(target="val_acc=0.9", target_max_time=0).validate()


def test_target_variants_come_from_the_records():
    assert {"T01", "T04", "T15"} <= set(TARGET_VARIANTS) and {"T01", "T04", "T15"} <= set(NOT_TIMED)
    variants, skipped = target_tip_variants(None, batch_size=16)
    names = {v.name: v for v in variants}
    assert {
        "T01 lr-schedule onecycle",
        "T01 lr-schedule cyclic",
        "T01 lr-schedule schedule-free",
        "T04 max-batch x4-linear",
        "T04 max-batch x4-sqrt",
        "T15 grad-clipping norm",
    } <= set(names)
    assert names["T01 lr-schedule onecycle"].overrides["lr_schedule.max_lr"] == "auto"
    assert names["T01 lr-schedule schedule-free"].overrides == {"schedule_free.enabled": True}
    assert names["T04 max-batch x4-sqrt"].overrides == {
        "largest_batch.enabled": True,
        "largest_batch.lr_rule": "sqrt",
        "largest_batch.batch_size": 64,
    }
    _, skipped = target_tip_variants(["T04"], batch_size=None)
    assert all("batch size" in why for why in skipped.values()) and len(skipped) == 2


def test_target_mode_ranks_by_time_seeds_per_repeat_and_never_picks_a_miss(tmp_path):
    figures = {
        "baseline": [100.0, 110.0, 90.0],
        "T01 lr-schedule onecycle @1x": [50.0, 56.0, 44.0],  # 2x, consistent
        "T01 lr-schedule onecycle @0.5x": [("flat", 30.0), None, None],  # its cycle ended too early: flat after it
        "T01 lr-schedule onecycle @0.75x": [None, None, None],
        "T01 lr-schedule bold-peak @0.75x": [None, None, None],  # the bolder peak misses at every span here
        "T01 lr-schedule bold-peak @0.5x": [None, None, None],
        "T01 lr-schedule bold-peak @1x": [None, None, None],
        "T01 lr-schedule cyclic @0.75x": [None, None, None],
        "T01 lr-schedule cyclic @0.5x": [20.0, None, 20.0],  # fastest, but missed once
        "T01 lr-schedule schedule-free": [70.0, 75.0, 66.0],  # plan-free: gains, less than the 1x one-cycle
        "T15 grad-clipping norm": [99.0, 105.0, 89.0],  # no gain (within the cap: slowest baseline + 10%)
    }
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T01", "T15"], repeats=3, target="val_acc=0.9", seed=7)
    assert [v.name for v in bench.variants] == [
        "baseline",
        "T01 lr-schedule onecycle @0.75x",  # the one-cycles span first: both at 0.75x, both at 0.5x, both at 1x
        "T01 lr-schedule bold-peak @0.75x",
        "T01 lr-schedule onecycle @0.5x",
        "T01 lr-schedule bold-peak @0.5x",
        "T01 lr-schedule onecycle @1x",
        "T01 lr-schedule bold-peak @1x",
        "T01 lr-schedule cyclic @0.75x",
        "T01 lr-schedule cyclic @0.5x",
        "T01 lr-schedule cyclic @1x",
        "T01 lr-schedule schedule-free",
        "T15 grad-clipping norm",
        "baseline (A/A)",
    ]
    result = bench.run()
    seeds = {}
    for variant, seed in fake.calls:
        seeds.setdefault(variant, []).append(seed)
    # one seed per repeat, the same for every variant; a candidate that missed once runs no more repeats
    stopped = {
        "T01 lr-schedule onecycle @0.5x": [7],
        "T01 lr-schedule onecycle @0.75x": [7],
        "T01 lr-schedule bold-peak @0.75x": [7],
        "T01 lr-schedule bold-peak @0.5x": [7],
        "T01 lr-schedule bold-peak @1x": [7],
        "T01 lr-schedule cyclic @0.75x": [7],
        "T01 lr-schedule cyclic @0.5x": [7, 8],
    }
    assert {v: sorted(s) for v, s in seeds.items() if v in stopped} == stopped
    assert all(sorted(s) == [7, 8, 9] for v, s in seeds.items() if v not in stopped)
    assert any("13 more run(s) of" in n and "cannot be picked" in n for n in result.notes)
    # the flattened run stopped at 30 s of training: what its cap (the baseline's time so far + the noise) would
    # have let it run on is the saving bench reports
    (flat,) = [r for r in result.record("T01 lr-schedule onecycle @0.5x").runs if r.get("flattened")]
    saved = f"{flat['cap_s'] - 30.0:.0f} s of training saved"
    assert flat["cap_s"] > 30.0 and any(
        "1 candidate run(s) stopped once their curve flattened" in n and saved in n for n in result.notes
    ), result.notes
    # the schedules span what the baseline's first run measured: 1,000 steps to the target (seed 7)
    spans = {r.variant.name: r.variant.overrides.get("lr_schedule.plan") for r in result.records}
    assert spans["T01 lr-schedule onecycle @0.5x"] == 500 and spans["T01 lr-schedule onecycle @1x"] == 1000
    assert spans["T01 lr-schedule cyclic @0.75x"] == 750
    assert spans["T15 grad-clipping norm"] is None and spans["baseline"] is None
    # the plan-free candidate spans nothing; its warm-up is 5% of the baseline's 1,000 steps, not of the config's length
    sf = result.record("T01 lr-schedule schedule-free").variant.overrides
    assert "lr_schedule.plan" not in sf and sf["schedule_free.warmup_steps"] == 50
    assert any("schedule-free: its warm-up is 50 optimizer steps" in n for n in result.notes)
    assert result.record("T01 lr-schedule schedule-free").summary.speedup == pytest.approx(100 / 70, rel=0.02)
    assert any("in 1,000 optimizer steps" in n and "500 (0.5x), 750 (0.75x), 1,000 (1x)" in n for n in result.notes)
    one = result.record("T01 lr-schedule onecycle @1x").summary
    assert one.speedup == pytest.approx(2.0, rel=0.01) and one.speedup_ci[0] > 1.5
    assert one.target_time.median == 50.0 and one.target_steps.median == 500
    assert "seeds as blocks" in one.decided_by and "(t, 6 dof)" in one.decided_by  # the A/A twin left out
    cyc = result.record("T01 lr-schedule cyclic @0.5x").summary
    assert cyc.target_missed == 1 and cyc.speedup is None and "missed the target in 1 of 2" in cyc.picked_why
    assert result.pick.variant.name == "T01 lr-schedule onecycle @1x"
    md = markdown(result)
    assert md.splitlines()[0].startswith("| variant | speed-up [95% CI] | time to target s | steps to target |")
    assert "| 1/2 |" in md and "missed: best val_acc 0.8" in md
    path = write_preset(result, str(tmp_path / "fastest.yaml"))
    text = open(path).read()
    assert "time to val_acc >= 0.9" in text
    assert yaml.safe_load(text)["speedups"]["lr_schedule"] == {"name": "onecycle", "max_lr": "auto", "plan": 1000}


class PeakLauncher(FakeLauncher):
    """:class:`FakeLauncher` whose target runs of the variants in ``peaks`` report the peaks their range test set
    (``peaks[variant][repeat]``, the worker's ``range_peaks``: one per parameter group, or ``None``)."""

    def __init__(self, figures, peaks):
        super().__init__(figures, target=True)
        self.peaks = peaks

    def run(self, spec, name, timeout=None):
        out = super().run(spec, name, timeout)
        if spec["target"] is not None and spec["variant"] in self.peaks:
            out["range_peaks"] = self.peaks[spec["variant"]][int(name.rsplit("-r", 1)[1])]
        return out


@pytest.mark.parametrize(
    "peaks, written",
    [
        ([[0.00631], [0.004], [0.00631]], 0.00631),  # the median of the runs' peaks (seed 2's test chose lower)
        ([[0.0315], [0.03154], [0.00792]], 0.0315),  # three significant digits
        ([[0.00631], [0.004, 0.001], [0.00631]], "auto"),  # a run whose groups peaked apart: no one value to pin
        ([[0.00631], None, [0.00631]], "auto"),  # a run without a range test's peak
    ],
)
def test_written_preset_pins_the_peak_its_range_tests_set(tmp_path, peaks, written):
    from lightning_speedups.session import build

    one = "T01 lr-schedule onecycle @1x"
    fake = PeakLauncher({"baseline": [100.0] * 4, one: [50.0] * 4}, {one: peaks + [peaks[0]]})
    result = _bench(fake, tips=["T01"], repeats=3, target="val_acc=0.9").run()
    assert result.pick.variant.name == one
    path = write_preset(result, str(tmp_path / "fastest.yaml"))
    text = open(path).read()
    section = yaml.safe_load(text)["speedups"]["lr_schedule"]
    assert section["max_lr"] == written and section["plan"] == result.pick.variant.overrides["lr_schedule.plan"]
    if written == "auto":
        assert "range tests" not in text
        return
    assert "range_test_steps" not in section and "peak_divisor" not in section  # only an auto peak reads them
    assert f"speedups.lr_schedule.max_lr: {written:g}, the median of the peaks the range tests of its 3" in text
    # fed back to fit, the schedule starts at that peak
    cli = build(TINY_CNN + ["--config", path])
    assert cli._get(cli.config_init, "speedups").lr_schedule.max_lr == written


def test_target_mode_default_presets_and_composition():
    bench = _bench(
        FakeLauncher({"baseline": [1.0]}, target=True), tips=["T15"], presets=None, repeats=1, target="val_loss=0.5"
    )
    names = [v.name for v in bench.variants]
    assert "preset:fast+converge @0.5x" in names and "preset:converge @1x" in names and "preset:fast" in names
    assert not any(n.startswith("T01") for n in names)  # --tips T15
    fc = next(v for v in bench.variants if v.name == "preset:fast+converge @0.5x")
    assert fc.presets == ("fast", "converge") and fc.plan_fraction == 0.5
    assert bench.target.mode == "min"


def test_throughput_mode_leaves_converge_out():
    bench = _bench(FakeLauncher({"baseline": [100.0]}), tips=["T24"], presets=None, repeats=1)
    assert "converge" in bench.skipped_presets and "--target" in bench.skipped_presets["converge"]


# --------------------------------------------------------------------------- the probe, on a fake clock


class _Trainer:
    def __init__(self):
        self.sanity_checking = False
        self.global_step = 0
        self.should_stop = False
        self.callback_metrics: dict = {}


def test_target_probe_excludes_validation_time_and_stops_at_the_target():
    now = [0.0]
    probe = TargetProbe(Target("val_acc", 0.9, "max"), max_time=1000, clock=lambda: now[0])
    tr = _Trainer()
    probe.on_fit_start(tr, None)
    for step, acc in ((10, 0.5), (20, 0.95)):
        now[0] += 3.0  # training
        tr.global_step = step
        probe.on_train_batch_end(tr, None, None, (np.zeros((4, 2)), np.zeros(4)), 0)
        probe.on_validation_start(tr, None)
        now[0] += 100.0  # a slow validation, not counted
        tr.callback_metrics = {"val_acc": acc}
        probe.on_validation_end(tr, None)
    r = probe.results()
    assert r["reached"] and r["time_to_target_s"] == pytest.approx(6.0) and r["steps_to_target"] == 20
    assert r["val_s"] == pytest.approx(200.0) and tr.should_stop and r["best_value"] == 0.95


def test_target_probe_gives_up_at_the_cap():
    now = [0.0]
    probe = TargetProbe(Target("val_loss", 0.1, "min"), max_time=5.0, clock=lambda: now[0])
    tr = _Trainer()
    probe.on_fit_start(tr, None)
    now[0] = 6.0
    probe.on_train_batch_end(tr, None, None, None, 0)
    assert tr.should_stop and probe.results()["timed_out"] and not probe.results()["reached"]


# --------------------------------------------------------------------------- the range test


def test_pick_peak_lr_on_made_up_curves():
    lrs = [10 ** (-6 + 6 * i / 99) for i in range(100)]
    losses = [
        2.3 - 2.0 / (1 + math.exp(-(math.log10(lr) + 3) * 3)) + (5 * (math.log10(lr) + 1.5) if lr > 10**-1.5 else 0)
        for lr in lrs
    ]
    pick = pick_peak_lr(lrs, losses)
    assert 10**-1.7 < pick.min_loss_lr < 10**-1.3 and pick.lr < pick.min_loss_lr
    assert steepest_lr(lrs, losses) is not None
    with pytest.raises(ValueError, match="range test"):
        pick_peak_lr([1e-3, 1e-2], [1.0, float("nan")])


def test_lr_schedule_auto_runs_lightnings_range_test_and_reports_the_peak(tmp_path, caplog):
    import logging

    import lightning.pytorch as pl
    from helpers import TinyCNN

    from lightning_speedups.callbacks import LRSchedule

    def six_steps(cb: LRSchedule) -> pl.Trainer:
        trainer = pl.Trainer(
            max_steps=6,
            callbacks=[cb],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            default_root_dir=str(tmp_path),
        )
        trainer.fit(TinyCNN(optimizer="adamw", lr=1e-3))
        return trainer

    pl.seed_everything(0)
    cb = LRSchedule("onecycle", max_lr="auto", range_test_steps=10, horizon=0.5)
    with caplog.at_level(logging.INFO):
        trainer = six_steps(cb)
    assert cb.range_pick is not None and cb.range_pick.points >= 3
    assert trainer.global_step == 6  # the range test's steps were undone
    assert cb._total_steps == 3 and cb._peaks == [pytest.approx(max(cb.range_pick.lr, 1e-3))]  # never below the user's
    assert "LR range test" in caplog.text and "chose peak lr" in caplog.text
    assert "peak lr" in cb.status[1] and "LR range test" in cb.status[1]  # the pick, or why the user's lr is the peak
    # what a bench worker records of the run, and what a preset pinning that peak gives the next fit: no range test
    from lightning_speedups.bench.worker import range_peaks

    assert range_peaks(trainer) == cb._peaks == cb.start_peaks
    pinned = LRSchedule("onecycle", max_lr=cb._peaks[0], horizon=0.5)
    again = six_steps(pinned)
    assert pinned.range_pick is None and pinned.start_peaks == cb._peaks and range_peaks(again) is None
    with pytest.raises(ValueError, match="auto"):
        LRSchedule(max_lr="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="horizon"):
        LRSchedule(horizon=0)


# --------------------------------------------------------------------------- Fashion-MNIST from IDX files


def _write_idx(path, array, gz=True):
    codes = {np.uint8: 0x08}
    header = bytes([0, 0, codes[array.dtype.type], array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    data = header + array.tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def test_fashion_mnist_reads_idx_files_and_says_how_to_install(tmp_path, monkeypatch):
    from lightning_speedups.data.fashion_mnist import FashionMNISTDataModule, find_fashion_mnist, read_idx

    rng = np.random.RandomState(0)
    for split, n, gz in (("train", 40, True), ("t10k", 20, False)):
        _write_idx(
            tmp_path / (f"{split}-images-idx3-ubyte" + (".gz" if gz else "")),
            rng.randint(0, 256, (n, 28, 28)).astype(np.uint8),
            gz,
        )
        _write_idx(
            tmp_path / (f"{split}-labels-idx1-ubyte" + (".gz" if gz else "")),
            rng.randint(0, 10, n).astype(np.uint8),
            gz,
        )
    assert read_idx(tmp_path / "t10k-images-idx3-ubyte").shape == (20, 28, 28)
    dm = FashionMNISTDataModule(root=str(tmp_path), batch_size=8, eval_batch_size=10, train_subset=32)
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (8, 1, 28, 28) and x.dtype.is_floating_point and y.dtype.is_signed
    assert len(dm.train_dataloader()) == 4 and len(dm.val_dataloader()) == 2
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
    assert find_fashion_mnist() == tmp_path
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        FashionMNISTDataModule(root=str(tmp_path / "nowhere")).setup("fit")
    (tmp_path / "bad-idx").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad-idx")


# --------------------------------------------------------------------------- end to end, one tiny run


def test_bench_target_end_to_end(tmp_path, capsys):
    from lightning_speedups.bench import main

    out_yaml = tmp_path / "fastest.yaml"
    argv = TINY_CNN + [
        "--target",
        "val_loss=100",
        "--target-every",
        "2",
        "--trainer.max_steps=4",
        "--tips",
        "T15",
        "--presets",
        "none",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--isolation",
        "forkserver",
        "--no-noise-pair",
        "--no-progress",
        "--write-preset",
        str(out_yaml),
        "--json",
        str(tmp_path / "b.json"),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "time to target" in printed and "T15 grad-clipping norm" in printed and "pick:" in printed
    import json

    data = json.loads((tmp_path / "b.json").read_text())
    base = data["variants"][0]["runs"][0]
    assert base["status"] == "ok" and base["reached"] and base["steps_to_target"] == 2
    assert base["checks"][0]["value"] is not None and data["target"]["mode"] == "min"
    assert out_yaml.exists()


def test_target_search_plans_convergence_first_from_the_records(capsys):
    """Default --target candidates: the presets that set a convergence tip's keys, the tips' target-mode
    variants, the other presets, the throughput tips, the A/A pair last; the plan is printed first."""
    from rich.console import Console

    from lightning_speedups.bench.variants import TARGET_VARIANTS

    fake = FakeLauncher({"baseline": [1.0]}, target=True)
    bench = _bench(fake, tips=None, presets=None, repeats=1, target="val_acc=0.9")
    names = [v.name for v in bench.variants]
    # the one-cycles (both presets' and T01's bolder peak) span first: each at 0.75x, then each at 0.5x, then at 1x;
    # within a span each schedule's first before converge, which shares fast+converge's schedule (its curve)
    assert names[:10] == [
        "baseline",
        "preset:fast+converge @0.75x",
        "T01 lr-schedule bold-peak @0.75x",
        "preset:converge @0.75x",
        "preset:fast+converge @0.5x",
        "T01 lr-schedule bold-peak @0.5x",
        "preset:converge @0.5x",
        "preset:fast+converge @1x",
        "T01 lr-schedule bold-peak @1x",
        "preset:converge @1x",
    ]
    kinds = ["target" if v.tips and v.tips[0] in TARGET_VARIANTS else v.kind for v in bench.variants[10:]]
    first_other = kinds.index("preset")
    assert set(kinds[:first_other]) == {"target"} and kinds[first_other] == "preset"  # then preset:fast
    assert set(kinds[first_other + 1 : -1]) == {"tip"} and names[-1] == "baseline (A/A)"
    assert "T24 channels-last" in names  # a throughput tip that applies to the CNN
    # T01's one-cycle is what converge runs: not twice; its cyclic schedule is another
    assert not any(n.startswith("T01 lr-schedule onecycle") for n in names)
    assert "T01 lr-schedule cyclic @0.75x" in names
    console = Console(record=True, width=400)
    bench.console = console
    bench.run()
    plan = console.export_text()
    assert (
        "in this order: baseline, preset:fast+converge @0.75x, T01 lr-schedule bold-peak @0.75x, preset:converge"
        in plan
    )


def test_a_target_budget_keeps_paired_repeats_for_the_first_candidates():
    """A budget too small for every candidate at every repeat cuts candidates from the end of the plan
    (its order: likeliest first), never below two repeats (one gives no interval, so no pick), and runs
    the repeats at which the most candidates fit: two here (15 candidates) rather than three (9)."""
    fake = FakeLauncher({"baseline": [1.0, 1.0, 1.0]}, target=True)
    bench = _bench(fake, tips=None, presets=None, repeats=3, target="val_acc=0.9", budget=32.0)
    result = bench.run()
    assert bench.repeats_used == 2
    ran = [r for r in result.records if r.runs]
    assert [r.variant.name for r in ran][:3] == [
        "baseline",
        "preset:fast+converge @0.75x",
        "T01 lr-schedule bold-peak @0.75x",
    ]
    assert all(len(r.runs) == 2 for r in ran) and len(ran) == 16
    cut = [r for r in result.records if not r.runs]
    assert cut and all("held the first 15 candidates in the plan's order at 2 paired repeats" in r.skipped for r in cut)
    assert result.records.index(cut[0]) == len(ran)  # the cut is the end of the plan


# --------------------------------------------------------------------------- stopping and deciding early


def test_a_candidate_stops_once_past_the_slowest_baseline_and_bench_says_what_that_saved():
    figures = {"baseline": [100.0, 120.0], "T15 grad-clipping norm": [300.0, 300.0]}
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T15"], repeats=2, target="val_acc=0.9", target_max_time=600.0)
    caps = []
    run = fake.run

    def spy(spec, name, timeout=None):
        caps.append((spec["variant"], spec["target_max_time"], spec["cap_reason"]))
        return run(spec, name, timeout)

    fake.run = spy
    result = bench.run()
    by_variant = {}
    for variant, cap, why in caps:
        by_variant.setdefault(variant, []).append((cap, why))
    assert by_variant["baseline"] == [(600.0, None), (600.0, None)]  # the baseline runs to the user's cap
    # after one baseline run of 100 s: 110 s (the 10% margin); after both: 120 s + their 18% spread
    # after one baseline run of 100 s: 110 s (the 10% margin); a miss ends the candidate (no second repeat)
    assert [c for c, _ in by_variant["T15 grad-clipping norm"]] == [pytest.approx(110.0)]
    assert "could no longer be faster" in by_variant["T15 grad-clipping norm"][0][1]
    t15 = result.record("T15 grad-clipping norm").summary
    assert t15.target_missed == 1 and result.pick.variant.name == "baseline"
    assert any("1 candidate run(s) stopped" in n and "up to 490 s" in n for n in result.notes)
    assert any("1 more run(s) of T15 grad-clipping norm not run" in n for n in result.notes)


def test_the_budget_a_miss_leaves_runs_the_candidates_the_plan_had_cut():
    figures = {
        "baseline": [10.0, 10.0],
        "preset:fast+converge @0.5x": [None, None],
        "preset:fast+converge @1x": [None, None],
    }
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=20.0)
    result = bench.run()
    ran = [r.variant.name for r in result.records if r.runs]
    # 20 one-second runs: the baseline's 2 and 9 candidates at 2 repeats were planned; both fast+converge
    # variants missed once, so their second repeats went to the tenth candidate, which the plan had cut
    assert len(result.record("preset:fast+converge @0.5x").runs) == 1
    assert len(result.record("preset:fast+converge @1x").runs) == 1
    tenth = "T01 lr-schedule cyclic @0.75x"
    assert ran[10] == tenth and len(result.record(tenth).runs) == 2
    assert result.record(tenth).skipped is None and len(ran) == 11
    assert any("the budget the planned candidates left" in n and tenth in n for n in result.notes)


def test_the_budget_left_starts_a_cut_candidate_one_seed_at_a_time():
    """A cut candidate starts while one of its runs fits, not only when all its repeats do. The plan holds the
    baseline and one candidate at 2 repeats (each run estimated at the baseline's 10 s); that candidate reached in
    2 s runs, leaving 18 s: less than two baseline-sized runs, enough for the next candidate's first seed, which
    reached in 2 s, so its second fit too; the one after fits once, and bench says it has one seed of two."""
    figures = {
        "baseline": [9.0, 9.0, 9.0],
        "preset:fast+converge @0.75x": [1.5, 1.5, 1.5],
        "T01 lr-schedule bold-peak @0.75x": [1.5, 1.5],
        "preset:converge @0.75x": [1.5, 1.5],  # as fast as the confirmed leader: not stopped at its time
        "preset:fast+converge @0.5x": [None, None],  # the would-be pick's shorter span: a miss
    }
    walls = {
        "baseline": 10.0,
        "preset:fast+converge @0.75x": 2.0,
        "T01 lr-schedule bold-peak @0.75x": 2.0,
        "preset:converge @0.75x": 10.0,
    }
    fake = FakeLauncher(figures, target=True, walls=walls)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=55.0)
    result = bench.run()
    assert bench.repeats_used == 2
    # the would-be pick's shorter span ran first (it missed: 1 s), then its third seed and the baseline's (12 s of
    # the 30 s left)
    assert fake.calls[4] == ("preset:fast+converge @0.5x", 0), fake.calls
    assert len(result.record("preset:fast+converge @0.5x").runs) == 1
    assert len(result.record("preset:fast+converge @0.75x").runs) == 3 and len(result.record("baseline").runs) == 3
    second = result.record("T01 lr-schedule bold-peak @0.75x")
    assert second.skipped is None and len(second.runs) == 2
    third = result.record("preset:converge @0.75x")
    assert len(third.runs) == 1  # 55 - 29 - 12 = 14 s: its first seed; then 4 s, short of its own 10 s
    # 4 s left: at the baseline's 10 s it would not start; the confirmed leader caps it at 1.65 s (+ 1 s of start-up),
    # so it runs once and stops there, slower than the leader on its seed
    (capped,) = result.record("T01 lr-schedule bold-peak @0.5x").runs
    assert capped["cap_leader"] == "preset:fast+converge @0.75x" and not capped["reached"]
    assert any(
        "the budget the planned candidates left" in n and "T01 lr-schedule bold-peak @0.75x" in n for n in result.notes
    )
    assert any("before every seed of: preset:converge @0.75x (1 of 2)" in n for n in result.notes)
    assert result.pick.variant.name in ("preset:fast+converge @0.75x", "T01 lr-schedule bold-peak @0.75x")


class _Trainer:
    def __init__(self):
        self.sanity_checking = False
        self.should_stop = False
        self.global_step = 0
        self.callback_metrics = {}


def _checks(probe, values, every=10):
    """Feed the probe one validation check per value, ``every`` optimizer steps apart; the step it stopped at."""
    trainer = _Trainer()
    for i, v in enumerate(values, 1):
        trainer.global_step = i * every
        trainer.callback_metrics = {probe.target.metric: v}
        probe.on_validation_start(trainer, None)
        probe.on_validation_end(trainer, None)
        if trainer.should_stop:
            return trainer.global_step
    return None


def test_a_run_stops_once_its_curve_is_flat_after_the_schedule_annealed():
    from lightning_speedups.bench.target import FLAT_CHECKS, TargetProbe

    clock = iter(range(10_000)).__next__
    acc = Target("val_acc", 0.95, "max")
    # annealed at step 50: the checks at 60, 70, 80 beat nothing before them -> stops at 80, a miss
    probe = TargetProbe(acc, clock=clock, annealed_step=50)
    probe.on_fit_start(None, None)
    assert FLAT_CHECKS == 3
    assert _checks(probe, [0.5, 0.7, 0.8, 0.85, 0.9, 0.89, 0.9, 0.88, 0.96]) == 80
    r = probe.results()
    assert r["flattened"] and not r["reached"] and r["annealed_step"] == 50 and r["flat_checks"] == 3
    # still improving after the anneal: runs on to the target
    probe = TargetProbe(acc, clock=clock, annealed_step=50)
    probe.on_fit_start(None, None)
    assert _checks(probe, [0.5, 0.7, 0.8, 0.85, 0.9, 0.91, 0.92, 0.93, 0.96]) == 90 and probe.results()["reached"]
    # flat before the anneal is not flat: the schedule is still moving
    probe = TargetProbe(acc, clock=clock, annealed_step=1000)
    probe.on_fit_start(None, None)
    assert _checks(probe, [0.5, 0.6, 0.6, 0.6, 0.6, 0.6]) is None and not probe.results()["flattened"]
    # no schedule: never stopped for a flat curve
    probe = TargetProbe(acc, clock=clock)
    probe.on_fit_start(None, None)
    assert _checks(probe, [0.5, 0.6, 0.6, 0.6, 0.6, 0.6]) is None
    # a plateau one validation sample (the metric's resolution, 0.003 here) under the target may still touch it: it
    # runs on; two samples under, it stops (benchmarks/flat_span.py: such a run reached 0.99 22 checks after its anneal)
    plateau = [0.9, 0.95, 0.986, 0.989, 0.989, 0.989, 0.989, 0.989]
    probe = TargetProbe(Target("val_acc", 0.99, "max"), clock=clock, annealed_step=50)
    probe.on_fit_start(None, None)
    assert _checks(probe, plateau) is None and not probe.results()["flattened"]
    probe = TargetProbe(Target("val_acc", 0.995, "max"), clock=clock, annealed_step=50)
    probe.on_fit_start(None, None)
    assert _checks(probe, plateau) == 70  # checks at 50, 60, 70 after the anneal at 50
    # lower is better
    loss = Target("val_loss", 0.1, "min")
    probe = TargetProbe(loss, clock=clock, annealed_step=10)
    probe.on_fit_start(None, None)
    assert _checks(probe, [1.0, 0.5, 0.4, 0.45, 0.41, 0.5]) == 60


def test_a_flattened_run_is_a_miss_that_says_why():
    from lightning_speedups.bench.worker import _target_verdict

    result = {
        "checks": [{"step": 80}],
        "metric_seen": True,
        "reached": False,
        "flattened": True,
        "flat_checks": 3,
        "annealed_step": 1500,
        "best_value": 0.9,
        "train_s": 42.0,
        "timed_out": False,
    }
    out = _target_verdict(result, Target("val_acc", 0.95, "max"), trainer=None)
    assert out["status"] == "ok" and out["miss"].startswith("flattened: no better val_acc in the 3 checks")
    assert "annealed at step 1,500" in out["miss"] and "best 0.9" in out["miss"]


# --------------------------------------------------------------------- a gain one seed carries (issue 37, item 4)


def test_a_gain_one_slow_baseline_seed_carries_is_not_picked_on_the_interval_alone():
    """Leave-one-out: the interval lies above 1.0, but without the baseline's slow seed it no longer does; the
    candidate is not picked and the reason says which run carries it. A gain every run shows stays picked."""
    from lightning_speedups.bench.stats import PooledSpread, compare_target, pick_verdict, summarize

    def runs(*times):
        return [{"status": "ok", "reached": True, "time_to_target_s": t, "repeat": i} for i, t in enumerate(times)]

    spread = PooledSpread(0.2, 10, 12, 6)
    base, cand = runs(80.0, 160.0), runs(50.0, 52.0)
    bs, cs = summarize(base), summarize(cand)
    compare_target(cs, cand, bs, base, spread)
    assert cs.speedup_ci[0] > 1.0 and cs.carried_by == "the baseline's seed 1"
    ok, why = pick_verdict(cs, min_gain=0.02)
    assert not ok and "without the baseline's seed 1" in why and "one more seed" in why
    assert cs.to_dict()["carried_by"] == "the baseline's seed 1"
    steady = runs(100.0, 104.0)
    ss = summarize(steady)
    compare_target(cs, cand, ss, steady, spread)
    assert cs.carried_by is None and pick_verdict(cs, min_gain=0.02)[0]


def test_a_carried_gain_gets_one_more_seed_of_it_and_the_baseline_then_decides(tmp_path):
    """Bench runs one more seed of a candidate whose gain one run carries, and of the baseline, then decides again
    on all of them: picked when the new seed agrees, and said in the notes."""
    figures = {
        "baseline": [100.0, 130.0, 105.0],  # seed 1 slower: the gain rests on it
        "T15 grad-clipping norm": [60.0, 62.0, 61.0],
    }
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T15"], repeats=2, target="val_acc=0.9", seed=3)
    result = bench.run()
    clip = result.record("T15 grad-clipping norm")
    assert sorted(seed for v, seed in fake.calls if v == "T15 grad-clipping norm") == [3, 4, 5]
    assert sorted(seed for v, seed in fake.calls if v == "baseline") == [3, 4, 5]
    # the leader's confirmation, before any leftover budget explores (not a second time at the end)
    assert any("T15 grad-clipping norm led, and one run carried its interval" in n for n in result.notes), result.notes
    assert not any("one run carried the gain of" in n for n in result.notes)
    assert clip.summary.carried_by is None and result.pick.variant.name == "T15 grad-clipping norm"


def test_a_carried_gain_with_no_budget_for_one_more_seed_is_not_picked():
    class Slow(FakeLauncher):  # each run takes 3.5 s: the 22 s budget holds the 6 runs, not one more pair
        def run(self, spec, name, timeout=None):
            out = super().run(spec, name, timeout)
            self.now += 2.5
            return {**out, "wall_s": 3.5}

    figures = {"baseline": [100.0, 130.0], "T15 grad-clipping norm": [60.0, 62.0]}
    fake = Slow(figures, target=True)
    bench = _bench(fake, tips=["T15"], repeats=2, target="val_acc=0.9", budget=22.0)
    result = bench.run()
    clip = result.record("T15 grad-clipping norm").summary
    assert len(result.record("T15 grad-clipping norm").runs) == 2
    assert clip.carried_by is not None and "one more seed" in clip.picked_why
    assert result.pick.variant.kind == "baseline"


@pytest.mark.parametrize(
    "candidate, baseline, picked",
    [
        # seed 1's gain (2.1x) carries the interval; every run of it before every run of the baseline: a lead by ranks
        ([60.0, 61.0, 62.0], [94.1, 129.1, 97.2], True),
        # the same gains seed by seed, but its seed 2 behind the baseline's seed 0: the ranks interleave
        ([60.0, 61.0, 100.0], [94.1, 129.1, 156.8], False),
    ],
)
def test_a_carried_gain_short_of_its_seed_is_settled_by_ranks_on_three_seeds(candidate, baseline, picked):
    """Three seeds a side, one seed carrying the interval, and no budget for a fourth pair: the gain is picked when
    its runs lead by ranks (1 in 20 for an A/A pair), and the reason says so; not when they interleave."""

    class Slow(FakeLauncher):  # each run takes 3.5 s: the budget holds the 6 runs (and the A/A pair's), not one more
        def run(self, spec, name, timeout=None):
            out = super().run(spec, name, timeout)
            self.now += 2.5
            return {**out, "wall_s": 3.5}

    figures = {"baseline": baseline, "T15 grad-clipping norm": candidate}
    fake = Slow(figures, target=True)
    result = _bench(fake, tips=["T15"], repeats=3, target="val_acc=0.9", budget=34.0).run()
    clip = result.record("T15 grad-clipping norm")
    assert len(clip.runs) == 3 and clip.summary.speedup_ci[0] > 1.0
    assert clip.summary.carried_by == "seed 1" and clip.summary.rank_lead is picked
    assert clip.summary.to_dict()["rank_lead"] is picked
    if picked:
        assert result.pick is clip and "settled by ranks" in clip.summary.picked_why, clip.summary.picked_why
    else:
        assert result.pick.variant.kind == "baseline" and "one more seed" in clip.summary.picked_why


# ------------------------------------------------------------------- stacked candidates (issue 37, item 1)


def test_the_throughput_tips_that_pay_are_stacked_onto_the_schedules_and_run_first():
    """Target mode times the throughput tips by samples/s first (no target, one seed, paired repeats); the ones
    whose interval clears 1.0 are stacked onto every candidate that changes the optimisation, those twins run
    first, and the throughput tips are not run to the target one by one."""
    paying = {"T24 channels-last": [130.0, 128.0], "T16 conv-bias": [110.0, 111.0]}  # T22, T02 ...: 100, no gain
    figures = {
        "baseline": [100.0, 100.0, 100.0],
        "samples/s": paying,
        "stack:T16+T24 + T01 lr-schedule onecycle @0.75x": [40.0, 42.0, 41.0],
    }
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T01", "T24", "T16", "T22"], repeats=2, target="val_acc=0.9", stack=True, seed=5)
    result = bench.run()
    throughput_calls = [v for v, seed in fake.calls if seed == 5 and v in paying or v == "baseline (samples/s)"]
    assert throughput_calls.count("baseline (samples/s)") == 2
    names = [r.variant.name for r in result.records]
    assert names[1].startswith("stack:T16+T24 + ") and "stack:T16+T24" in names
    assert not any(n in ("T24 channels-last", "T16 conv-bias", "T22 fusion") for n in names), names
    twin = result.record("stack:T16+T24 + T01 lr-schedule onecycle @0.75x").variant
    assert twin.kind == "stack" and twin.plan_fraction == 0.75 and twin.overrides["lr_schedule.plan"] == 750
    assert twin.overrides["channels_last"] is True and twin.overrides["conv_bias"] is True
    assert result.pick.variant.name == "stack:T16+T24 + T01 lr-schedule onecycle @0.75x"
    note = next(n for n in result.notes if n.startswith("stack: timed by samples/s"))
    assert "Stacked T16, T24 onto" in note and "T22" in note
    # the samples/s runs behind the stack are kept in the result and its JSON, with their figures
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert set(phase) == {"baseline (samples/s)", "T24 channels-last", "T16 conv-bias", "T22 fusion"}
    assert phase["T24 channels-last"]["summary"]["speedup"] == pytest.approx(1.29, abs=0.01)
    assert len(phase["baseline (samples/s)"]["runs"]) == 2 and phase["T22 fusion"]["summary"]["speedup"] == 1.0


def test_a_candidate_that_already_sets_the_stack_gets_no_twin_and_runs_first_as_it_is():
    """`fast` sets `optimizer: auto`, T06's override: stacking T06 onto fast+converge would run fast+converge again
    under another name (it did, on the GRU task of issue 37). It runs first as it is; converge gets its twin."""
    figures = {"baseline": [100.0, 100.0], "samples/s": {"T06 optimizer": [130.0, 128.0]}}
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T06"], presets=None, repeats=2, target="val_acc=0.9", stack=True)
    result = bench.run()
    names = [r.variant.name for r in result.records]
    assert not any(n.startswith("stack:T06 + preset:fast+converge") for n in names), names
    assert names[1:7] == [  # the one-cycles span first, each candidate in the plan's order
        name
        for f in ("0.75", "0.5", "1")
        for name in (f"preset:fast+converge @{f}x", f"stack:T06 + preset:converge @{f}x")
    ]
    assert names.count("preset:fast+converge @0.75x") == 1
    assert result.record("stack:T06 + preset:converge @0.75x").variant.overrides["optimizer"] == "auto"
    note = next(n for n in result.notes if n.startswith("stack: timed by samples/s"))
    assert "already set it (preset:fast+converge @0.75x" in note


def test_no_throughput_tip_paying_means_no_stacked_candidate():
    fake = FakeLauncher({"baseline": [100.0, 100.0]}, target=True)
    bench = _bench(fake, tips=["T01", "T24"], repeats=2, target="val_acc=0.9", stack=True)
    result = bench.run()
    assert not any(r.variant.kind == "stack" for r in result.records)
    assert any("no throughput tip paid" in n for n in result.notes), result.notes


def test_a_first_ratio_at_or_under_one_can_never_pay_after_a_second_repeat():
    """The bound behind sparing the stack phase's last repeat, checked against the interval bench really uses: with
    two repeats no second ratio lifts the low end above 1.0 when the first is at or under it (a dense sweep), and a
    first ratio above 1.0 has one that does (the same ratio again). Three repeats, one or two to come: the sweeps
    agree with the answer."""
    from lightning_speedups.bench.stats import can_still_clear

    sweep = [0.2 * 1.01**i for i in range(400)]  # 0.2x .. 10.7x
    for first in (0.5, 0.9, 0.999, 1.0):
        assert not can_still_clear([first], 2)
        assert all(not (ratio_interval([first, r])[1] > 1.0) for r in sweep), first
    for first in (1.001, 1.2, 3.0):
        assert can_still_clear([first], 2) and ratio_interval([first, first])[1] > 1.0
    for known in ([1.05, 1.06], [1.2, 1.5], [0.95, 1.4], [0.9, 0.98], [1.3, 1.0]):
        some = any(ratio_interval([*known, r])[1] > 1.0 for r in sweep)
        assert can_still_clear(known, 3) == some, known
    coarse = sweep[::8]  # two repeats to come: every pair of them
    for known in ([0.98], [1.0], [1.1], [1.4]):
        some = any(ratio_interval([*known, a, b])[1] > 1.0 for a in coarse for b in coarse)
        assert can_still_clear(known, 3) == some, known


def test_the_stack_phase_spares_the_last_repeat_of_a_tip_that_can_no_longer_pay():
    """A throughput tip whose first samples/s ratio is at or under 1.0 cannot clear 1.0 after a second repeat: its
    second run is spared (whatever it would have shown), the paying tip and the baseline run theirs, and the notes
    say what was kept."""
    paying = {"T24 channels-last": [130.0, 128.0], "T22 fusion": [95.0, 400.0]}
    figures = {"baseline": [100.0, 100.0], "samples/s": paying}
    fake = FakeLauncher(figures, target=True, walls={"T22 fusion": 7.0})
    bench = _bench(fake, tips=["T01", "T24", "T22"], repeats=2, target="val_acc=0.9", stack=True, seed=5)
    result = bench.run()
    stack_calls = [v for v, seed in fake.calls if seed == 5 and v in paying or v == "baseline (samples/s)"]
    assert stack_calls.count("T22 fusion") == 1 and stack_calls.count("T24 channels-last") == 2
    assert stack_calls.count("baseline (samples/s)") == 2
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert "0.95x" in phase["T22 fusion"]["summary"]["picked_why"]
    note = next(n for n in result.notes if n.startswith("stack: 1 throughput tip(s) had their samples/s"))
    assert "T22 fusion" in note and "about 7 s" in note
    assert any(r.variant.name.startswith("stack:T24 + ") for r in result.records)  # T24 still stacked


def test_a_lever_above_one_in_every_repeat_but_undecided_gets_up_to_two_more_repeats():
    """GRU-shaped (bench of 2026-12-07, third session): the larger batch read 1.13x then 1.40x; with t of 1 dof no
    interval clears 1.0, and it was dropped. Every ratio above 1.0: it gets up to two more paired repeats (the
    baseline's too), one at a time, and pays on the fourth; a lever below 1.0 gets none. The baseline's own windows
    25% apart keep its fastest windows from deciding at the third."""
    rates = {
        "baseline (samples/s)": [100.0, 100.0, 125.0, 100.0],
        "T24 channels-last": [113.0, 140.0, 135.0, 130.0],
        "T22 fusion": [95.0, 140.0, 140.0, 140.0],
    }
    fake = FakeLauncher({"baseline": [100.0] * 4, "samples/s": rates}, target=True)
    result = _bench(fake, tips=["T01", "T24", "T22"], repeats=2, target="val_acc=0.9", stack=True).run()
    ran = [v for v, _ in fake.calls]
    assert ran.count("T24 channels-last") == 4 and ran.count("baseline (samples/s)") == 4
    assert ran.count("T22 fusion") == 1
    assert any(r.variant.name.startswith("stack:T24 + ") for r in result.records)
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert phase["T24 channels-last"]["summary"]["decided_by"] == ""  # its paired interval decided, at the fourth
    # decided after two: no third
    rates["T24 channels-last"] = [130.0, 128.0, 129.0, 300.0]
    rates["baseline (samples/s)"] = [100.0] * 4
    fake = FakeLauncher({"baseline": [100.0] * 4, "samples/s": rates}, target=True)
    _bench(fake, tips=["T01", "T24"], repeats=2, target="val_acc=0.9", stack=True).run()
    assert [v for v, _ in fake.calls].count("T24 channels-last") == 2


def test_the_stack_phase_stops_after_one_round_when_no_tip_can_pay():
    """No tip beat the baseline in the first round: the second round (the baseline's run too) is not run."""
    figures = {"baseline": [100.0, 100.0], "samples/s": {"T24 channels-last": [99.0, 300.0]}}
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T01", "T24", "T22"], repeats=2, target="val_acc=0.9", stack=True, seed=5)
    result = bench.run()
    assert [v for v, _ in fake.calls].count("baseline (samples/s)") == 1
    assert [v for v, _ in fake.calls].count("T24 channels-last") == 1
    assert not any(r.variant.kind == "stack" for r in result.records)
    assert any("no throughput tip paid" in n and "0.99x" in n for n in result.notes), result.notes
    assert any(
        n.startswith("stack: 2 throughput tip(s) had their samples/s") and "about 3 s" in n for n in result.notes
    )


# --------------------------------------------------------------- confirming the leader before exploring


def test_one_more_seed_decides_only_a_gain_that_one_more_run_a_side_would_lift_above_one():
    import math

    from lightning_speedups.bench.stats import PooledSpread, compare_target, one_more_seed_decides, summarize

    logs = lambda *ts: [math.log(t) for t in ts]
    two = PooledSpread(0.18, 2, 4, 2)
    assert one_more_seed_decides(logs(40, 56), logs(80, 91), two)  # 1.8x: t(2 dof) 4.3 hides it, t(4) 2.8 would not
    assert not one_more_seed_decides(logs(70, 95), logs(80, 91), two)  # 1.05x, and a candidate run slower than one
    assert not one_more_seed_decides(logs(76, 78), logs(80, 91), two)  # every run faster, by too little to decide
    assert not one_more_seed_decides(logs(90, 100), logs(80, 91), two)  # slower
    assert not one_more_seed_decides(logs(40, 56), logs(80, 91), PooledSpread(None, 0, 2, 2))

    def runs(*times):
        return [{"status": "ok", "reached": True, "time_to_target_s": t, "repeat": i} for i, t in enumerate(times)]

    base, cand = runs(80.0, 91.0), runs(40.0, 56.0)
    bs, cs = summarize(base), summarize(cand)
    compare_target(cs, cand, bs, base, two)
    assert cs.speedup_ci[0] < 1.0 < cs.speedup and cs.one_more_decides and cs.to_dict()["one_more_decides"]
    decided = runs(30.0, 33.0)
    ds = summarize(decided)
    compare_target(ds, decided, bs, base, two)
    assert ds.speedup_ci[0] > 1.0 and not ds.one_more_decides  # decided already: nothing to confirm


def _leader_bench(candidate, budget=57.0):
    """The baseline (10 s runs) and fast+converge @0.75x (5 s runs) fit the plan at 2 repeats; the candidates
    after them were cut, so the leftover budget (27 s) holds one more seed of both (15 s) and then a first seed of
    one cut candidate (10 s), or two seeds of that candidate."""
    figures = {"baseline": [80.0, 91.0, 88.0], "preset:fast+converge @0.75x": candidate}
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=budget)
    return fake, bench, bench.run()


def _third_seed_ran_before_the_cut_candidates(fake, lead):
    """``lead`` and the baseline ran seeds 0-2, and every other candidate ran after ``lead``'s third seed, but for
    its own schedule over the next shorter span (:meth:`~lightning_speedups.bench.target_runs.TargetRuns._descend_span`),
    which runs before it."""
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == "baseline"] == [0, 1, 2]
    shorter = lead.replace("@0.75x", "@0.5x")
    others = [i for i, (v, _) in enumerate(fake.calls) if v not in ("baseline", lead, shorter)]
    assert others and all(i > fake.calls.index((lead, 2)) for i in others)  # the cut candidates ran after it


def test_an_undecided_leader_gets_one_more_seed_before_the_candidates_the_plan_cut():
    """GRU-shaped (bench of 2026-12-06): 1.8x on both seeds, every candidate run faster than every baseline run,
    yet t with 2 dof leaves 1.0 in the interval. One more seed of it and of the baseline decides it, and runs
    before the leftover budget starts a cut candidate."""
    fake, bench, result = _leader_bench([40.0, 56.0, 48.0])
    lead = "preset:fast+converge @0.75x"
    _third_seed_ran_before_the_cut_candidates(fake, lead)
    assert any(f"{lead} led, and its interval still included 1.0" in n for n in result.notes), result.notes
    assert result.pick.variant.name == lead and result.record(lead).summary.speedup_ci[0] > 1.0


def test_a_leader_one_more_seed_cannot_decide_is_not_confirmed_and_the_budget_explores():
    fake, bench, result = _leader_bench([70.0, 95.0, 48.0])  # 1.05x: no third seed, the cut candidate runs
    lead = "preset:fast+converge @0.75x"
    assert [s for v, s in fake.calls if v == lead] == [0, 1]
    assert len([1 for v, _ in fake.calls if v == "baseline"]) == 2
    assert result.record("preset:fast+converge @0.5x").runs  # the leftover went to the first cut candidate
    assert not any(" led, " in n for n in result.notes)
    assert result.pick.variant.kind == "baseline"


def test_a_leader_the_budget_cannot_confirm_says_so_and_is_not_picked():
    fake, bench, result = _leader_bench([40.0, 56.0, 48.0], budget=42.0)  # 12 s left: not the 15 s pair
    lead = "preset:fast+converge @0.75x"
    assert [s for v, s in fake.calls if v == lead] == [0, 1]
    assert any(f"{lead} led, but its interval" in n and "no longer fit in the --budget" in n for n in result.notes)
    assert result.pick.variant.kind == "baseline"


def test_a_run_stopped_at_its_cap_under_a_budget_is_not_said_to_be_stopped_by_the_budget():
    """The worker stops a candidate past the slowest baseline (timed_out, status ok): under --budget, that run's
    reason stayed 'stopped ... when the --budget ran out' (bench of 2026-12-06); it is the cap, and its miss says so."""
    figures = {"baseline": [100.0, 120.0], "T15 grad-clipping norm": [300.0, 300.0]}
    fake = FakeLauncher(figures, target=True)
    result = _bench(fake, tips=["T15"], repeats=2, target="val_acc=0.9", budget=1000.0).run()
    run = result.record("T15 grad-clipping norm").runs[0]
    assert run["timed_out"] and run["status"] == "ok"
    assert "budget" not in str(run.get("reason")) and "could no longer be faster" in run["cap_reason"]


def test_a_leader_one_run_carries_gets_its_one_more_seed_before_the_cut_candidates_not_after():
    """GRU-shaped (second bench of 2026-12-06): 1.89x with its interval above 1.0, but carried by one run; the
    leftover budget went to a cut candidate first and none was left for the seed that would decide. Now the
    leader's seed runs first, once (the end's one-more-seed step does not run it again)."""
    figures = {"baseline": [72.0, 88.0, 80.0, 80.0], "preset:fast+converge @0.75x": [40.0, 44.0, 42.0, 42.0]}
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=57.0).run()
    lead = "preset:fast+converge @0.75x"
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == "baseline"] == [0, 1, 2]
    others = [i for i, (v, _) in enumerate(fake.calls) if v not in ("baseline", lead)]
    assert others and all(i > fake.calls.index((lead, 2)) for i in others)
    assert any(
        f"{lead} led, and one run carried its interval (without the baseline's seed 1" in n for n in result.notes
    )
    assert result.pick.variant.name == lead


# ------------------------------------------------------- a candidate that would train as one that ran


class PartsLauncher(FakeLauncher):
    """FakeLauncher whose runs report the parts the worker found active: ``fast``'s resolve to nothing (its probe
    kept 32-true, ...) unless ``bf16`` is set, when the probe chose bf16 autocast."""

    def __init__(self, *a, bf16=False, **kw):
        super().__init__(*a, **kw)
        self.bf16 = bf16

    def run(self, spec, name, timeout=None):
        out = super().run(spec, name, timeout)
        v = spec["variant"]
        parts = [["safeguard", "", "skipped", "nothing to try"]]
        if "fast" in v:
            parts += [
                ["auto_probe", "", "active", "3 auto setting(s) timed"],
                ["precision", "T05", "active" if self.bf16 else "skipped", "probed"],
                ["loaders", "T02", "skipped", "as they were"],
                ["data_wait", "T02", "active", "not input-bound"],
            ]
        if "@" in v or "schedule-free" in v:
            parts.append(["lr_schedule", "T01", "active", "OneCycleLR"])
        return {**out, "parts": parts}


def _twin_bench(bf16=False, budget=None, walls=None):
    figures = {"baseline": [100.0, 104.0], "preset:fast+converge @0.75x": [None, None]}
    figures.update({f"preset:fast+converge @{f}x": [None, None] for f in ("0.5", "1")})
    fake = PartsLauncher(figures, target=True, bf16=bf16, walls=walls)
    bench = _bench(fake, tips=["T01"], presets=["fast+converge", "converge"], repeats=2, target="val_acc=0.9",
                   budget=budget)  # fmt: skip
    return fake, bench, bench.run()


def test_a_candidate_that_would_train_as_one_that_ran_is_not_run():
    """`fast` resolved to nothing on this setup (the LeNet task of issue 37: `converge @0.75x` then repeated
    `fast+converge @0.75x`'s curve value for value): `converge @f` is not run after `fast+converge @f`, the report
    says which run it would repeat, and the schedules that differ (cyclic) still run."""
    fake, _, result = _twin_bench()
    ran = {v for v, _ in fake.calls}
    for f in ("0.75", "0.5", "1"):
        assert f"preset:converge @{f}x" not in ran
        assert f"preset:fast+converge @{f}x" in ran
        why = result.record(f"preset:converge @{f}x").skipped
        assert why.startswith(f"not run: it would train as preset:fast+converge @{f}x did")
    assert "T01 lr-schedule cyclic @0.75x" in ran
    assert any(n.startswith("not run, since a candidate that ran trained as each would") for n in result.notes)


def test_a_candidate_whose_extra_part_was_on_is_no_twin():
    """The probe chose bf16 here: `fast+converge @f` trained otherwise than `converge @f` would, so both run."""
    fake, _, result = _twin_bench(bf16=True)
    ran = {v for v, _ in fake.calls}
    assert {f"preset:converge @{f}x" for f in ("0.75", "0.5", "1")} <= ran
    assert not any(n.startswith("not run, since a candidate that ran") for n in result.notes)


def test_a_twin_the_plan_cut_gives_its_place_in_the_leftover_budget_to_the_next_candidate():
    """Under a --budget that cut `converge @f`, the leftover budget skips the twins and starts the next cut
    candidate that trains differently."""
    fake, _, result = _twin_bench(budget=22.0, walls={"baseline": 3.0})  # the plan holds fast+converge's three spans
    assert result.record("preset:converge @0.75x").skipped.startswith("not run: it would train as")
    ran = [v for v, _ in fake.calls]
    assert not any(v.startswith("preset:converge") for v in ran)
    assert any(v.startswith("T01 lr-schedule cyclic") for v in ran), ran


def test_a_candidate_with_auto_settings_of_its_own_is_no_twin():
    """A candidate whose settings are a subset of one that ran, but hold `auto` (`optimizer: auto` with the same
    schedule): its own start-up probe measures again and may decide otherwise, so it is not skipped as a twin. The
    same candidate without the `auto` setting is."""
    import dataclasses

    from lightning_speedups.bench.results import VariantRecord

    _, bench, result = _twin_bench()
    ran = result.record("preset:fast+converge @0.75x")
    plain = result.record("preset:converge @0.75x").variant
    assert bench._trained_as(VariantRecord(dataclasses.replace(plain, name="plain"))) is ran
    probed = dataclasses.replace(plain, name="probed", overrides={**plain.overrides, "optimizer": "auto"})
    assert bench._trained_as(VariantRecord(probed)) is None


def test_a_gain_a_slow_seed_hides_from_the_pooled_spread_is_picked_with_the_seed_as_a_block(monkeypatch):
    """GRU-shaped (bench of 2026-12-07, bf16 path): seed 1 is slow for every variant (the baseline 75 and 100 s,
    the candidate 35 and 56 s). Each variant's spread around its own mean counts that seed as noise (the pooled interval
    was 0.88-4.38); taking the seed out first leaves the interaction, and the 1.96x candidate is picked."""
    from lightning_speedups.bench import stats

    figures = {
        "baseline": [75.0, 99.6, 90.0],
        "preset:fast+converge @0.75x": [41.9, 55.7, 50.0],
        "T01 lr-schedule bold-peak @0.75x": [34.8, 55.7, 45.0],
    }
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0, "T01 lr-schedule bold-peak @0.75x": 5.0}

    def run():
        fake = FakeLauncher(figures, target=True, walls=walls)
        bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=40.0)
        return fake, bench.run()

    fake, result = run()
    assert not any(s == 2 for _, s in fake.calls)  # two seeds of three variants: nothing else fit
    conv = result.record("T01 lr-schedule bold-peak @0.75x").summary
    assert conv.decided_by.startswith("seeds as blocks") and "(t, 2 dof)" in conv.decided_by
    assert conv.speedup == pytest.approx(math.sqrt(75.0 / 34.8 * 99.6 / 55.7), rel=1e-6)
    assert conv.speedup_ci[0] > 1.4 and conv.carried_by is None
    assert result.pick.variant.name == "T01 lr-schedule bold-peak @0.75x"
    # the same runs decided by the pooled spread (blocks never reach the dof they need): nothing is picked
    monkeypatch.setattr(stats, "MIN_BLOCK_DOF", 99)
    fake, result = run()
    conv = result.record("T01 lr-schedule bold-peak @0.75x").summary
    assert "pooled over" in conv.decided_by and conv.speedup_ci[0] < 1.0
    assert result.pick.variant.kind == "baseline"


def _batch_lever_bench(t04_rate, loss=1.2):
    """Target mode with T04 (the batch times 4, lr by each rule) among the throughput levers: its samples/s runs
    report ``t04_rate`` and a lower loss after as many steps (it saw four times the samples)."""
    figures = {"baseline": [100.0, 100.0], "samples/s": {"T04 max-batch x4-linear": t04_rate}}
    fake = FakeLauncher(figures, target=True)
    real_run = fake.run

    def run(spec, name, timeout=None):
        out = real_run(spec, name, timeout)
        if spec["target"] is None and spec["variant"] == "T04 max-batch x4-linear":
            out["loss"] = loss
        return out

    fake.run = run  # type: ignore[method-assign]
    bench = _bench(fake, tips=["T01", "T04", "T24"], repeats=2, target="val_acc=0.9", stack=True)
    return fake, bench.batch_size, bench.run()


def test_a_larger_batch_that_pays_by_samples_per_s_is_stacked_onto_the_schedules_at_the_same_share_of_samples():
    """The GRU of issue 37 on this CPU: 6,100 samples/s at batch 128, 6,800 at 512 (13,000 with bf16), and batch 512
    with a range-tested one-cycle reached the target in 39 s of fit against about 80. T04's x4-linear is timed by
    samples/s with the throughput tips (its loss after as many steps is not the baseline's: four times the
    samples); when it pays, the schedules' twins train at its batch, their span the same share of the baseline's
    samples (a quarter of the steps), and x4-linear alone is the stack alone, not a candidate of its own."""
    fake, batch, result = _batch_lever_bench([130.0, 128.0])
    assert batch
    names = [r.variant.name for r in result.records]
    twin = result.record("stack:T04 + T01 lr-schedule onecycle @0.75x").variant
    assert "stack:T04" in names
    # at the larger batch the one-cycles go longest span first: it needs more samples to the same loss
    spans = [
        r.variant.plan_fraction for r in result.records if "onecycle" in r.variant.name or "bold" in r.variant.name
    ]
    assert names[1] == "stack:T04 + T01 lr-schedule onecycle @1x" and spans[:6] == [1.0, 1.0, 0.75, 0.75, 0.5, 0.5]
    assert any("longest span first (1x, 0.75x, 0.5x)" in n for n in result.notes)
    assert twin.overrides["largest_batch.batch_size"] == 4 * batch and twin.overrides["largest_batch.enabled"]
    assert twin.overrides["lr_schedule.plan"] == 188  # 0.75 x the baseline's 1,000 steps, at 4x the batch
    sf = result.record("stack:T04 + T01 lr-schedule schedule-free").variant.overrides
    assert sf["schedule_free.warmup_steps"] == round(0.05 * 1000 / 4)
    assert "T04 max-batch x4-linear" not in names and "T04 max-batch x4-sqrt" in names
    plan = next(n for n in result.notes if n.startswith("plan:"))
    assert "; at 4x the batch, as many samples: 125 (0.5x), 188 (0.75x), 250 (1x)" in plan, plan


def test_a_lever_one_slow_window_leaves_undecided_pays_by_its_fastest_windows():
    """GRU run 9 of 2026-12-07 (no bf16): the baseline's first window 30% slow, the larger batch's second: T04 read
    2.12x and 0.87x and no third repeat could lift its paired interval, so it was dropped, and the bench fell under
    2x at batch 128. Its fastest window beat the baseline's: it gets its third repeat, and pays by its two fastest
    windows. Fusion, no faster in any window but the slow baseline's, is dropped after two; with the baseline's own
    fastest windows far apart the rule stands back."""
    rates = {
        "baseline (samples/s)": [41.6, 60.6, 60.1],
        "T04 max-batch x4-linear": [88.3, 53.0, 87.9],
        "T22 fusion": [56.6, 55.3, 58.0],
    }
    fake = FakeLauncher({"baseline": [100.0] * 3, "samples/s": rates}, target=True)
    result = _bench(fake, tips=["T01", "T04", "T22"], repeats=3, target="val_acc=0.9", stack=True).run()
    ran = [v for v, _ in fake.calls]
    assert ran.count("T04 max-batch x4-linear") == 3 and ran.count("T22 fusion") == 2
    phase = {r["name"]: r["summary"] for r in result.to_dict()["stack_phase"]}
    assert phase["T04 max-batch x4-linear"]["decided_by"] == "its fastest windows"
    assert "88 and 88 samples/s against the baseline's fastest 61" in phase["T04 max-batch x4-linear"]["picked_why"]
    assert result.records[1].variant.name.startswith("stack:T04 + ")
    assert "nor did its fastest window beat the baseline's" in phase["T22 fusion"]["picked_why"]
    # the baseline's two fastest windows 30% apart: a 1.2x second window is within its noise, in the two extra
    # repeats too
    rates["baseline (samples/s)"] = [41.6, 60.6, 46.0, 45.0, 44.0]
    rates["T04 max-batch x4-linear"] = [88.3, 53.0, 72.0, 60.0, 58.0]
    fake = FakeLauncher({"baseline": [100.0] * 5, "samples/s": rates}, target=True)
    result = _bench(fake, tips=["T01", "T04"], repeats=3, target="val_acc=0.9", stack=True).run()
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert len(phase["T04 max-batch x4-linear"]["runs"]) == 5
    assert not any(r.variant.kind == "stack" for r in result.records)


def test_a_larger_batch_that_does_not_pay_stays_a_candidate_to_the_target_and_a_diverged_one_is_not_stacked():
    for rate, loss in (([100.0, 100.0], 1.2), ([130.0, 128.0], float("nan"))):
        fake, _, result = _batch_lever_bench(rate, loss)
        names = [r.variant.name for r in result.records]
        assert not any(r.variant.kind == "stack" for r in result.records), names
        assert "T04 max-batch x4-linear" in names and "T04 max-batch x4-sqrt" in names
        plan = next(n for n in result.notes if n.startswith("plan:"))
        assert "the batch" not in plan


@pytest.fixture
def _cpu_bf16(monkeypatch):
    """The pack's view of this CPU: bf16 kernels (AMX or AMD avx512_bf16), whatever CI's CPU has."""
    monkeypatch.setenv("LIGHTNING_SPEEDUPS_CPU_BF16", "1")


def _multiplying_bench(rates, **kw):
    figures = {"baseline": [100.0] * 5, "samples/s": rates}
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T01", "T04", "T05"], repeats=2, target="val_acc=0.9", stack=True, **kw)
    return fake, bench.run()


def test_a_faster_precision_that_pays_only_at_the_larger_batch_is_timed_on_top_of_it_and_stacked(_cpu_bf16):
    """The GRU of issue 37 with avx512_bf16: bf16 at the configured batch 128 gave the baseline's samples/s
    (0.87-1.11x), at batch 512 1.93x the samples/s of batch 512 in fp32. Timed alone, T05 does not pay and T04 does;
    T05 is timed again on top of T04, paired against T04 alone, pays there, and both are stacked onto the
    schedules' twins."""
    rates = {
        "T04 max-batch x4-linear": [130.0, 128.0],
        "T05 amp": [100.0, 99.0],  # at or under 1.0 first: spared after one repeat in the first pass
        "stack:T04 (samples/s)": [131.0, 127.0],
        "stack:T04+T05 (samples/s)": [250.0, 246.0],
    }
    fake, result = _multiplying_bench(rates)
    ran = [v for v, _ in fake.calls]
    assert ran.count("T05 amp") == 1
    assert ran.count("stack:T04 (samples/s)") == 2 and ran.count("stack:T04+T05 (samples/s)") == 2
    twin = result.record("stack:T04+T05 + T01 lr-schedule onecycle @0.75x").variant
    assert twin.overrides["precision"] == "half" and twin.overrides["largest_batch.enabled"]
    assert "T05 amp" not in [r.variant.name for r in result.records]
    note = next(n for n in result.notes if n.startswith("stack: timed by samples/s"))
    assert "T05 amp on top of stack:T04 gain 1.9" in note and "Stacked T04, T05 onto" in note, note
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert phase["stack:T04+T05 (samples/s)"]["summary"]["speedup"] == pytest.approx(1.92, abs=0.02)
    assert len(phase["stack:T04 (samples/s)"]["runs"]) == 2


def test_a_larger_batch_that_pays_only_with_the_faster_precision_is_timed_on_top_of_it(_cpu_bf16):
    """The other way round (GRU, bf16, run 10 of 2026-12-07): T05 paid alone, T04 did not (1.83x, then 0.95x; its
    fastest window kept it to a third repeat and two more, all slow): T04 is timed on top of T05 (its loss at four
    times the samples is not held to T05's) and joins the stack."""
    rates = {
        "T04 max-batch x4-linear": [183.0, 95.0, 96.0, 97.0, 94.0],
        "T05 amp": [120.0, 121.0],
        "stack:T05 (samples/s)": [120.0, 122.0],
        "stack:T04+T05 (samples/s)": [240.0, 250.0],
    }
    _, result = _multiplying_bench(rates)
    names = [r.variant.name for r in result.records]
    assert names[1] == "stack:T04+T05 + T01 lr-schedule onecycle @1x", names
    assert "T04 max-batch x4-linear" not in names  # in the stack: not a candidate of its own


def test_a_multiplying_lever_is_not_stacked_when_it_does_not_pay_on_top_nor_timed_again_when_it_failed(_cpu_bf16):
    rates = {
        "T04 max-batch x4-linear": [130.0, 128.0],
        "T05 amp": [100.0, 99.0],
        "stack:T04 (samples/s)": [130.0, 129.0],
        "stack:T04+T05 (samples/s)": [128.0, 131.0],  # 0.98x first: its second repeat is spared
    }
    fake, result = _multiplying_bench(rates)
    assert [v for v, _ in fake.calls].count("stack:T04+T05 (samples/s)") == 1
    assert any("T05 amp on top of stack:T04 samples/s 0.98x of stack:T04's over 1 of" in n for n in result.notes)
    assert any(r.variant.name.startswith("stack:T04 + ") for r in result.records)
    assert not any("T05" in r.variant.name for r in result.records if r.variant.kind == "stack")
    # a lever whose runs failed (bf16 with no kernel for an op here) is not timed again at the larger batch
    fake = FakeLauncher(
        {"baseline": [100.0] * 3, "samples/s": {"T04 max-batch x4-linear": [130.0, 128.0]}}, target=True
    )
    real_run = fake.run

    def run(spec, name, timeout=None):
        out = real_run(spec, name, timeout)
        if spec["variant"] == "T05 amp":
            out.update(status="failed", reason="RuntimeError: no bf16 kernel")
        return out

    fake.run = run  # type: ignore[method-assign]
    result = _bench(fake, tips=["T01", "T04", "T05"], repeats=2, target="val_acc=0.9", stack=True).run()
    assert not any("(samples/s)" in v and v.startswith("stack:") for v, _ in fake.calls)
    assert any(r.variant.name.startswith("stack:T04 + ") for r in result.records)


def test_on_a_cpu_without_bf16_kernels_the_stack_phase_does_not_time_bf16(monkeypatch):
    """The pack's view says no bf16 kernels (an AVX2 CPU, or the view forced so on a CPU that has them): bf16 would
    be emulated, slower at any batch, as `precision: auto` knows; timed on a forced view it would stack a gain the
    hardware it stands for cannot give. T05 is neither timed by samples/s nor run to the target; T04 still is."""
    monkeypatch.setenv("LIGHTNING_SPEEDUPS_CPU_BF16", "0")
    rates = {"T04 max-batch x4-linear": [130.0, 128.0], "T05 amp": [300.0, 300.0]}
    fake, result = _multiplying_bench(rates)
    ran = {v for v, _ in fake.calls}
    assert "T05 amp" not in ran and "T04 max-batch x4-linear" in ran
    assert not any("T05" in r.variant.name for r in result.records)
    assert any(r.variant.name.startswith("stack:T04 + ") for r in result.records)
    assert any(n.startswith("stack: T05 not timed: this CPU has no bf16 kernels") for n in result.notes)


def test_a_pick_on_two_seeds_is_confirmed_on_a_third_before_the_leftover_explores():
    """The pick would be decided on two seeds; the leftover budget first runs its third seed (and the baseline's),
    then explores the candidates the plan cut. It reached again: it stays the pick, on three seeds."""
    fake, bench, result = _leader_bench([40.0, 41.0, 42.0])
    lead = "preset:fast+converge @0.75x"
    _third_seed_ran_before_the_cut_candidates(fake, lead)
    assert any(
        f"{lead} would have been picked on 2 seeds" in n and "reached the target again" in n for n in result.notes
    )
    assert result.pick.variant.name == lead and result.record(lead).summary.runs_ok == 3


def test_a_pick_that_misses_its_third_seed_is_not_picked_and_the_next_is_confirmed_in_turn():
    """GRU-shaped (bench and fit of 2026-12-07): the one-cycle over 0.75x at batch 512 reached on seeds 0 and 1 and
    flattened short of the target on seed 2. It cannot be picked; the next pick gets its own third seed."""
    figures = {
        "baseline": [80.0, 91.0, 88.0],
        "preset:fast+converge @0.75x": [40.0, 41.0, None],  # the fastest on two seeds; misses the third
        "T01 lr-schedule bold-peak @0.75x": [44.0, 46.0, 45.0],
    }
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0, "T01 lr-schedule bold-peak @0.75x": 5.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=75.0)
    result = bench.run()
    fc, conv = "preset:fast+converge @0.75x", "T01 lr-schedule bold-peak @0.75x"
    assert [s for v, s in fake.calls if v == fc] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == conv] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == "baseline"] == [0, 1, 2]  # seed 2 of the baseline ran once
    assert any(f"{fc} would have been picked on 2 seeds" in n and "missed the target on it" in n for n in result.notes)
    assert result.record(fc).summary.target_missed == 1
    assert result.pick.variant.name == conv


def _missed_twin_bench():
    """fast+converge @0.75x reaches on seeds 0 and 1 and misses seed 2; converge @0.75x, its schedule twin, reaches on
    all three (the budget holds two of them)."""
    figures = {
        "baseline": [80.0, 91.0, 88.0],
        "preset:fast+converge @0.75x": [40.0, 41.0, None],
        "preset:converge @0.75x": [44.0, 46.0, 45.0],
    }
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0, "preset:converge @0.75x": 5.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    return fake, _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=60.0)


def test_a_candidate_whose_schedule_twin_missed_a_seed_it_has_not_run_is_not_picked():
    """GRU-shaped (bench of 2026-12-07, run 12): converge @0.75x at batch 512 missed seed 2 (it flattened at
    0.880), and fast+converge @0.75x, the same schedule at the same batch, would have been picked on seeds 0 and 1
    with no budget left for seed 2. The same curve on seed 2 is the likeliest outcome: it is not picked, and the
    reason names the twin and the seed. A candidate with another schedule is no twin."""
    fake, bench = _missed_twin_bench()
    result = bench.run()
    conv = result.record("preset:converge @0.75x")
    assert [s for v, s in fake.calls if v == "preset:converge @0.75x"] == [0, 1]
    assert result.record("preset:fast+converge @0.75x").summary.target_missed == 1
    assert conv.summary.speedup_ci[0] > 1.0  # its own runs would pick it
    assert conv.summary.picked_why.startswith("not picked: preset:fast+converge @0.75x trains the same schedule")
    assert "on seed 2, which this one has not run" in conv.summary.picked_why
    assert result.pick.variant.kind == "baseline"
    from lightning_speedups.bench.target_runs import _schedule_settings

    twin = _schedule_settings(result.record("preset:fast+converge @0.75x").variant)
    assert _schedule_settings(conv.variant) == twin
    assert _schedule_settings(result.record("T01 lr-schedule bold-peak @0.75x").variant) != twin


def test_a_pick_only_the_leftover_budget_ran_is_confirmed_too():
    """LeNet-shaped (bench of 2026-12-07, third session): the planned candidate missed, and the pick came from the
    leftover budget on two seeds, after the confirmation stage, with nothing said. It gets its third seed when the
    budget holds it, and the notes say so."""
    lead = "T01 lr-schedule bold-peak @0.75x"
    figures = {"baseline": [80.0, 91.0, 88.0], "preset:fast+converge @0.75x": [None, None], lead: [30.0, 31.0, 32.0]}
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0, lead: 3.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=80.0).run()
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]
    assert fake.calls.index((lead, 1)) > fake.calls.index(("preset:fast+converge @0.75x", 0))
    assert any(f"{lead} would have been picked on 2 seeds" in n for n in result.notes), result.notes
    assert result.pick.variant.name == lead and result.record(lead).summary.runs_ok == 3


def test_a_pick_the_budget_cannot_confirm_is_still_picked_and_the_notes_say_so():
    lead = "preset:fast+converge @0.75x"
    figures = {"baseline": [80.0, 91.0, 88.0], lead: [40.0, 41.0, 42.0]}
    fake = FakeLauncher(figures, target=True, walls={"baseline": 10.0, lead: 8.0})  # left: not even its own run
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=42.0).run()
    assert [s for v, s in fake.calls if v == lead] == [0, 1]
    assert any(
        f"{lead} would be picked on 2 seeds; one more seed of it and the baseline (about 18 s) (or of it alone, about"
        " 8 s) no longer fit"
        in n
        and "not confirmed" in n
        for n in result.notes
    ), result.notes
    assert result.pick.variant.name == lead


def test_a_pick_whose_third_seed_fits_but_not_the_baseline_s_runs_its_own_alone():
    """The budget left holds not the 15 s pair (the baseline's runs take 10 s), but the pick's own 5 s run. It runs
    alone, to look for a miss: on the GRU the one-cycle over 0.75x at batch 512 flattened short of the target on seed 2 in
    four benches. It reached: picked; a miss rules it out."""
    fake, bench, result = _leader_bench([40.0, 41.0, 42.0], budget=44.0)
    lead = "preset:fast+converge @0.75x"
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == "baseline"] == [0, 1]
    assert any(f"{lead} would have been picked on 2 seeds: one more seed of it (alone:" in n for n in result.notes)
    pick = result.record(lead).summary
    assert result.pick.variant.name == lead and pick.runs_ok == 3
    fake, bench, result = _leader_bench([40.0, 41.0, None], budget=44.0)
    assert result.record(lead).summary.target_missed == 1 and result.pick.variant.kind == "baseline"


#: the baseline's two seeds and fast+converge's (30 s), bold-peak's shorter span (a miss: 1 s), fast+converge's third
#: and the baseline's (15 s), bold-peak's two (9 s), and bold-peak's third (4.5 s) no longer fits
BUDGET_NO_THIRD = 57.0


def test_a_faster_pick_the_budget_cannot_confirm_gives_way_to_one_that_reached_on_three_seeds():
    """GRU without bf16, run 10 of 2026-12-07: the leftover budget ran the one-cycle over 0.75x at batch 512 on two
    seeds (1.98x), with no budget to confirm it, and bench picked it; under `fit` it flattened at 0.880 on seed 2.
    A candidate that reached on three seeds is picked over it, and the notes say why; with the budget for the faster
    one's third seed, it is confirmed and picked."""
    fc, lead = "preset:fast+converge @0.75x", "T01 lr-schedule bold-peak @0.75x"
    shorter = "T01 lr-schedule bold-peak @0.5x"  # the lead's shorter span runs first, and misses
    figures = {"baseline": [80.0, 91.0, 88.0], fc: [40.0, 41.0, 42.0], lead: [30.0, 31.0, 32.0], shorter: [None]}
    walls = {"baseline": 10.0, fc: 5.0, lead: 4.5}
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=BUDGET_NO_THIRD).run()
    assert [s for v, s in fake.calls if v == fc] == [0, 1, 2]
    assert [s for v, s in fake.calls if v == lead] == [0, 1]
    assert result.record(lead).summary.speedup > result.record(fc).summary.speedup
    assert result.pick.variant.name == fc
    assert result.record(lead).summary.picked_why.startswith("faster on 2 seeds")
    assert any(n.startswith(f"{lead} was faster on 2 seeds") and f"{fc} (" in n for n in result.notes)
    assert any(
        n.startswith(f"{lead} led on 2 seeds: the same schedule")
        and n.endswith("missed the target: it cannot be picked")
        for n in result.notes
    )
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=BUDGET_NO_THIRD + 3).run()
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]
    assert result.pick.variant.name == lead


def test_the_stack_phase_times_every_run_over_a_window_long_enough_to_outlast_a_time_slice():
    """20 batches of a small model took 0.2 s (LeNet, issue 37): a time slice lent elsewhere moved samples/s by
    10-30% there. The baseline's first run calibrates: its window was 0.25 s, so every run of the phase (the
    baseline's repeats too; the calibration is not kept) is timed over 20 * 1.5 / 0.25 = 120 batches."""
    from lightning_speedups.bench.target_runs import STACK_WINDOW_S

    figures = {"baseline": [100.0, 100.0, 100.0], "samples/s": {"T24 channels-last": [130.0, 128.0, 129.0]}}
    fake = FakeLauncher(figures, target=True)
    real_run = fake.run
    steps_seen = []

    def run(spec, name, timeout=None):
        out = real_run(spec, name, timeout)
        if spec["target"] is None:
            steps_seen.append((spec["variant"], spec["steps"]))
            out["timed_s"] = 0.25 * spec["steps"] / 20
        return out

    fake.run = run  # type: ignore[method-assign]
    bench = _bench(fake, tips=["T01", "T24"], repeats=2, target="val_acc=0.9", stack=True, steps=20)
    result = bench.run()
    want = round(20 * STACK_WINDOW_S / 0.25)
    assert steps_seen[0] == ("baseline (samples/s)", 20)
    assert all(n == want for _, n in steps_seen[1:]) and len(steps_seen) == 1 + 2 * 2
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    assert len(phase["baseline (samples/s)"]["runs"]) == 2  # the calibration is not one of its repeats
    note = next(n for n in result.notes if n.startswith("stack: timed by samples/s"))
    assert f"2 paired repeats of 1 + {want} batches, {want} rather than --steps 20" in note, note
    assert bench.options.steps == 20  # the phase's window is its own: the runs to the target keep --steps


def test_the_stack_phase_rates_each_run_by_the_fastest_tenth_of_its_window():
    """The GRU of issue 37: the baseline's samples/s moved by 27% between two repeats, its median step 19.8 ms then
    26.5 ms, its fastest 18.6 and 19.8 ms: another process held the core for most of a window. The baseline's second
    window is slow but for its last two steps; over the window's mean T24 would be 1.25x then 3.5x (no interval above
    1.0 on two repeats), over the fastest tenth 1.25x twice: it pays. The JSON keeps the window's mean."""
    slow = {0: [0.1] * 20, 1: [0.3] * 18 + [0.1] * 2}
    fake = FakeLauncher({"baseline": [100.0] * 3}, target=True)
    real_run = fake.run

    def run(spec, name, timeout=None):
        out = real_run(spec, name, timeout)
        if spec["target"] is None:
            repeat = int(name.rsplit("-r", 1)[1])
            steps = [0.08] * 20 if spec["variant"] == "T24 channels-last" else slow[repeat]
            out.update(step_times=steps, samples=[64] * 20, timed_s=3.0, samples_per_s=64 * 20 / sum(steps))
        return out

    fake.run = run  # type: ignore[method-assign]
    result = _bench(fake, tips=["T01", "T24"], repeats=2, target="val_acc=0.9", stack=True).run()
    assert any(r.variant.name.startswith("stack:T24 + ") for r in result.records)
    phase = {r["name"]: r for r in result.to_dict()["stack_phase"]}
    base_runs = phase["baseline (samples/s)"]["runs"]
    assert [round(r["samples_per_s"]) for r in base_runs] == [640, 640]
    assert round(base_runs[1]["samples_per_s_window"]) == round(64 * 20 / (18 * 0.3 + 2 * 0.1))
    note = next(n for n in result.notes if n.startswith("stack: timed by samples/s"))
    assert "samples/s over the fastest 10% of each" in note


def test_a_larger_batch_that_misses_on_its_likeliest_candidate_is_not_tried_on_the_others():
    """LeNet-shaped (bench of 2026-12-07): batch 512 paid by samples/s, but under SGD every candidate at that batch
    missed the target, and the five of them took the budget. The first (the plan's likeliest) missed and none at
    that batch reached: the others at that batch are not run, and the candidates at the configured batch are."""
    figures = {
        "baseline": [100.0, 100.0, 100.0],
        "samples/s": {"T04 max-batch x4-linear": [130.0, 128.0, 129.0]},
        "stack:T04 + T01 lr-schedule onecycle @1x": [None, None, None],
        "T01 lr-schedule bold-peak @0.75x": [50.0, 52.0, 51.0],
    }
    fake = FakeLauncher(figures, target=True)
    bench = _bench(fake, tips=["T01", "T04"], repeats=2, target="val_acc=0.9", stack=True)
    result = bench.run()
    ran = {v for v, _ in fake.calls}
    assert "stack:T04 + T01 lr-schedule onecycle @1x" in ran
    batch = [r for r in result.records if r.variant.kind == "stack"]
    assert len(batch) > 3 and not any(r.runs for r in batch[1:])
    assert all("the stack's larger batch" in r.skipped for r in batch[1:])
    assert any("missed the target on its likeliest candidate" in n for n in result.notes)
    assert result.record("T01 lr-schedule bold-peak @0.75x").runs
    assert result.pick.variant.name == "T01 lr-schedule bold-peak @0.75x"
    # where the first candidate at the larger batch reached, the others at it run as before
    figures["stack:T04 + T01 lr-schedule onecycle @1x"] = [60.0, 61.0, 62.0]
    fake = FakeLauncher(figures, target=True)
    result = _bench(fake, tips=["T01", "T04"], repeats=2, target="val_acc=0.9", stack=True).run()
    assert result.record("stack:T04 + T01 lr-schedule bold-peak @1x").runs


# --------------------------------------------------------------------------- adaptive capping, shorter cycles


def _capping_bench(figures, budget=100.0):
    walls = {"baseline": 10.0, "preset:fast+converge @0.75x": 5.0, "T01 lr-schedule bold-peak @0.75x": 5.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    caps = []
    run = fake.run

    def spy(spec, name, timeout=None):
        caps.append((spec["variant"], spec["seed"], spec["target_max_time"], spec["cap_leader"]))
        return run(spec, name, timeout)

    fake.run = spy
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=budget)
    return fake, bench, bench.run(), caps


_CAPPING = {
    "baseline": [80.0, 90.0, 85.0],
    "preset:fast+converge @0.75x": [40.0, 41.0, 42.0],
    "T01 lr-schedule bold-peak @0.75x": [44.0, 46.0, 45.0],
    "preset:converge @0.75x": [60.0, 62.0, 61.0],
    "preset:fast+converge @0.5x": [30.0, 33.0, 31.0],  # the pick, confirmed on its third seed
    "T01 lr-schedule bold-peak @0.5x": [34.0, 70.0, 70.0],  # under the pick's time on its first seed
    "preset:fast+converge @1x": [70.0, 70.0, 70.0],  # every candidate cut by the plan: slower than the pick
}


def test_a_confirmed_leader_stops_a_later_candidates_first_run_at_its_time():
    """Adaptive capping (ParamILS): once a candidate reached the target on three seeds, a candidate that starts after
    it stops once past its slowest time + the margin, not the baseline's: it could no longer be faster than that one
    on its seed, and a miss runs no further seed. What ran before the leader was confirmed ran to the baseline's cap;
    a candidate that reached under the leader's cap runs its next seed to the baseline's cap."""
    figures = dict(_CAPPING)
    figures.update({k: [70.0, 70.0, 70.0] for k in ("preset:converge @0.5x", "T01 lr-schedule bold-peak @1x")})
    fake, bench, result, caps = _capping_bench(figures)
    pick = "preset:fast+converge @0.5x"
    assert result.pick.variant.name == pick and len(result.record(pick).runs) == 3
    margin = 10.0 / 85.0  # the baseline's spread over its three seeds (80, 90, 85): wider than the 10% margin
    by_leader = 33.0 * (1 + margin)  # the pick's slowest time + the margin
    by_baseline = 90.0 * (1 + margin)
    # before the pick had three seeds, every candidate ran to the baseline's cap
    third = next(i for i, (v, seed, _, _) in enumerate(caps) if v == pick and seed == 2)
    assert caps[third + 1 :] and all(leader is None for _, _, _, leader in caps[: third + 1])
    slow = result.record("preset:fast+converge @1x")
    (run,) = slow.runs
    assert run["cap_s"] == pytest.approx(by_leader) and run["cap_leader"] == pick
    assert run["cap_baseline_s"] == pytest.approx(by_baseline)
    assert slow.summary.target_outpaced == 1 and slow.summary.outpaced_by == pick
    assert f"stopped past the time to the target of {pick} in 1 of 1 run(s)" in slow.summary.picked_why
    assert "could no longer be faster than that one on this seed" in run["cap_reason"]
    # it reached under the leader's cap on its first seed; its second ran to the baseline's cap, and was slow
    bold = [(s, cap, leader) for v, s, cap, leader in caps if v == "T01 lr-schedule bold-peak @0.5x"]
    assert bold[:2] == [(0, pytest.approx(by_leader), pick), (1, pytest.approx(by_baseline), None)]
    assert [r.get("time_to_target_s") for r in result.record("T01 lr-schedule bold-peak @0.5x").runs][:2] == [
        34.0,
        70.0,
    ]
    lost = [r for rec in result.records for r in rec.runs if r.get("cap_leader") and not r.get("reached")]
    saved = sum(r["cap_baseline_s"] - r["cap_s"] for r in lost)
    assert lost and any(
        f"{len(lost)} candidate run(s) stopped once past a leading candidate's slowest time" in n
        and f"{saved:.0f} s of training saved" in n
        for n in result.notes
    ), result.notes
    # the other stopped runs are not said to be stopped at the baseline's time
    assert not any("stopped once past the slowest baseline run's time" in n for n in result.notes)
    # stopped at the leader's time is no miss of the schedule: a twin of it on another seed is still picked
    assert all(not r.summary.picked_why.startswith("not picked:") for r in result.records if r.summary)


def test_a_leader_on_two_seeds_stops_nothing():
    """A candidate that reached on two seeds only may miss its third (run 10 of the GRU in issue 37): the candidates
    it stopped could then have been picked. It caps no one until a third seed confirms it."""
    _, bench, result, _ = _capping_bench(dict(_CAPPING))
    pick = result.record("preset:fast+converge @0.5x")
    later = result.record("preset:fast+converge @1x").variant
    assert bench._cap(later).leader is None  # it has run: its next seed is capped by the baseline
    fresh = dataclasses.replace(later, name="a candidate not run yet")
    assert bench._cap(fresh).leader == pick.variant.name  # of the candidates confirmed, the one slowest the least
    for record in result.records:
        if record is not pick and record.variant.kind != "baseline":
            record.runs[:] = record.runs[:2]
    assert bench._cap(fresh).leader == pick.variant.name
    pick.runs[:] = pick.runs[:2]
    assert bench._cap(fresh).leader is None and bench._leader(fresh) is None
    pick.runs.append({**pick.runs[0], "repeat": 2, "reached": False, "time_to_target_s": None})
    assert bench._leader(fresh) is None  # a leader that missed a seed is none


def test_a_run_stopped_at_a_leaders_time_is_no_miss_of_its_schedule_or_batch():
    """An outpaced run lost to the leader on its seed; it says nothing of whether its schedule or its batch reaches the
    target: the twin that trains the same schedule is still picked, and the larger batch is still tried."""
    from lightning_speedups.bench.stats import outpaced

    capped = {"status": "ok", "reached": False, "timed_out": True, "cap_leader": "x", "repeat": 2}
    assert outpaced(capped)
    assert not outpaced({**capped, "cap_leader": None})  # at the baseline's time: a miss
    assert not outpaced({**capped, "flattened": True})  # it flattened before the cap: a miss
    assert not outpaced({**capped, "reached": True})
    _, bench = _missed_twin_bench()
    result = bench.run()
    conv = result.record("preset:converge @0.75x")
    assert conv.summary.picked_why.startswith("not picked: preset:fast+converge @0.75x trains the same schedule")
    (missed,) = [r for r in result.record("preset:fast+converge @0.75x").runs if not r.get("reached")]
    missed.update(timed_out=True, cap_leader="another candidate")  # stopped at a leader's time instead
    assert bench._sibling_missed(conv) is None
    # the larger batch: its first candidate stopped at a leader's time does not drop the others
    stacked = [r for r in bench.records if r.variant.kind == "stack"]
    assert not stacked  # no stack phase here; the rule is read on a made-up record of the larger batch
    from lightning_speedups.bench.results import VariantRecord
    from lightning_speedups.bench.variants import Variant

    def batch(name):
        overrides = {"largest_batch.batch_size": 512, "lr_schedule.plan": 10}
        return VariantRecord(Variant(name=name, kind="stack", overrides=overrides, presets=("converge",)), phase=1)

    first, second = batch("stack:T04 + a @1x"), batch("stack:T04 + b @1x")
    first.runs.append(dict(capped))
    bench.records += [first, second]
    assert bench._batch_failed(second) is None
    first.runs[0]["cap_leader"] = None  # a miss at the baseline's time drops the others
    assert "missed the target on stack:T04 + a @1x" in bench._batch_failed(second)


def test_a_shorter_one_cycle_is_not_run_once_a_longer_span_of_it_flattened():
    """LeNet-shaped (issue 37, every bench): fast+converge over 0.75x flattened short of the target, and over 0.5x
    it missed too, lower, each time. The same one-cycle at a shorter span is not run (converge's, the same schedule,
    neither); a one-cycle whose longer span missed by its time cap, still improving, is (it anneals sooner)."""
    figures = {
        "baseline": [80.0, 90.0, 85.0],
        "preset:fast+converge @0.75x": [("flat", 50.0), None, None],
        "T01 lr-schedule bold-peak @0.75x": [None, None, None],  # past the baseline's time: capped, not flat
        "T01 lr-schedule bold-peak @0.5x": [40.0, 41.0, 42.0],
    }
    fake = FakeLauncher(figures, target=True)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=400.0).run()
    ran = {v for v, _ in fake.calls}
    for name in ("preset:fast+converge @0.5x", "preset:converge @0.5x"):
        assert name not in ran
        assert result.record(name).skipped.startswith(
            "not run: preset:fast+converge @0.75x, the same one-cycle over a longer span, flattened short of the"
            " target on seed 0"
        )
    assert "T01 lr-schedule bold-peak @0.5x" in ran and "preset:fast+converge @1x" in ran  # a longer span runs
    assert any(
        n.startswith("not run, since the same one-cycle over a longer span flattened")
        and "preset:fast+converge @0.5x" in n
        for n in result.notes
    )
    assert result.pick.variant.name == "T01 lr-schedule bold-peak @0.5x"


def test_the_worker_keeps_the_leader_that_capped_its_run():
    """The run's result names the leader whose time stopped it and the baseline's cap it would have had: what tells
    an outpaced run from a miss, and what bench counts as saved."""
    from types import SimpleNamespace

    from lightning_speedups.bench.stats import outpaced
    from lightning_speedups.bench.worker import _verdict

    figures = {
        "checks": [{"step": 80}],
        "metric_seen": True,
        "reached": False,
        "best_value": 0.8,
        "train_s": 33.0,
        "timed_out": True,
    }
    probe = SimpleNamespace(max_time=33.0, results=lambda: dict(figures))
    trainer = SimpleNamespace(callbacks=[], callback_metrics={})
    spec = {"cap_reason": "stopped at 33 s of training, past ... of A", "cap_leader": "A", "cap_baseline_s": 99.0}
    target = Target("val_acc", 0.9, "max")
    out = _verdict({}, spec, probe, target, trainer)
    assert out["cap_leader"] == "A" and out["cap_baseline_s"] == 99.0 and out["cap_s"] == 33.0
    assert out["status"] == "ok" and out["miss"].startswith("stopped at 33 s") and outpaced(out)


def test_a_candidate_the_leftover_ran_is_confirmed_before_the_next_one_starts():
    """LeNet-shaped (issue 37, bf16, run 8 of the task): the leftover budget ran the 0.5x one-cycle on two seeds
    (2.06x), then the 1x fast+converge (47 s, slower than the baseline), and no budget was left for the 0.5x's third
    seed. Now the would-be pick is confirmed before the next candidate starts, and once confirmed it caps that one's
    first run at its own time."""
    lead = "T01 lr-schedule bold-peak @0.5x"
    figures = {
        "baseline": [36.0, 43.0, 40.0],
        "preset:fast+converge @0.75x": [None, None],
        "T01 lr-schedule bold-peak @0.75x": [37.0, 35.0, 36.0],
        "preset:fast+converge @0.5x": [None, None],
        lead: [17.0, 20.0, 18.0],
        "preset:converge @0.5x": [None, None],
        "preset:fast+converge @1x": [42.0, 42.0],
    }
    walls = {"baseline": 45.0, lead: 20.0, "T01 lr-schedule bold-peak @0.75x": 40.0, "preset:fast+converge @1x": 47.0}
    walls.update({k: 45.0 for k in figures if k not in walls})
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=520.0).run()
    calls = fake.calls
    assert (lead, 2) in calls and calls.index((lead, 2)) < calls.index(("preset:fast+converge @1x", 0))
    assert any(
        f"{lead} would have been picked on 2 seeds" in n and "reached the target again" in n for n in result.notes
    )
    (slow,) = result.record("preset:fast+converge @1x").runs
    assert slow["cap_leader"] == lead and not slow["reached"]
    assert result.pick.variant.name == lead and result.record(lead).summary.runs_ok == 3


def test_a_candidate_a_leader_caps_is_estimated_at_its_cap_so_the_leftover_runs_it():
    """GRU-shaped (issue 37, no bf16, run 13 of the task): the pick was confirmed on three seeds with 72 s of the
    budget left, and the next candidate was estimated at the baseline's 90 s, so nothing more ran. Capped at the
    leader's time, its run costs that and the start-up: here 52 s + 18.6% (the baselines' spread) + 4 s = 66 s,
    which the 75 s left hold."""
    lead = "preset:fast+converge @0.75x"
    nxt = "T01 lr-schedule bold-peak @0.75x"
    figures = {"baseline": [82.0, 98.0, 86.0], lead: [52.0, 50.0, 51.0], nxt: [49.0, 50.0]}
    walls = {"baseline": 90.0, lead: 55.0, nxt: 53.0}
    fake = FakeLauncher(figures, target=True, walls=walls)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=510.0)
    result = bench.run()
    assert [s for v, s in fake.calls if v == lead] == [0, 1, 2]  # confirmed, with 75 s of the budget left
    assert fake.calls[-1] == (nxt, 0)  # estimated at its cap (66 s), not the baseline's 90 s: it ran
    (run,) = result.record(nxt).runs
    margin = (98.0 - 82.0) / 86.0
    assert run["reached"] and run["time_to_target_s"] == 49.0  # under its cap: 52 s + the margin
    assert bench._estimate(dataclasses.replace(result.record(nxt).variant, name="fresh")) == pytest.approx(
        52.0 * (1 + margin) + 4.0
    )


def test_the_would_be_pick_s_shorter_span_runs_before_its_confirmation_and_the_plan_s_order():
    """LeNet-shaped (issue 37, bf16, run 9 of the task): the bold peak over 0.75x led on two seeds; its confirmation
    (a seed of it and of the baseline) and the plan's next candidates took the budget, and the same schedule over
    0.5x, which reached in two other benches of the task, never ran. Now the leader's shorter span runs first, ahead
    of the plan's order (fast+converge @0.5x, converge @0.75x), and once it reaches on both seeds it is the pick the
    budget confirms. Without the descent, this budget holds the 0.75x's confirmation and converge @0.75x, not the
    0.5x."""
    longer, shorter = "T01 lr-schedule bold-peak @0.75x", "T01 lr-schedule bold-peak @0.5x"
    figures = {
        "baseline": [40.0, 42.0, 41.0],
        "preset:fast+converge @0.75x": [None, None],
        longer: [27.0, 27.5, 28.0],
        "preset:converge @0.75x": [None, None],
        "preset:fast+converge @0.5x": [None, None],
        shorter: [18.0, 18.5, 19.0],
    }
    walls = {"baseline": 45.0, longer: 30.0, shorter: 22.0}
    walls.update({k: 45.0 for k in figures if k not in walls})
    fake = FakeLauncher(figures, target=True, walls=walls)
    result = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=320.0).run()
    calls = fake.calls
    assert calls.index((shorter, 0)) == calls.index((longer, 1)) + 2  # the baseline's second seed, then the descent
    assert [s for v, s in calls if v == shorter] == [0, 1, 2] and [s for v, s in calls if v == longer] == [0, 1]
    assert ("preset:fast+converge @0.5x", 0) not in calls and ("preset:converge @0.75x", 0) not in calls
    assert any(
        n.startswith(f"{longer} led on 2 seeds: the same schedule over the next shorter span, {shorter}, ran before")
        and n.endswith("reached the target on 2 of 2 seeds")
        for n in result.notes
    ), result.notes
    assert result.pick.variant.name == shorter and result.record(shorter).summary.runs_ok == 3
    # the plan's order, as before the descent: the 0.75x is confirmed and the budget goes on to the next candidate
    fake = FakeLauncher(figures, target=True, walls=walls)
    bench = _bench(fake, tips=None, presets=None, repeats=2, target="val_acc=0.9", budget=320.0)
    bench._descend_span = lambda base, repeats: False  # type: ignore[method-assign]
    result = bench.run()
    assert (shorter, 0) not in fake.calls and result.pick.variant.name == longer
