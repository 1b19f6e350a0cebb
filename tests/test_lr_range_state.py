"""converge's LR range test (issue 22): nothing unpickled that the pack did not write, the whole training
state put back afterwards, and no test run for a model that schedules its own learning rate."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from helpers import one_thread, quiet_trainer  # noqa: F401  (one_thread: a fixture)
from torch import nn
from torch.nn import functional as F

from lightning_speedups.callbacks import LRSchedule


@dataclass
class OptimConfig:
    """A Hydra / OmegaConf-like config object saved as a hyper-parameter."""

    lr: float = 0.05
    betas: tuple[float, float] = (0.9, 0.99)


class Augment:
    """A user class saved as a hyper-parameter."""

    def __init__(self, scale: float = 0.1) -> None:
        self.scale = scale


class Stateful(pl.LightningModule):
    """Keeps state outside its weights and optimizer, as a sampler or a queue does: a replay list that
    grows every step, a step counter, a non-persistent buffer, BatchNorm statistics, dropout and global
    RNG draws in training_step, a shuffled loader, and hparams that ``torch.load(weights_only=True)``
    refuses (a config object, a functools.partial optimizer, a user class)."""

    def __init__(self, cfg: Any = None, optimizer: Any = None, augment: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.cfg = cfg or OptimConfig()
        self.make_optimizer = optimizer or functools.partial(torch.optim.Adam, lr=self.cfg.lr)
        self.augment = augment or Augment()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
        self.register_buffer("seen", torch.zeros(1), persistent=False)
        self.replay: list[torch.Tensor] = [torch.zeros(6)]
        self.calls = 0
        self.losses: list[float] = []
        self.lrs: list[float] = []
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(48, 6, generator=g), torch.randint(0, 3, (48,), generator=g)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.calls += 1
        self.seen += 1
        noise = torch.randn_like(x) * self.augment.scale  # the global RNG moves every step
        self.replay.append(x[0].detach())
        replay = torch.stack(self.replay[-4:]).mean(0)
        loss = F.cross_entropy(self.net(x + noise + 0.01 * replay), y)
        self.losses.append(float(loss.detach()))
        self.lrs.append(float(self.trainer.optimizers[0].param_groups[0]["lr"]))
        return loss

    def configure_optimizers(self) -> Any:
        return self.make_optimizer(self.parameters())

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(self.x, self.y), batch_size=8, shuffle=True)


class Probe(pl.Callback):
    """The state at the start of training (after the range test, if any)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self.state = {
            "weights": {k: v.clone() for k, v in pl_module.state_dict().items()},
            "seen": float(pl_module.seen),
            "replay": len(pl_module.replay),
            "calls": pl_module.calls,
            "training": [m.training for m in pl_module.modules()],
            "rng": torch.get_rng_state().clone(),
            "global_step": trainer.global_step,
            "adam": trainer.optimizers[0].state_dict()["state"],
        }


def _fit(model: pl.LightningModule, schedule: LRSchedule, steps: int = 6) -> tuple[pl.Trainer, Probe]:
    probe = Probe()
    trainer = quiet_trainer(max_steps=steps, callbacks=[schedule, probe], limit_val_batches=0)
    trainer.fit(model)
    return trainer, probe


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "hparams",
    [
        {"cfg": OptimConfig(lr=0.02)},
        {"optimizer": functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)},
        {"augment": Augment(0.2)},
    ],
    ids=["config_object", "functools_partial", "user_class"],
)
def test_range_test_runs_on_hparams_that_weights_only_load_refuses(hparams, tmp_path):
    import pickle

    model = Stateful(**hparams)
    with pytest.raises(pickle.UnpicklingError):  # what Lightning's own finder's restore hit
        path = tmp_path / "hp.pt"
        torch.save({"hyper_parameters": dict(model.hparams)}, path)
        torch.load(path, weights_only=True)
    pl.seed_everything(0, verbose=False)
    schedule = LRSchedule("onecycle", max_lr="auto", range_test_steps=10)
    trainer, probe = _fit(model, schedule)
    assert schedule.range_pick is not None and schedule.range_pick.points >= 3
    assert trainer.global_step == 6 and probe.state["global_step"] == 0
    assert not list(tmp_path.parent.glob("**/.lr_find_*.ckpt"))


def test_range_test_restores_the_whole_training_state():
    """A run with the range test trains exactly as a run without it given the same peak: same weights,
    buffers, modes, replay list, RNG, batches and losses."""
    pl.seed_everything(0, verbose=False)
    tested = Stateful()
    auto = LRSchedule("onecycle", max_lr="auto", range_test_steps=10)
    _, probe_auto = _fit(tested, auto)
    assert auto.range_pick is not None and auto.range_pick.points == 10  # the test ran its 10 steps ...

    pl.seed_everything(0, verbose=False)
    control = Stateful()
    _, probe_fixed = _fit(control, LRSchedule("onecycle", max_lr=auto._peaks[0]))  # the peak it used
    a, b = probe_auto.state, probe_fixed.state
    # ... and was put back: plain attributes (a counter, a list), buffers, modes, RNG, optimizer, loops
    for key in ("calls", "seen", "replay", "training", "global_step", "adam"):
        assert a[key] == b[key], key
    assert torch.equal(a["rng"], b["rng"])
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), k
    assert tested.calls == control.calls == 6
    assert tested.losses == control.losses  # the same batches, noise and updates, bit for bit
    assert tested.lrs == control.lrs
    assert [r.tolist() for r in tested.replay] == [r.tolist() for r in control.replay]


class OwnScheduler(Stateful):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 2), "interval": "step"},
        }


class WarmupInOptimizerStep(Stateful):
    """The Lightning docs' warm-up: the lr set by hand inside an ``optimizer_step`` override."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        scale = min(1.0, float(self.trainer.global_step + 1) / 4)
        for pg in optimizer.param_groups:
            pg["lr"] = scale * 0.05
        optimizer.step(closure=optimizer_closure)


class WarmupInHook(Stateful):
    """A warm-up the source check does not see: set in on_train_batch_start."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        for pg in self.trainer.optimizers[0].param_groups:
            pg["lr"] = 0.01 * (self.trainer.global_step + 1)


@pytest.mark.parametrize("cls", [OwnScheduler, WarmupInOptimizerStep], ids=["scheduler_dict", "optimizer_step"])
def test_no_range_test_for_a_model_that_schedules_its_own_lr(cls):
    pl.seed_everything(0, verbose=False)
    model = cls()
    schedule = LRSchedule("onecycle", max_lr="auto", range_test_steps=10)
    with pytest.warns(UserWarning, match="lr_schedule: skipped"):
        trainer, probe = _fit(model, schedule)
    assert probe.state["calls"] == 0 and model.calls == 6  # no range test steps
    assert schedule.range_pick is None and schedule.scheduler is None
    assert schedule.status[0] == "skipped" and "no LR range test run" in schedule.status[1]
    if cls is WarmupInOptimizerStep:
        assert "optimizer_step" in schedule.status[1]
        # the model's warm-up is what ran (training_step runs in the closure, after optimizer_step set the lr)
        assert model.lrs == pytest.approx([min(1.0, (s + 1) / 4) * 0.05 for s in range(6)])
    else:
        assert all(c.scheduler.__class__.__name__ == "StepLR" for c in trainer.lr_scheduler_configs)


def test_a_schedule_set_elsewhere_stops_this_one_with_the_reason():
    pl.seed_everything(0, verbose=False)
    model = WarmupInHook()
    schedule = LRSchedule("onecycle", max_lr=0.1)
    with pytest.warns(UserWarning, match="something else sets the learning rate"):
        trainer, _ = _fit(model, schedule)
    assert schedule.status[0] == "skipped" and "stopped at step 0" in schedule.status[1]
    assert model.lrs == pytest.approx([0.01 * (s + 1) for s in range(6)])  # the model's own values ran
    assert not any(c.name == "speedups-onecycle" for c in trainer.lr_scheduler_configs)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_range_test_under_a_wrapping_strategy_restores_as_without_it(strategy, monkeypatch):
    """The snapshot reaches the wrapped model (DDP / FSDP flat parameters on one process): the pick and
    the training after it equal plain Lightning's."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "distributed"))
    from fsdp_shapes_worker import Shape

    from lightning_speedups.presets import preset

    def run(names: tuple[str, ...]) -> tuple[float, list[float]]:
        pl.seed_everything(0, verbose=False)
        model = Shape()
        p = preset(*names)
        trainer = quiet_trainer(
            **p.trainer_kwargs(accelerator="cpu"), max_steps=6, use_distributed_sampler=False, callbacks=p.callbacks()
        )
        trainer.fit(model)
        schedule = next(cb for cb in trainer.callbacks if isinstance(cb, LRSchedule))
        assert schedule.range_pick is not None and model.calls == 6
        return schedule.range_pick.lr, model.losses

    plain_lr, plain_losses = run(("converge",))
    lr, losses = run((strategy, "converge"))
    assert lr == pytest.approx(plain_lr, rel=1e-5)
    assert losses == pytest.approx(plain_losses, abs=1e-5)
