"""The fsdp preset on the user's own Trainer flags and on models that take input gradients (issue 22 item 2),
against plain Lightning on the same batches: on one process in this process, on 2 gloo processes with
torchrun (each rank half of each global batch).

- the user's norm clipping (Lightning's FSDPPrecision refuses it) goes through FSDP's clip_grad_norm_:
  the same weights as plain Lightning's norm clipping over the whole batch; value clipping likewise;
- an energy-based model that toggles requires_grad of its parameters while sampling (torch refuses under
  FSDP), adversarial examples (FGSM) and a WGAN-GP-style gradient penalty (they train, but drift from
  plain Lightning and DDP on 2 processes: shown by the last test) are refused before any training_step
  with the fix, or skipped with the reason when the model is known.
"""

from __future__ import annotations

import re

import pytest
import torch
from fsdp_shapes_worker import MODELS, Shape, fit
from helpers import one_thread  # noqa: F401  (a fixture)
from launch import HERE, run_workers

from lightning_speedups.presets import preset
from lightning_speedups.strategies.fsdp import fsdp_gradient_problems, requires_grad_toggles

pytestmark = pytest.mark.usefixtures("one_thread")


def _close(a: dict[str, list[float]], b: dict[str, list[float]], tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(torch.tensor(a[k]), torch.tensor(b[k]), atol=tol), k


@pytest.mark.parametrize("shape", ["clip_norm", "clip_value"])
def test_the_users_clipping_runs_under_fsdp_as_under_plain_lightning(shape):
    plain = fit(shape, fsdp=False)
    sharded = fit(shape, fsdp=True)
    assert sharded["global_step"] == plain["global_step"] == 4
    assert sharded["losses"] == pytest.approx(plain["losses"], abs=1e-6)
    _close(sharded["final"], plain["final"])
    unclipped = fit(shape, fsdp=False, clip=False)
    assert unclipped["losses"][1:] != pytest.approx(plain["losses"][1:], abs=1e-4)  # clipping acted
    algorithm = shape.removeprefix("clip_")
    assert any(f"gradient clipping by {algorithm}" in line for line in sharded["summary"]), sharded["summary"]


@pytest.mark.parametrize(
    ("shape", "where", "why"),
    [
        ("energy", "LangevinSampler.sample", "sets requires_grad of the model's parameters"),
        ("adversarial", "Adversarial.loss", "computes gradients itself"),
        ("gradient_penalty", "GradientPenalty.loss", "computes gradients itself"),
    ],
)
def test_input_gradient_shapes_are_refused_before_training_with_the_fix(shape, where, why):
    import lightning.pytorch as pl

    model = MODELS[shape]()
    problems = fsdp_gradient_problems(model)
    assert len(problems) == 1 and where in problems[0] and why in problems[0], problems
    p = preset("fsdp")
    trainer = pl.Trainer(
        **p.trainer_kwargs(accelerator="cpu"),
        max_steps=2,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=p.callbacks(),
    )
    with pytest.raises(ValueError, match=rf"speedups\.fsdp: {re.escape(where)} .*Fix: train this model with the ddp"):
        trainer.fit(model)
    assert model.calls == 0  # no training_step ran
    # with the model known (the CLI, or trainer_kwargs(model=...)), fsdp is skipped with the same reason
    kwargs, notes = preset("fsdp").speedups.trainer_kwargs(accelerator="cpu", model=MODELS[shape]())
    assert "strategy" not in kwargs
    assert any(n == "fsdp (T11)" and not on and where in reason for n, on, reason in notes), notes


def test_plain_shapes_are_not_refused():
    assert fsdp_gradient_problems(Shape()) == []
    assert requires_grad_toggles(MODELS["adversarial"]()) == []  # input gradients, parameters left alone


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["clip_norm", "clip_value"])
def test_the_users_clipping_on_two_processes_equals_one_process_on_the_global_batch(tmp_path, shape):
    ranks = run_workers(shape, tmp_path, timeout=150, script=HERE / "fsdp_shapes_worker.py")
    plain = fit(shape, fsdp=False, batch_size=8)  # one process, the whole global batch
    for r in ranks:
        assert r["global_step"] == 4
        _close(r["final"], plain["final"])
    halves = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert halves == pytest.approx(plain["losses"], abs=1e-5)
    how = "through FSDP's clip_grad_norm_" if shape == "clip_norm" else "element-wise on each rank's shards"
    assert any(how in line for line in ranks[0]["summary"]), ranks[0]["summary"]


@pytest.mark.slow
def test_the_energy_model_is_refused_on_two_processes_before_training(tmp_path):
    with pytest.raises(AssertionError, match=r"speedups\.fsdp: LangevinSampler\.sample sets requires_grad"):
        run_workers("energy", tmp_path, timeout=150, script=HERE / "fsdp_shapes_worker.py")


@pytest.mark.slow
def test_why_input_gradients_are_refused_they_drift_on_two_processes(tmp_path, monkeypatch):
    """What the refusal prevents (FSDP1, torch 2.13, gloo): adversarial training under FSDP on 2 processes
    leaves plain Lightning's weights from the second step, where DDP on the same processes does not. The
    day this fails, FSDP computes these gradients right: lift the refusal of input gradients."""
    plain = fit("adversarial", fsdp=False, batch_size=8)
    monkeypatch.setenv("SHAPES_UNCHECKED", "1")
    sharded = run_workers("adversarial", tmp_path / "fsdp", timeout=150, script=HERE / "fsdp_shapes_worker.py")
    monkeypatch.setenv("SHAPES_DDP", "1")
    ddp = run_workers("adversarial", tmp_path / "ddp", timeout=150, script=HERE / "fsdp_shapes_worker.py")
    _close(ddp[0]["final"], plain["final"])
    drift = max(
        float((torch.tensor(sharded[0]["final"][k]) - torch.tensor(plain["final"][k])).abs().max())
        for k in plain["final"]
    )
    assert drift > 1e-2, drift
