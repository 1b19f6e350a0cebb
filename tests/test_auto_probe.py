"""The start-up probe: `auto` parts timed on the user's model at the first batch (issue 21).

A fake clock makes the timings deterministic: each mark advances it by the cost of the step just run,
read from the state the candidate set (a channels_last weight, a foreach flag, autocast). No wall-clock
limit is asserted anywhere.
"""

from __future__ import annotations

import itertools

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks import AutoProbe, ChannelsLast, FusedOptimizer, ProbedPrecision, SpeedupsSummary
from lightning_speedups.config import Speedups
from lightning_speedups.functional.probe import Axis, Option, decide_axes, run_probe
from lightning_speedups.functional.timing import Timeline
from lightning_speedups.presets import preset
from tests.helpers import quiet_trainer


class Net(pl.LightningModule):
    """conv -> BN -> ReLU -> dropout -> linear, SGD with momentum: BN statistics, optimizer state and the RNG
    (dropout) all change in a step, so a probe that does not put them back shows."""

    def __init__(self, manual: bool = False, p_drop: float = 0.3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(p_drop)
        self.head = nn.Linear(8 * 8 * 8, 5)
        self.automatic_optimization = not manual
        self.losses: list[float] = []
        self.autocast_seen = False
        g = torch.Generator().manual_seed(1)
        self.data = TensorDataset(torch.randn(96, 3, 8, 8, generator=g), torch.randint(0, 5, (96,), generator=g))

    def forward(self, x):
        self.autocast_seen = (
            torch.is_autocast_enabled("cpu") if _new_autocast_query() else torch.is_autocast_cpu_enabled()
        )
        return self.head(self.drop(torch.relu(self.bn(self.conv(x)))).flatten(1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x).float(), y)
        self.log("train_loss", loss)
        if not self.automatic_optimization:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=16, shuffle=True)


def _new_autocast_query() -> bool:
    try:
        torch.is_autocast_enabled("cpu")
        return True
    except TypeError:
        return False


class StateClock:
    """A clock whose every reading advances by the cost of the state the model is in now."""

    def __init__(self, cost):
        self.cost, self.now = cost, 0.0

    def __call__(self) -> float:
        self.now += self.cost()
        return self.now


def fit(callbacks, manual=False, p_drop=0.3, **trainer):
    pl.seed_everything(7)
    model = Net(manual=manual, p_drop=p_drop)
    t = quiet_trainer(callbacks=callbacks, **{"max_epochs": 2, **trainer})
    t.fit(model)
    return model, t


def weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def probe(clock, **kw) -> AutoProbe:
    return AutoProbe(clock=clock, max_fraction=None, **kw)


def plain_and_probed(model_cls, part):
    """The same seeded model fitted for one epoch without the probe and with it (``part`` leaving its
    decision to it), on a clock where no candidate is faster: ``(plain, probed, the probe)``."""
    pl.seed_everything(7)
    plain = model_cls()
    quiet_trainer(max_epochs=1).fit(plain)
    pl.seed_everything(7)
    probed = model_cls()
    auto = probe(StateClock(lambda: 0.001))
    quiet_trainer(max_epochs=1, callbacks=[part, auto]).fit(probed)
    return plain, probed, auto


def test_a_probe_that_keeps_nothing_leaves_the_run_exactly_as_a_run_without_it():
    plain, _ = fit([])
    flat = StateClock(lambda: 0.001)  # every candidate costs the same: nothing is faster
    auto = probe(flat)
    probed, _ = fit([ChannelsLast(auto=True), FusedOptimizer("auto"), auto])
    assert auto.result is not None and not auto.result.skipped and auto.result.steps > 20  # it really ran
    assert set(auto.result.decisions) == {"channels_last", "optimizer SGD"}
    assert probed.losses == plain.losses  # step for step, bit for bit (BN stats, momentum, dropout RNG)
    for key, value in weights(plain).items():
        assert torch.equal(weights(probed)[key], value), key
    assert probed.conv.weight.is_contiguous()


def test_a_candidate_faster_beyond_the_noise_is_kept_and_trains_the_same_maths():
    plain, _ = fit([], p_drop=0.0)
    model_ref: list[Net] = []

    def cost():  # channels_last halves the step
        m = model_ref[0] if model_ref else None
        return 0.0005 if m is not None and not m.conv.weight.is_contiguous() else 0.001

    cl, auto = ChannelsLast(auto=True), probe(StateClock(cost))
    pl.seed_everything(7)
    model = Net(p_drop=0.0)
    model_ref.append(model)
    summary = SpeedupsSummary()
    quiet_trainer(max_epochs=2, callbacks=[cl, auto, summary]).fit(model)
    assert auto.result.decisions["channels_last"][0] == "channels_last"
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last) and not model.conv.weight.is_contiguous()
    assert cl.active and "probed channels_last 2.00x" in cl.status[1]
    # the summary waited for the probe and prints its decision and figures
    line = next(x for x in summary.lines if "channels_last" in x)
    assert line.lstrip().startswith("on") and "2.00x" in line
    assert any("auto_probe" in x and "A/A noise" in x for x in summary.lines)
    # only the layout changed: the same losses within float tolerance (no dropout here: it draws its
    # masks in memory order, so they differ between layouts)
    assert len(model.losses) == len(plain.losses) == 12
    assert model.losses == pytest.approx(plain.losses, rel=1e-4, abs=1e-5)


def test_the_fastest_optimizer_implementation_is_kept():
    model_ref: list[Net] = []

    def cost():
        opt = model_ref[0].trainer.optimizers[0] if model_ref and model_ref[0]._trainer else None
        return 0.0007 if opt is not None and opt.param_groups[0].get("foreach") else 0.001

    fused, auto = FusedOptimizer("auto"), probe(StateClock(cost))
    pl.seed_everything(7)
    model = Net()
    model_ref.append(model)
    t = quiet_trainer(max_epochs=1, callbacks=[fused, auto])
    t.fit(model)
    assert auto.result.decisions["optimizer SGD"][0] == "foreach"
    assert t.optimizers[0].param_groups[0]["foreach"] is True
    assert fused.active and "SGD->foreach" in fused.status[1]


def test_dropout_model_without_gain_is_step_for_step_equal_with_momentum_adam():
    """Adam's state (exp_avg, step) created by the probe's steps must not leak into the run."""

    class AdamNet(Net):
        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    plain, probed, auto = plain_and_probed(AdamNet, FusedOptimizer("auto"))
    assert not auto.result.skipped
    assert probed.losses == plain.losses


def test_explicit_settings_are_never_probed_and_auto_ones_are():
    def probes(s):
        return any(isinstance(cb, AutoProbe) for cb in s.callbacks())

    assert not probes(Speedups(channels_last=True, optimizer="fused"))
    assert not probes(Speedups(channels_last=False, optimizer="foreach"))
    assert probes(Speedups(channels_last="auto"))
    assert probes(Speedups(optimizer="auto"))
    cbs = preset("fast").callbacks()
    assert any(isinstance(cb, AutoProbe) for cb in cbs)
    assert next(cb for cb in cbs if isinstance(cb, ChannelsLast)).auto


def test_a_run_too_short_to_repay_the_probe_skips_it_and_stays_plain():
    # the real clock; planned 6 steps: the probe's 30+ steps can never fit 5% of that
    auto = AutoProbe()
    model, t = fit([ChannelsLast(auto=True), FusedOptimizer("auto"), auto], max_epochs=1)
    assert auto.result.skipped and "too short" in auto.result.skipped
    assert model.conv.weight.is_contiguous()
    assert t.optimizers[0].param_groups[0].get("foreach") in (None, False)
    assert not auto.active and "too short" in auto.status[1]


def test_manual_optimization_is_not_probed():
    auto = probe(StateClock(lambda: 0.001))
    model, _ = fit([ChannelsLast(auto=True), auto], manual=True, max_epochs=1)
    assert "manual optimization" in auto.status[1]
    assert model.conv.weight.is_contiguous()


def test_without_the_probe_auto_stays_as_plain_lightning():
    cl = ChannelsLast(auto=True)
    model, _ = fit([cl], max_epochs=1)
    assert model.conv.weight.is_contiguous() and not cl.active and "AutoProbe" in cl.status[1]


def test_cpu_bf16_is_timed_against_fp32_where_the_cpu_has_it(monkeypatch):
    import lightning_speedups.tips.t05_amp as t05

    monkeypatch.setattr(t05, "cpu_fast_bf16", lambda: "a test CPU with bf16 units")
    s = Speedups(precision="auto")
    kwargs, _ = s.trainer_kwargs(accelerator="cpu")
    assert kwargs["precision"] == "32-true"
    cbs = s.callbacks(accelerator="cpu")
    assert any(isinstance(cb, ProbedPrecision) for cb in cbs) and any(isinstance(cb, AutoProbe) for cb in cbs)

    model_ref: list[Net] = []
    part = ProbedPrecision()
    auto = probe(StateClock(lambda: 0.0006 if model_ref and model_ref[0].autocast_seen else 0.001))
    pl.seed_everything(7)
    model = Net()
    model_ref.append(model)
    t = quiet_trainer(max_epochs=1, precision="32-true", callbacks=[part, auto])
    t.fit(model)
    assert auto.result.decisions["precision"][0] == "bf16-mixed"
    assert t.precision == "bf16-mixed" and part.active
    assert model.autocast_seen  # the run's steps after the probe ran under bf16 autocast


def test_engine_keeps_the_fastest_option_and_nothing_within_the_noise():
    state = {"impl": "a"}
    costs = {"a": 1.0, "b": 0.8, "c": 0.7, "d": 0.99}
    now = [0.0]

    def step(options):
        now[0] += costs[state["impl"]]

    def opt(label):
        return Option(label, lambda: state.update(impl=label), lambda: state.update(impl="a"))

    chosen = {}
    axis = Axis("impl", "a", [opt("b"), opt("c"), opt("d")], lambda o, why: chosen.update(impl=o and o.label))
    result = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), rounds=3, min_gain=0.02)
    decide_axes([axis], result.decisions)
    assert chosen == {"impl": "c"}
    assert result.ratios["impl=d"] == pytest.approx([1 / 0.99] * 3)
    assert "d 1.01x" in result.decisions["impl"][1] and "below the minimum gain" in result.decisions["impl"][1]
    # a noisy A/A pair raises the floor above a real 5% gain: nothing kept
    jitter = itertools.cycle([1.0, 1.0, 1.0, 1.2, 1.2, 1.2])
    costs2 = {"a": None, "b": 0.95}

    def noisy(options):
        now[0] += next(jitter) * (costs2["b"] if state["impl"] == "b" else 1.0)

    axis2 = Axis("impl", "a", [opt("b")], lambda o, why: None)
    r2 = run_probe(noisy, [axis2], timeline=Timeline(clock=lambda: now[0]), rounds=3)
    assert r2.decisions["impl"][0] == "a"


def test_engine_interleaves_variants_and_rotates_their_order():
    seen = []
    state = {"v": "A"}

    def opt(label):
        return Option(label, lambda: state.update(v=label), lambda: state.update(v="A"))

    now = [0.0]

    def step(options):
        seen.append(state["v"])
        now[0] += 1.0

    axis = Axis("x", "A", [opt("b"), opt("c")], lambda o, why: None)
    result = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), rounds=3, steps=1, warmup=0)
    assert result.calibration_steps == 3 and seen[:3] == ["A", "A", "A"]  # three equal steps settle it
    rounds = [seen[3 + 4 * r : 7 + 4 * r] for r in range(3)]
    assert rounds[0] == ["A", "b", "c", "A"] and rounds[1] == ["b", "c", "A", "A"]
    assert rounds[1] != rounds[0]


def test_engine_calibration_waits_out_a_cold_start_and_a_stalling_machine_ends_rounds_early():
    costs = iter([0.6, 0.58, 0.3, 0.08, 0.075] + [0.08] * 1000)
    now = [0.0]

    def step(options):
        now[0] += next(costs)

    axis = Axis("x", "A", [Option("b", lambda: None, lambda: None)], lambda o, why: None)
    r = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=5.0)
    assert r.calibration_steps == 5 and r.step_s == pytest.approx(0.075)  # not the cold 0.6 s
    assert not r.skipped and r.rounds == 5  # 5 rounds x 3 variants x 4 steps x 0.08 s = 4.8 s fit 5 s
    # every step after the calibration stalls to 1 s: the rounds stop at three, not at the planned five
    stall = iter([0.08, 0.08, 0.08] + [1.0] * 1000)
    now[0] = 0.0

    def stalling(options):
        now[0] += next(stall)

    r = run_probe(stalling, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=5.0)
    assert r.rounds == 3


def test_engine_refuses_a_budget_it_cannot_keep_before_timing_any_candidate():
    now = [0.0]
    calls = []

    def step(options):
        calls.append(list(options))
        now[0] += 1.0

    axis = Axis("x", "A", [Option("b", lambda: None, lambda: None)], lambda o, why: None)
    r = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=5.0)
    assert r.skipped and "over its budget of 5.0 s" in r.skipped, r.skipped
    assert all(not c for c in calls)  # only the calibration ran, with no candidate on
    r = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), planned_steps=100, max_fraction=0.05)
    assert "too short" in r.skipped


def test_a_training_step_that_changes_its_batch_in_place_finds_it_as_the_loader_gave_it():
    class InPlace(Net):
        def training_step(self, batch, batch_idx):
            batch[0].mul_(0.5)  # a user's in-place normalisation
            return super().training_step(batch, batch_idx)

    plain, probed, auto = plain_and_probed(InPlace, ChannelsLast(auto=True))
    assert not auto.result.skipped and auto.result.steps > 20
    assert probed.losses == plain.losses


def test_a_resumed_run_probes_again_and_continues_as_a_resume_without_it(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    pl.seed_everything(7)
    first = Net()
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    quiet_trainer(
        max_epochs=1,
        enable_checkpointing=True,
        callbacks=[ChannelsLast(auto=True), FusedOptimizer("auto"), probe(StateClock(lambda: 0.001)), ckpt],
    ).fit(first)

    def resume(callbacks):
        pl.seed_everything(11)
        model = Net()
        quiet_trainer(max_epochs=2, callbacks=callbacks).fit(model, ckpt_path=str(tmp_path / "last.ckpt"))
        return model

    plain = resume([])
    auto = probe(StateClock(lambda: 0.001))
    probed = resume([ChannelsLast(auto=True), FusedOptimizer("auto"), auto])
    assert auto.result is not None and not auto.result.skipped  # the resumed fit ran its own probe
    assert len(probed.losses) == 6 and probed.losses == plain.losses  # it continued from the checkpoint alike
    for key, value in weights(plain).items():
        assert torch.equal(weights(probed)[key], value), key


def test_every_process_runs_the_rounds_the_calibration_agreed_on():
    """`agree` (strategy.broadcast) hands every rank rank zero's calibration: a rank whose own steps were
    cheap still skips when rank zero's figures do not fit the budget, so no rank waits in a collective."""
    now = [0.0]

    def step(options):
        now[0] += 0.001

    axis = Axis("x", "A", [Option("b", lambda: None, lambda: None)], lambda o, why: None)
    mine = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=1.0)
    assert not mine.skipped and mine.rounds == 5
    theirs = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=1.0, agree=lambda step_s: 0.5)
    assert theirs.skipped and theirs.step_s == 0.5 and theirs.rounds == 0


def test_ranks_whose_clocks_disagree_run_the_same_steps():
    """On a busy machine each rank's clock tells its own story: rank zero's steady steps would settle the
    calibration at 3 and fit 5 rounds, another rank's falling then stalling steps would calibrate 8 steps
    and cut the rounds short. Every such decision goes through `agree`, so that rank runs exactly rank
    zero's steps (under DDP / FSDP each step is a collective: one step more is a hang)."""

    def rank(costs, agree):
        now, calls = [0.0], [0]

        def step(options):
            calls[0] += 1
            now[0] += costs(calls[0])

        axis = Axis("x", "A", [Option("b", lambda: None, lambda: None)], lambda o, why: None)
        result = run_probe(step, [axis], timeline=Timeline(clock=lambda: now[0]), max_seconds=1.0, agree=agree)
        return result, calls[0]

    said: list = []
    zero, zero_calls = rank(lambda n: 0.001, lambda v: said.append(v) or v)
    assert zero.calibration_steps == 3 and zero.rounds == 5

    def busy(n):  # halving for the calibration's 8 steps (never settled), then stalls of 50 ms a step
        return 0.02 * 0.5**n if n <= 8 else 0.05

    alone, _ = rank(busy, None)
    assert alone.calibration_steps == 8 and alone.rounds < 5  # what this rank would do by itself
    replay = iter(said)
    other, other_calls = rank(busy, lambda v: next(replay))
    assert other_calls == zero_calls and other.calibration_steps == 3 and other.rounds == 5
    assert next(replay, None) is None  # it asked exactly what rank zero told
