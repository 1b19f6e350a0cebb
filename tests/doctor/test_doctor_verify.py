"""``doctor --verify``: each finding's fix timed with bench on the user's setup; advice that does not pay is demoted.

The timing runs go through bench's launcher; here a fake one returns made-up samples/s by variant, so
the verdicts are decided by figures the test chooses (and the real bench machinery around them: the
variants, the pairing by repeat, the 95% interval, the A/A noise floor). One test runs the real thing.
"""

from __future__ import annotations

import json

import pytest
from helpers import FakeLauncher

from lightning_speedups.bench.stats import Spread, VariantSummary
from lightning_speedups.doctor import VerifyOptions, diagnose, main, verify_findings
from lightning_speedups.doctor.runner import exit_code_for
from lightning_speedups.doctor.verify import judge
from lightning_speedups.inspection import Finding, Item, print_report, to_dict

#: the embedded default (DigitsCNN: three biased convs before BatchNorm, NCHW weights, AdamW for-loop)
DEFAULT: list[str] = []


def _finding(tip: str, severity: str = "medium") -> Finding:
    return Finding.from_items(tip, [Item(severity, f"evidence for {tip}", f"fix for {tip}")]).described(
        tip.lower(), tip
    )


def _verify(findings, rates, **kw):
    fake = FakeLauncher(rates, **{k: kw.pop(k) for k in ("mems", "fail", "losses") if k in kw})
    options = VerifyOptions(steps=3, warmup=1, repeats=kw.pop("repeats", 3), launcher=fake, clock=fake.clock, **kw)
    return verify_findings(findings, DEFAULT, options), fake


def test_a_recommendation_that_measures_slower_is_demoted_with_its_figure():
    slower, faster = _finding("T24", "medium"), _finding("T16", "medium")
    report, fake = _verify(
        [slower, faster],
        {
            "baseline": [100.0, 104.0, 98.0],
            "T24 channels-last": [80.0, 83.0, 79.0],
            "T16 conv-bias": [130.0, 134.0, 127.0],
        },
    )
    assert report.error is None and sorted(report.timed) == ["T16", "T24"]
    # the baseline is the config as given, twice (A/A), and each fix on top of it, over 3 repeats
    assert fake.calls.count("T24 channels-last") == 3 and fake.calls.count("baseline (A/A)") == 3
    assert slower.measured is not None and slower.measured.verdict == "slower"
    assert slower.demoted and slower.severity == "low" and slower.measured.severity_before == "medium"
    assert "0.80x samples/s" in slower.measured.figure and "95% CI" in slower.measured.figure
    assert faster.measured is not None and faster.measured.verdict == "pays"
    assert not faster.demoted and faster.severity == "medium"
    assert faster.measured.ratio == pytest.approx(1.30, abs=0.01)
    # the demoted one no longer fails the run; the one that pays still does
    assert exit_code_for([slower], "medium") == 0 and exit_code_for([slower], "low") == 0
    assert exit_code_for([faster], "medium") == 1


def test_a_gain_within_the_noise_floor_is_demoted_as_no_gain():
    f = _finding("T16", "medium")
    # the A/A pair lands 8% apart: a 5% gain is noise here
    _verify(
        [f],
        {
            "baseline": [100.0, 100.0, 100.0],
            "baseline (A/A)": [108.0, 108.0, 108.0],
            "T16 conv-bias": [105.0, 105.5, 104.5],
        },
    )
    assert f.measured is not None and f.measured.verdict == "no-gain", f.measured
    assert "noise floor" in f.measured.figure and f.demoted


def test_a_fix_that_fails_here_is_demoted_and_tips_bench_cannot_time_are_left_as_they_are():
    broken, schedule = _finding("T06", "medium"), _finding("T01", "low")
    report, _ = _verify([broken, schedule], {"baseline": 100.0}, fail={"T06 optimizer"})
    assert broken.measured is not None and broken.measured.verdict == "failed" and broken.demoted
    assert "OutOfMemoryError" in broken.measured.figure
    # T01 changes the optimisation: not timed by samples/s, the finding keeps its severity, with the reason
    assert schedule.measured is not None and schedule.measured.verdict == "not-timed"
    assert "--target" in schedule.measured.figure and schedule.severity == "low" and not schedule.demoted
    assert report.timed == ["T06"]


def test_a_fix_that_needs_what_the_setup_lacks_is_not_timed():
    f = _finding("T03", "high")  # pinned memory needs a CUDA device; this setup is the CPU
    report, fake = _verify([f], {"baseline": 100.0})
    assert f.measured is not None and f.measured.verdict == "not-timed" and "CUDA" in f.measured.figure
    assert f.severity == "high" and not f.demoted and "T03 pin-memory" not in fake.calls
    assert report.timed == []


def test_judge_memory_tips_by_training_memory_and_the_rest_by_the_pick_rule():
    s = VariantSummary.empty()
    s.speedup, s.speedup_ci, s.mem_ratio = 0.8, (0.75, 0.85), 0.6
    m = judge(s, "memory", 0.02)
    assert m.verdict == "pays" and m.ratio == pytest.approx(1 / 0.6) and "0.60x the baseline's memory" in m.figure
    s.mem_ratio = 1.0
    assert judge(s, "memory", 0.02).verdict == "no-gain"
    s.speedup, s.speedup_ci = 1.01, (1.005, 1.015)
    assert judge(s, "speed", 0.02).verdict == "no-gain"  # below --min-gain
    s.speedup, s.speedup_ci = 1.2, (0.6, 2.4)
    wide = judge(s, "speed", 0.02)
    assert wide.verdict == "no-gain" and "interval is wide" in wide.figure
    s.sane, s.sanity = False, "loss 9 vs baseline 2"
    assert judge(s, "speed", 0.02).verdict == "failed"
    s2 = VariantSummary.empty()
    s2.samples_per_s = Spread.of([1.0])
    s2.speedup, s2.speedup_ci = 1.5, (None, None)
    one = judge(s2, "speed", 0.02)
    assert one.verdict == "no-gain" and "one paired repeat" in one.figure


def test_diagnose_verify_on_the_embedded_default_reports_and_serialises_the_measurements():
    fake = FakeLauncher(
        {"baseline": [100.0, 101.0], "T24 channels-last": [70.0, 72.0], "T16 conv-bias": [125.0, 128.0]}
    )
    options = VerifyOptions(steps=2, warmup=1, repeats=2, launcher=fake, clock=fake.clock)
    result = diagnose(DEFAULT, steps=2, lint=False, verify=options)
    by_tip = {f.tip: f for f in result.findings}
    assert result.verify is not None and result.verify.error is None
    assert by_tip["T24"].measured.verdict == "slower" and by_tip["T24"].demoted
    assert by_tip["T16"].measured.verdict == "pays" and not by_tip["T16"].demoted
    doc = to_dict(result, fail_on="low")
    assert doc["counts"]["demoted"] >= 1
    assert doc["verify"]["timed"] and "T24" in doc["verify"]["timed"]
    t24 = next(f for f in doc["findings"] if f["tip"] == "T24")
    assert t24["measured"]["verdict"] == "slower" and t24["measured"]["severity_before"] == "low"
    json.dumps(doc)

    from rich.console import Console

    con = Console(record=True, width=200)
    print_report(result.findings, result.facts, result=result, fail_on="low", console=con)
    text = con.export_text()
    demoted = text.index("MEASURED HERE, DOES NOT PAY")
    assert text.index("T24 channels-last", demoted) > demoted  # listed in the demoted group
    assert "measured here: 1.2" in text and "measured here, slower: 0.7" in text
    assert "--verify: timed" in text and "demoted by measurement" in text


def test_verify_without_findings_to_time_runs_no_bench():
    fine = Finding.ok("T24", "already channels_last")
    report, fake = _verify([fine], {"baseline": 100.0})
    assert fake.calls == [] and report.timed == [] and fine.measured is None
    assert "no finding" in report.notes[0]


def test_bad_verify_options_are_refused_with_the_option_named(capsys):
    assert main(["--verify", "--verify-repeats", "0"]) == 2
    assert "--verify-repeats" in capsys.readouterr().err


@pytest.mark.slow
def test_doctor_verify_for_real_times_each_fix_in_its_own_process(capsys):
    """The real bench under doctor: every timeable finding of the embedded default gets a measurement."""
    code = main(["--verify", "--verify-steps", "2", "--verify-repeats", "2", "--json", "--no-lint", "--steps", "2"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code in (0, 1) and doc["verify"]["error"] is None, doc["verify"]
    measured = {f["tip"]: f["measured"] for f in doc["findings"] if f["status"] == "finding"}
    assert {"T16", "T24"} <= set(doc["verify"]["timed"])
    for tip in doc["verify"]["timed"]:
        m = measured[tip]
        assert m["verdict"] in ("pays", "no-gain", "slower", "failed"), m
        assert m["verdict"] == "failed" or m["ratio"] > 0
    assert measured["T01"]["verdict"] == "not-timed"
