"""T01's plan-free part: the user's optimizer swapped for its schedule-free twin, its train / eval mode switched by
the Trainer's hooks, checkpoints that resume exactly, in both Lightning packages."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest
import schedulefree
import torch
from helpers import QUIET
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks import LRSchedule, ScheduleFree
from lightning_speedups.errors import SettingError
from lightning_speedups.functional.schedule_free import schedule_free_twin, why_not_schedule_free
from lightning_speedups.presets import parse_speedups

NAMESPACES = ["lightning.pytorch", pytest.param("pytorch_lightning", id="pytorch_lightning")]


def _pl(namespace: str) -> Any:
    if namespace == "pytorch_lightning":
        pytest.importorskip("pytorch_lightning")
    return importlib.import_module(namespace)


def make_model(namespace: str = "lightning.pytorch", optimizer: str = "adamw", lr: float = 1e-2, **kw: Any) -> Any:
    """A small MLP on a fixed, learnable regression task, built on ``namespace``'s LightningModule. Every batch
    of the training loader is the same 16 samples (the epoch's batches are alike, so a resume that restarts an
    epoch's loader sees what the uninterrupted run sees)."""
    pl = _pl(namespace)

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
            g = torch.Generator().manual_seed(1)
            self.x = torch.randn(16, 4, generator=g)
            self.y = self.x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
            self.modes: dict[str, list[bool]] = {"train": [], "val": [], "test": []}
            self.losses: list[float] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def _mode(self) -> bool:
            return bool(self.trainer.optimizers[0].param_groups[0].get("train_mode", True))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.modes["train"].append(self._mode())
            x, y = batch
            loss = nn.functional.mse_loss(self(x), y)
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.modes["val"].append(self._mode())

        def test_step(self, batch: Any, batch_idx: int) -> None:
            self.modes["test"].append(self._mode())

        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(self.x.repeat(4, 1), self.y.repeat(4, 1)), batch_size=16)

        def val_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(self.x, self.y), batch_size=16)

        test_dataloader = val_dataloader

        def configure_optimizers(self) -> Any:
            params = self.parameters()
            if optimizer == "adamw":
                return torch.optim.AdamW(params, lr=lr, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.02)
            if optimizer == "adam":
                return torch.optim.Adam(params, lr=lr, weight_decay=kw.get("weight_decay", 0.0))
            if optimizer == "sgd":
                return torch.optim.SGD(params, lr=lr, momentum=kw.get("momentum", 0.9))
            if optimizer == "rmsprop":
                return torch.optim.RMSprop(params, lr=lr)
            if optimizer == "adamw+scheduler":
                opt = torch.optim.AdamW(params, lr=lr)
                return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}
            raise AssertionError(optimizer)

    return Net()


def trainer_of(namespace: str, callbacks: list[Any], **kwargs: Any) -> Any:
    return _pl(namespace).Trainer(**{**QUIET, "callbacks": callbacks, **kwargs})


def fit(namespace: str, model: Any, callbacks: list[Any], ckpt_path: Any = None, **kwargs: Any) -> tuple[Any, list]:
    trainer = trainer_of(namespace, callbacks, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, [str(w.message) for w in caught]


def weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ------------------------------------------------------------------------------------------------------- the swap
def test_adamw_becomes_its_twin_with_the_users_settings():
    net = nn.Linear(3, 2)
    groups = [{"params": [net.weight], "lr": 3e-3, "name": "w"}, {"params": [net.bias], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.85, 0.98), eps=1e-6, weight_decay=0.05)
    twin, notes = schedule_free_twin(opt, warmup_steps=7, lr_scale=2.0)
    assert isinstance(twin, schedulefree.AdamWScheduleFree) and notes == []
    g0, g1 = twin.param_groups
    assert g0["params"] == [net.weight] and g1["params"] == [net.bias]
    assert (g0["lr"], g1["lr"]) == (6e-3, 2e-3)  # each group's own lr, scaled
    assert g0["betas"] == (0.85, 0.98) and g0["eps"] == 1e-6 and g0["warmup_steps"] == 7
    assert (g0["weight_decay"], g1["weight_decay"]) == (0.05, 0.0) and g0["name"] == "w"  # the user's own key kept
    assert all(g["train_mode"] for g in twin.param_groups)


def test_sgd_with_momentum_becomes_sgd_schedule_free_and_adams_l2_decay_is_said():
    net = nn.Linear(3, 2)
    twin, notes = schedule_free_twin(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.95, weight_decay=1e-4))
    assert isinstance(twin, schedulefree.SGDScheduleFree)
    assert twin.param_groups[0]["momentum"] == 0.95 and twin.param_groups[0]["weight_decay"] == 1e-4 and notes == []
    twin, notes = schedule_free_twin(torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4))
    assert isinstance(twin, schedulefree.AdamWScheduleFree) and twin.param_groups[0]["weight_decay"] == 1e-4
    assert len(notes) == 1 and "L2" in notes[0] and "decoupled" in notes[0]


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: torch.optim.RMSprop(p), "RMSprop has no schedule-free twin"),
        (lambda p: torch.optim.SGD(p, lr=0.1), "momentum=0"),
        (lambda p: torch.optim.Adam(p, amsgrad=True), "amsgrad=True"),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1), "dampening"),
        (lambda p: schedulefree.AdamWScheduleFree(p), "schedule-free already"),
    ],
)
def test_optimizers_without_a_faithful_twin_are_named(make, why):
    opt = make(nn.Linear(2, 2).parameters())
    assert why in why_not_schedule_free(opt)
    with pytest.raises(SettingError, match="no schedule-free twin"):
        schedule_free_twin(opt)


def test_bad_arguments_are_refused_naming_the_argument():
    for kwargs, name in (({"warmup_steps": -1}, "warmup_steps"), ({"warmup_steps": 1.5}, "warmup_steps")):
        with pytest.raises(SettingError, match=name):
            ScheduleFree(**kwargs)
    with pytest.raises(SettingError, match="lr_scale"):
        ScheduleFree(lr_scale=0)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_the_fit_runs_the_twin_with_the_users_lr_and_a_warmup_share_of_the_plan(namespace):
    model = make_model(namespace, "adamw", lr=5e-3)
    cb = ScheduleFree()  # warmup_steps 0.05 of the planned steps
    trainer, _ = fit(namespace, model, [cb], max_epochs=10)  # 4 batches an epoch: 40 steps
    opt = trainer.optimizers[0]
    assert isinstance(opt, schedulefree.AdamWScheduleFree) and cb.swapped == [(0, "AdamW")]
    assert opt.param_groups[0]["lr"] == 5e-3 and opt.param_groups[0]["warmup_steps"] == 2
    assert opt.param_groups[0]["k"] == 40  # it really stepped
    assert cb.status[0] == "active" and "AdamW->AdamWScheduleFree (lr 0.005)" in cb.status[1]
    assert model.optimizers().optimizer is opt  # what the model's self.optimizers() hands out


@pytest.mark.parametrize(
    ("optimizer", "said"),
    [
        ("rmsprop", "RMSprop has no schedule-free twin"),
        ("sgd-no-momentum", "momentum=0"),
        ("adamw+scheduler", "returns a learning-rate scheduler"),
    ],
)
def test_a_skip_warns_and_leaves_the_optimizer_untouched(optimizer, said):
    kw = {"momentum": 0.0} if optimizer == "sgd-no-momentum" else {}
    model = make_model("lightning.pytorch", optimizer.replace("-no-momentum", ""), **kw)
    cb = ScheduleFree()
    trainer, warned = fit("lightning.pytorch", model, [cb], max_steps=3)
    opt = trainer.optimizers[0]
    assert type(opt).__module__.startswith("torch.optim") and "train_mode" not in opt.param_groups[0]
    assert cb.status[0] == "skipped" and said in cb.status[1]
    assert any("schedule_free: skipped" in w and said in w for w in warned)
    assert model.modes["train"] == [True] * 3  # (no mode at all: the helper's default)


# ---------------------------------------------------------------------------------------------- train / eval mode
@pytest.mark.parametrize("namespace", NAMESPACES)
def test_eval_mode_around_validation_and_test_train_mode_in_every_training_step(namespace):
    model = make_model(namespace, "sgd", lr=0.05)
    cb = ScheduleFree(warmup_steps=0)
    trainer, _ = fit(namespace, model, [cb], max_epochs=2, val_check_interval=2, num_sanity_val_steps=1)
    assert model.modes["train"] == [True] * 8
    assert model.modes["val"] == [False] * 5  # the sanity check, then twice an epoch
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["train_mode"] is False  # a fit leaves the averaged weights in the model
    trainer.test(model, verbose=False)
    assert model.modes["test"] == [False]


def test_validation_never_moves_the_training_weights():
    """Going back to train mode copies the kept train-mode weights back instead of computing them from the average:
    a run with validation trains exactly as one without."""
    runs = []
    for val in (0, 1.0):
        model = make_model("lightning.pytorch", "adamw")
        fit("lightning.pytorch", model, [ScheduleFree()], max_epochs=3, limit_val_batches=val)
        runs.append((model.losses, weights(model)))
    (losses_a, w_a), (losses_b, w_b) = runs
    assert losses_a == losses_b
    assert all(torch.equal(w_a[k], w_b[k]) for k in w_a)


# -------------------------------------------------------------------------------------------------------- resume
@pytest.mark.parametrize("namespace", NAMESPACES)
@pytest.mark.parametrize("where", ["train-step", "after-validation"])
def test_a_checkpoint_saved_mid_run_resumes_exactly(namespace, where, tmp_path):
    """An uninterrupted run of 4 epochs that saves a checkpoint on its way, and a run resumed from that checkpoint,
    end with equal weights (torch.equal), whether the checkpoint was saved in train mode (every 6 training steps)
    or in eval mode (at the end of a validation)."""
    pl = _pl(namespace)
    if where == "train-step":
        first = pl.callbacks.ModelCheckpoint(tmp_path / "a", every_n_train_steps=6, save_top_k=-1)
        name = "epoch=1-step=6.ckpt"
    else:
        first = pl.callbacks.ModelCheckpoint(tmp_path / "a", save_top_k=-1)
        name = "epoch=1-step=8.ckpt"
    straight = make_model(namespace, "adamw")
    fit(namespace, straight, [ScheduleFree(warmup_steps=3), first], max_epochs=4, enable_checkpointing=True)
    saved = torch.load(tmp_path / "a" / name, weights_only=False)
    assert all(g["train_mode"] is False for g in saved["optimizer_states"][0]["param_groups"])  # eval mode

    resumed = make_model(namespace, "adamw")
    cb = ScheduleFree(warmup_steps=3)
    trainer, _ = fit(namespace, resumed, [cb], ckpt_path=str(tmp_path / "a" / name), max_epochs=4)
    assert isinstance(trainer.optimizers[0], schedulefree.AdamWScheduleFree)
    assert trainer.global_step == 16
    a, b = weights(straight), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a), {k: (a[k] - b[k]).abs().max().item() for k in a}
    assert straight.losses[-len(resumed.losses) :] == resumed.losses  # the same steps after the checkpoint


def test_the_checkpoint_holds_the_averaged_weights_the_fit_leaves_in_the_model(tmp_path):
    model = make_model("lightning.pytorch", "adamw")
    trainer, _ = fit("lightning.pytorch", model, [ScheduleFree()], max_epochs=2)
    path = tmp_path / "end.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)["state_dict"]
    live = weights(model)  # eval mode after the fit: x
    assert all(torch.equal(saved[k], live[k]) for k in live)
    opt = trainer.optimizers[0]
    opt.train()  # y differs from x
    assert any(not torch.equal(p, live[n]) for n, p in model.named_parameters())


def test_a_checkpoint_saved_without_schedule_free_resumes_with_the_users_optimizer(tmp_path):
    model = make_model("lightning.pytorch", "adamw")
    trainer, _ = fit("lightning.pytorch", model, [], max_epochs=1)
    trainer.save_checkpoint(tmp_path / "plain.ckpt")
    cb = ScheduleFree()
    trainer, warned = fit(
        "lightning.pytorch", make_model("lightning.pytorch", "adamw"), [cb], tmp_path / "plain.ckpt", max_epochs=2
    )
    assert type(trainer.optimizers[0]) is torch.optim.AdamW and trainer.global_step == 8
    assert cb.status[0] == "skipped" and "saved without schedule-free" in cb.status[1]
    assert any("saved without schedule-free" in w for w in warned)


# ----------------------------------------------------------------------------------------- behaviour, composition
@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_it_trains_the_loss_down(optimizer):
    model = make_model("lightning.pytorch", optimizer, lr=0.02 if optimizer == "adamw" else 0.05)
    trainer, _ = fit("lightning.pytorch", model, [ScheduleFree(warmup_steps=4)], max_epochs=10)
    assert model.losses[-1] < 0.1 * model.losses[0]
    with torch.no_grad():  # the averaged weights the fit leaves fit the data too
        final = nn.functional.mse_loss(model(model.x), model.y).item()
    assert final < 0.2 * model.losses[0]


@pytest.mark.parametrize("order", ["schedule-free first", "one-cycle first"])
def test_with_a_one_cycle_schedule_too_schedule_free_wins_and_the_schedule_says_why(order):
    parts = [ScheduleFree(), LRSchedule("onecycle")]
    if order == "one-cycle first":
        parts.reverse()
    model = make_model("lightning.pytorch", "adamw")
    trainer, warned = fit("lightning.pytorch", model, parts, max_epochs=2)
    sf, sched = (parts[0], parts[1]) if order == "schedule-free first" else (parts[1], parts[0])
    assert isinstance(trainer.optimizers[0], schedulefree.AdamWScheduleFree) and sf.active
    assert sched.scheduler is None and not trainer.lr_scheduler_configs
    assert sched.status[0] == "skipped" and "schedule-free optimizer" in sched.status[1]
    assert any("lr_schedule:" in w and "schedule-free" in w for w in warned)


def test_a_preset_asks_for_it_and_composes_with_converge(tmp_path):
    from lightning_speedups import preset

    s = parse_speedups({"schedule_free": {"enabled": True, "warmup_steps": 200, "lr_scale": 3.0}})
    assert "schedule_free" in s.active_parts()
    cbs = [cb for cb in s.callbacks() if isinstance(cb, ScheduleFree)]
    assert len(cbs) == 1 and cbs[0].warmup_steps == 200 and cbs[0].lr_scale == 3.0
    assert not [cb for cb in parse_speedups({}).callbacks() if isinstance(cb, ScheduleFree)]  # off by default
    mine = tmp_path / "sf.yaml"
    mine.write_text("speedups:\n  schedule_free:\n    enabled: true\n")
    both = preset("converge", str(mine))
    kinds = [type(cb).__name__ for cb in both.callbacks()]
    assert kinds.index("ScheduleFree") < kinds.index("LRSchedule")  # both built: at the fit, the schedule steps aside
    with pytest.raises(Exception, match="warmup_steps"):
        parse_speedups({"schedule_free": {"enabled": True, "warmup_steps": -3}})


def test_trainer_callbacks_in_yaml_build_it_by_class_path():
    from jsonargparse import ArgumentParser
    from lightning.pytorch.callbacks import Callback

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--callbacks", type=list[Callback])
    cfg = parser.parse_object(
        {"callbacks": [{"class_path": "lightning_speedups.ScheduleFree", "init_args": {"warmup_steps": 10}}]}
    )
    (cb,) = parser.instantiate_classes(cfg).callbacks
    assert isinstance(cb, ScheduleFree) and cb.warmup_steps == 10


def test_the_doctor_never_advises_a_schedule_for_a_schedule_free_optimizer():
    from lightning_speedups.inspection import Facts
    from lightning_speedups.tips import get_tip

    check = get_tip("T01").check
    plain = check(Facts(collected=True, optimizers=[torch.optim.AdamW(nn.Linear(2, 2).parameters())]))
    assert plain.status == "finding" and "speedups.schedule_free.enabled: true" in plain.fix
    own = check(Facts(collected=True, optimizers=[schedulefree.AdamWScheduleFree(nn.Linear(2, 2).parameters())]))
    assert own.status == "ok" and "AdamWScheduleFree is schedule-free" in own.evidence
    cb = ScheduleFree()
    cb.report(True, "AdamW->AdamWScheduleFree (lr 0.001)")
    swapped = check(Facts(collected=True, callbacks=[cb], optimizers=[torch.optim.AdamW(nn.Linear(2, 2).parameters())]))
    assert swapped.status == "ok" and "speedups.schedule_free: AdamW->AdamWScheduleFree" in swapped.evidence


def test_a_share_of_a_run_with_no_estimate_falls_back_to_the_fixed_warm_up():
    """An iterable loader with no length and no max_steps: Lightning estimates -1 stepping batches (gluonts' own
    Trainer); the warm-up share then has nothing to take a share of, and the summary must not say "of -1"."""
    from types import SimpleNamespace

    from lightning_speedups.callbacks.schedule_free import FALLBACK_WARMUP_STEPS, ScheduleFree

    trainer = SimpleNamespace(estimated_stepping_batches=-1, max_epochs=1, max_steps=-1, callbacks=[])
    steps, text = ScheduleFree(warmup_steps=0.05)._warmup(trainer)
    assert steps == FALLBACK_WARMUP_STEPS and "no plan" in text and "-1" not in text
    trainer.estimated_stepping_batches = 400
    assert ScheduleFree(warmup_steps=0.05)._warmup(trainer) == (20, "20 warm-up steps (0.05 of 400)")
