"""The fsdp preset on what FSDP1 under one root unit cannot train (issue 12), from Python without ``model=``:

- a GAN with manual optimization (``manual_backward`` inside ``training_step``): each top-level
  sub-module is its own FSDP root; both optimizers step, on one process and on 2 gloo processes
  (parameters equal across ranks, a sharded checkpoint resumes with the parameters and Adam's steps);
- a DQN whose ``training_step`` copies ``net`` into ``target_net`` in place: the twins are FSDP units
  of their own, and after every batch the target holds the online network's pre-step weights;
- a manual-optimization model that cannot be laid out that way is refused in ``setup``, before any
  ``training_step``, with the setting and the fix (skipped with the reason when the model is known).
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from fsdp_manual_worker import dqn, gan
from helpers import one_thread, quiet_trainer  # noqa: F401  (one_thread: a fixture)
from launch import HERE, run_workers
from torch import nn

from lightning_speedups.presets import preset
from lightning_speedups.strategies.fsdp import manual_layout_problems, twin_children

pytestmark = pytest.mark.usefixtures("one_thread")


def _check_gan(run: dict, batches: int) -> None:
    assert run["strategy"] == "SpeedupsFSDPStrategy"
    assert math.isfinite(run["loss"]), run["loss"]
    assert run["roots"] == ["generator", "discriminator"]
    assert run["global_step"] == 2 * batches  # manual optimization: both optimizers step every batch
    assert any("generator, discriminator each its own FSDP root" in line for line in run["summary"])
    assert run["final"].keys() == run["initial"].keys()
    unchanged = [n for n in run["initial"] if run["final"][n] == run["initial"][n]]
    assert not unchanged, f"parameters the optimizers never moved: {unchanged}"


def test_gan_trains_under_the_fsdp_preset_with_both_optimizers_stepping():
    _check_gan(gan(1), batches=2)


def test_dqn_target_network_sync_inside_training_step_works_under_fsdp():
    run = dqn()
    assert math.isfinite(run["loss"]) and run["global_step"] == 2
    assert any("twin sub-networks net, target_net in their own FSDP units" in line for line in run["summary"])
    # sync_rate=1: training_step copies net into target_net before the optimizer steps
    assert len(run["target_after"]) == len(run["net_before"]) == 2
    assert run["target_after"] == run["net_before"]
    assert run["net_before"][0] != run["net_before"][1]  # the online network trained


def test_twins_and_layout_checks():
    def mlp() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    m = nn.Module()
    m.net, m.target_net, m.head, m.fc = mlp(), mlp(), nn.Linear(2, 2), nn.Linear(2, 2)
    assert twin_children(m) == ["net", "target_net"]  # two single layers are not twin networks
    assert manual_layout_problems(m) == []
    m.scale = nn.Parameter(torch.ones(1))
    m.tied = nn.Sequential(m.head)
    problems = manual_layout_problems(m)
    assert any("parameters of its own (scale)" in p for p in problems)
    assert any("`head` and `tied` share a parameter" in p for p in problems)


class _OwnParameter(pl.LightningModule):
    """Manual optimization with a parameter registered on the LightningModule itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = nn.Linear(4, 1)
        self.temperature = nn.Parameter(torch.ones(1))
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        opt = self.optimizers()
        loss = (self.layer(batch[0]) * self.temperature).pow(2).mean()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)


class _Buffers(pl.LightningModule):
    """Manual optimization with buffers outside every sub-module that owns parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.norm = nn.Module()
        self.norm.register_buffer("mean", torch.full((4,), 0.5))
        self.register_buffer("scale", torch.full((1,), 2.0))
        self.register_buffer("seen", torch.zeros(1), persistent=False)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = (self.layer((batch[0] - self.norm.mean) * self.scale)).pow(2).mean()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.seen += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)


def test_buffers_outside_the_fsdp_roots_stay_registered_and_used():
    model = _Buffers()
    p = preset("fsdp")
    trainer = quiet_trainer(**p.trainer_kwargs(accelerator="cpu"), max_epochs=1, callbacks=p.callbacks())
    trainer.fit(model)
    assert float(model.seen) == 2
    keys = set(model.state_dict())
    assert {"scale", "norm.mean"} <= keys and "seen" not in keys  # persistence as registered


def test_a_model_that_cannot_be_sharded_per_sub_module_is_refused_before_training():
    model = _OwnParameter()
    p = preset("fsdp")
    trainer = quiet_trainer(**p.trainer_kwargs(accelerator="cpu"), max_epochs=1, callbacks=p.callbacks())
    with pytest.raises(ValueError, match=r"speedups\.fsdp: .*parameters of its own \(temperature\).*Fix: "):
        trainer.fit(model)
    assert model.steps == 0
    # with the model known (the CLI, or trainer_kwargs(model=...)), fsdp is skipped with the same reason
    kwargs, notes = preset("fsdp").speedups.trainer_kwargs(accelerator="cpu", model=_OwnParameter())
    assert "strategy" not in kwargs
    assert any(
        name == "fsdp (T11)" and not active and "parameters of its own (temperature)" in why
        for name, active, why in notes
    ), notes


@pytest.mark.slow
def test_gan_on_two_processes_averages_and_resumes_from_its_sharded_checkpoint(tmp_path):
    ranks = run_workers("gan", tmp_path, timeout=150, script=HERE / "fsdp_manual_worker.py")
    for r in ranks:
        first, resumed = r["first"], r["resumed"]
        _check_gan(first, batches=2)  # 2 of each rank's batches
        assert first["adam_steps_at_start"] == [[], []]
        assert sum(f.endswith(".distcp") for f in first["ckpt_files"]) == 2
        assert resumed["start"] == first["final"], "the resumed fit did not start from the checkpoint"
        steps = resumed["adam_steps_at_start"]
        assert len(steps) == 2 and all(s and set(s) == {2} for s in steps), steps
        assert resumed["global_step"] == 8 and math.isfinite(resumed["loss"])
    # each rank saw other images: equal parameters mean both optimizers' gradients were averaged
    assert ranks[0]["first"]["final"] == ranks[1]["first"]["final"]
    assert ranks[0]["resumed"]["final"] == ranks[1]["resumed"]["final"]


@pytest.mark.slow
def test_dqn_on_two_processes_syncs_the_sharded_target_network(tmp_path):
    ranks = run_workers("dqn", tmp_path, timeout=150, script=HERE / "fsdp_manual_worker.py")
    for r in ranks:
        run = r["dqn"]
        assert math.isfinite(run["loss"]) and run["global_step"] == 2
        assert run["target_after"] == run["net_before"]
    assert ranks[0]["dqn"]["final"] == ranks[1]["dqn"]["final"]
