"""T01's back-off: a one-cycle whose peak diverges puts the weights and optimizer back, halves its peak and goes on
over the steps its plan has left; a resumed run backs off exactly as the run it continues."""

from __future__ import annotations

import math
import warnings

import lightning.pytorch as pl
import pytest
import torch
from helpers import TinyCNN, quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_speedups.callbacks import LRSchedule
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.divergence import DivergenceWatch


class SpikyCNN(TinyCNN):
    """TinyCNN whose loss turns NaN at the given optimizer steps (once each): the weights go NaN after that step."""

    def __init__(self, nan_at: tuple[int, ...] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self.nan_at = set(nan_at)

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.global_step in self.nan_at:
            self.nan_at.discard(self.global_step)
            loss = loss * float("nan")
        return loss


class NoNormNet(TinyCNN):
    """TinyCNN's task through a plain MLP (no BatchNorm to keep a large step bounded): a peak far too high diverges."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.features = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.ReLU())


class EpochStartWeights(pl.Callback):
    """Keeps the weights at each epoch's start, and the weights right after each back-off of ``schedule``."""

    def __init__(self, schedule: LRSchedule) -> None:
        self.schedule = schedule
        self.at_start: dict[int, dict[str, torch.Tensor]] = {}
        self.after_back_off: list[tuple[int, dict[str, torch.Tensor]]] = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.at_start[trainer.global_step] = {k: v.clone() for k, v in pl_module.state_dict().items()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # runs after the schedule's
        if len(self.schedule.backed_off) > len(self.after_back_off):
            state = {k: v.clone() for k, v in pl_module.state_dict().items()}
            self.after_back_off.append((self.schedule.backed_off[-1]["back_to"], state))


def _fit(model, cb: LRSchedule, max_epochs: int = 4, extra=(), ckpt_path=None, **kwargs):
    trainer = quiet_trainer(callbacks=[cb, *extra], limit_val_batches=0, max_epochs=max_epochs, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, [str(w.message) for w in caught]


def _finite(model) -> bool:
    return all(torch.isfinite(p).all() for p in model.parameters())


def test_a_nan_step_is_undone_to_the_epochs_start_and_the_peak_halved():
    pl.seed_everything(0)
    model = SpikyCNN(nan_at=(11,))  # 8 steps an epoch: the second epoch, which began at step 8
    cb = LRSchedule("onecycle", max_lr=0.1, back_offs=2)
    watch = EpochStartWeights(cb)
    _fit(model, cb, extra=[watch])
    assert _finite(model)
    [backed] = cb.backed_off
    assert backed["step"] == 12 and backed["back_to"] == 8 and "nan" in backed["why"]
    assert backed["peaks"] == [pytest.approx(0.05)]
    [(back_to, weights)] = watch.after_back_off
    assert back_to == 8
    for name, value in watch.at_start[8].items():  # put back exactly, buffers (BatchNorm's statistics) included
        assert torch.equal(weights[name], value), name
    # the new cycle spans the 20 steps the 32-step plan had left, peaking at the halved lr
    assert cb._total_steps == 20 and cb._cycle_start == 12
    lrs = [lr[0] for lr in model.lrs]
    assert max(lrs[12:]) == pytest.approx(0.05, rel=0.05) and lrs[12] == pytest.approx(0.05 / 25)
    assert "backed off at step 12" in cb.status[1] and "peak lr 0.05" in cb.status[1]


def test_a_back_off_mid_accumulation_drops_the_diverged_gradients():
    pl.seed_everything(0)
    model = SpikyCNN(nan_at=(5,))  # 8 batches, 4 optimizer steps an epoch: the NaN batch is the first of a pair
    cb = LRSchedule("onecycle", max_lr=0.1, back_offs=1)
    _fit(model, cb, accumulate_grad_batches=2)
    assert _finite(model) and [b["back_to"] for b in cb.backed_off] == [4]


def test_without_back_offs_the_same_run_ends_in_nan():
    pl.seed_everything(0)
    model = SpikyCNN(nan_at=(11,))
    cb = LRSchedule("onecycle", max_lr=0.1)
    _fit(model, cb)
    assert not _finite(model) and cb.backed_off == []
    assert "watched" not in cb.status[1]


def test_a_peak_far_too_high_backs_off_until_it_trains():
    pl.seed_everything(0)
    plain = NoNormNet(lr=0.05)
    _fit(plain, LRSchedule("onecycle", max_lr=500.0))
    assert not _finite(plain)  # the peak diverges when nothing watches it

    pl.seed_everything(0)
    model = NoNormNet(lr=0.05)
    cb = LRSchedule("onecycle", max_lr=500.0, back_offs=12)
    _fit(model, cb, max_epochs=6)
    assert _finite(model)
    assert 1 <= len(cb.backed_off) <= 12
    peaks = [b["peaks"][0] for b in cb.backed_off]
    assert peaks == [pytest.approx(500.0 / 2 ** (i + 1)) for i in range(len(peaks))]


def test_when_the_back_offs_run_out_the_run_goes_on_and_says_so():
    pl.seed_everything(0)
    model = SpikyCNN(nan_at=(3, 10))
    cb = LRSchedule("onecycle", max_lr=0.1, back_offs=1)
    _, said = _fit(model, cb)
    assert len(cb.backed_off) == 1 and not _finite(model)
    assert any("all that back_offs allows" in w and "lower speedups.lr_schedule.max_lr" in w for w in said)


def _fit_saving_each_epoch(tmp_path, nan_at: tuple[int, ...], back_offs: int):
    """A 4-epoch run that saves a checkpoint at each epoch's end (``epoch=1.ckpt``: step 16)."""
    pl.seed_everything(0)
    model = SpikyCNN(nan_at=nan_at)
    cb = LRSchedule("onecycle", max_lr=0.1, back_offs=back_offs)
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_top_k=-1, every_n_epochs=1, filename="{epoch}")
    _fit(model, cb, extra=[ckpt], enable_checkpointing=True)
    return model, cb


def test_a_resumed_run_backs_off_exactly_as_the_run_it_continues(tmp_path):
    full, cb = _fit_saving_each_epoch(tmp_path, nan_at=(20,), back_offs=2)
    assert [b["step"] for b in cb.backed_off] == [21]

    pl.seed_everything(0)
    resumed = SpikyCNN(nan_at=(20,))
    again = LRSchedule("onecycle", max_lr=0.1, back_offs=2)
    _fit(resumed, again, enable_checkpointing=False, ckpt_path=str(tmp_path / "epoch=1.ckpt"))
    assert again.backed_off == cb.backed_off
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_resumed_run_keeps_the_back_offs_it_used(tmp_path):
    model, cb = _fit_saving_each_epoch(tmp_path, nan_at=(4,), back_offs=1)
    assert len(cb.backed_off) == 1 and _finite(model)

    resumed = SpikyCNN(nan_at=(20,))
    again = LRSchedule("onecycle", max_lr=0.1, back_offs=1)
    _, said = _fit(resumed, again, enable_checkpointing=False, ckpt_path=str(tmp_path / "epoch=1.ckpt"))
    assert len(again.backed_off) == 1 and again._peaks == [pytest.approx(0.05)]
    assert not _finite(resumed)  # its one back-off was spent before the checkpoint
    assert "no back-off left" in again.status[1]
    assert any("the run diverged at step 21" in w and "all that back_offs allows" in w for w in said)


def test_the_range_tests_peak_follows_the_divisor():
    picks = {}
    for divisor in (10, 2):
        pl.seed_everything(0)
        cb = LRSchedule("onecycle", max_lr="auto", range_test_steps=20, peak_divisor=divisor)
        _fit(TinyCNN(lr=0.001), cb, max_epochs=1)
        picks[divisor] = cb.range_pick
    assert picks[10].min_loss_lr == picks[2].min_loss_lr  # the same test: the same curve
    assert picks[2].lr == pytest.approx(picks[2].min_loss_lr / 2) or picks[2].rule.startswith("the steepest")
    assert picks[2].lr > picks[10].lr


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [({"peak_divisor": 0.5}, "peak_divisor"), ({"back_offs": -1}, "back_offs"), ({"back_offs": 1.5}, "back_offs")],
)
def test_bad_back_off_settings_name_the_setting(kwargs, setting):
    with pytest.raises(SettingError, match=f"`{setting}`"):
        LRSchedule("onecycle", **kwargs)


def test_the_watch_reads_a_diverging_curve_and_not_a_noisy_small_one():
    watch = DivergenceWatch()
    assert all(watch.update(x) is None for x in [2.3] * 10 + [0.001, 0.004] * 200)  # 4x a tiny best, below the start
    assert watch.update(math.inf) == "the loss is inf"
    rising = DivergenceWatch()
    curve = [2.3 - 0.02 * i for i in range(100)] + [0.3 * 1.1**i for i in range(100)]
    first = next(i for i, x in enumerate(curve) if rising.update(x) is not None)
    assert 100 < first < 200  # on the way up, once the smoothed loss passed 4x its best and the start
    state = rising.state_dict()
    copy = DivergenceWatch()
    copy.load_state_dict(state)
    assert copy.state_dict() == state
