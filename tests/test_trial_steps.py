"""Issue 30: one way to take trial steps (the LR range test and the start-up probe take theirs inside
``trial_steps``): everything back bit for bit, the random generators by Lightning's isolate_rng, and the
snapshot on the host, so a trial never needs twice the model's device memory."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from lightning_speedups.functional.snapshot import TrainingSnapshot
from lightning_speedups.trainer.trial_steps import trial_steps


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        self.seen = torch.zeros(3)  # a plain tensor attribute: training state too
        self.history = [1.0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _state(net: Net, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = [t.detach().clone() for t in net.state_dict().values()] + [net.seen.clone()]
    out += [v.clone() for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return out


def _train(net: Net, opt: torch.optim.Optimizer, steps: int, device: str) -> None:
    for _ in range(steps):
        loss = net(torch.randn(8, 4, device=device)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        net.seen += 1
        net.history.append(float(random.random() + np.random.rand()))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_trial_steps_leave_the_run_bit_for_bit_as_they_found_it(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    net = Net().to(device)
    net.seen = net.seen.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    _train(net, opt, 2, device)  # optimizer state exists before the trial
    before = _state(net, opt)
    history = list(net.history)
    draws = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    with trial_steps(net, [opt]) as snapshot:
        _train(net, opt, 3, device)
        assert not torch.equal(_state(net, opt)[0], before[0])  # the trial really changed the weights
        assert snapshot.device_tensors() == []  # the snapshot is on the host
    after = _state(net, opt)
    assert len(after) == len(before) and all(torch.equal(a, b) for a, b in zip(after, before))
    assert net.history == history  # a plain list attribute: the trial's appends are gone
    assert net.seen.device.type == device  # a plain tensor attribute back on its device
    assert torch.equal(torch.get_rng_state(), draws[0]) and random.getstate() == draws[1]
    assert np.array_equal(np.random.get_state()[1], draws[2])


def test_the_snapshot_is_a_host_copy_not_a_view():
    net = Net()
    snapshot = TrainingSnapshot.capture(net)
    live = {p.data_ptr() for p in net.parameters()}
    assert all(w.device.type == "cpu" and w.data_ptr() not in live for _, w, _ in snapshot.params)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_trial_needs_no_second_copy_of_the_model_on_the_device():
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(4, 1024, device="cuda")).sum().backward()
    opt.step()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    with trial_steps(net, [opt]):
        torch.cuda.synchronize()
        during = torch.cuda.memory_allocated()
    model_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    assert during - held < 0.1 * model_bytes  # a device clone would add the model (and its momentum) again


# ------------------------------------------------------------------------------ trials through the fit loop
def _flags(trainer):
    from lightning_speedups.trainer.trial_steps import _RESTART_FLAGS, _loops

    return [{f: getattr(lp, f) for f in _RESTART_FLAGS if hasattr(lp, f)} for lp in _loops(trainer.fit_loop)]


@pytest.mark.parametrize("resumed", [False, True])
def test_fit_loop_trials_leave_the_loops_and_logged_results_as_they_found_them(resumed, tmp_path):
    """Trials through the fit loop: the loops stay fresh (none left marked as loaded from a state dict, which the
    range test's own restore left set), the progress is back, a resumed run still continues where it stopped, and
    what the trial steps logged is not in the run's metrics."""
    import lightning.pytorch as pl

    from lightning_speedups.trainer.trial_steps import fit_loop_trials

    seen = {}

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("trial_or_run", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            data = torch.utils.data.TensorDataset(torch.randn(32, 4))
            return torch.utils.data.DataLoader(data, batch_size=4)

    class Trials(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            before = (_flags(trainer), trainer.fit_loop.state_dict(), trainer.global_step)
            with fit_loop_trials(trainer, pl_module, max_steps=trainer.global_step + 3) as trials:
                trainer.fit_loop.run()
                seen["trial_steps"] = trainer.global_step
                trials.rewind()
                seen["rewound"] = trainer.global_step
            seen["same"] = (
                _flags(trainer) == before[0]
                and trainer.fit_loop.state_dict() == before[1]
                and trainer.global_step == before[2]
            )
            seen["metrics"] = dict(trainer.callback_metrics)
            seen["flags"] = _flags(trainer)[0]

    kwargs = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, max_steps=4)
    ckpt = None
    if resumed:
        first = pl.Trainer(default_root_dir=tmp_path, **kwargs)
        first.fit(Model())
        ckpt = first.checkpoint_callback.best_model_path or str(tmp_path / "last.ckpt")
        if not first.checkpoint_callback.best_model_path:
            first.save_checkpoint(ckpt)
        kwargs["max_steps"] = 6
    trainer = pl.Trainer(default_root_dir=tmp_path, callbacks=[Trials()], **kwargs)
    trainer.fit(Model(), ckpt_path=ckpt)
    # Lightning restores a checkpoint's loop state after on_fit_start: trials there start from a fresh loop, and
    # the resume that follows them still continues where the first run stopped
    assert seen["trial_steps"] == 3 and seen["rewound"] == 0
    assert seen["same"] and seen["flags"]["_restarting"] is False
    assert "trial_or_run" not in seen["metrics"]
    assert trainer.global_step == (6 if resumed else 4)
