"""T11's doctor check: does the model fit one device, and what fsdp (or memory) would change."""

from __future__ import annotations

import dataclasses

import torch
from models import TinyBlocks

from lightning_speedups.inspection import Facts
from lightning_speedups.inspection.memory import FIT_SHARE, estimate_fit, measure_saved_activations
from lightning_speedups.tips.t11_ddp import check


def _facts(total: int) -> Facts:
    model = TinyBlocks()
    opt = model.configure_optimizers()
    return Facts(
        collected=True, model=model, optimizers=[opt], train_loaders=[model.train_dataloader()], total_memory=total
    )


def _estimate():
    f = _facts(1 << 30)
    return estimate_fit(f.model, optimizers=f.optimizers, loaders=f.train_loaders, device_total=1 << 30)


def test_the_estimate_counts_parameters_gradients_momentum_and_saved_activations():
    est = _estimate()
    n = sum(p.numel() for p in TinyBlocks().parameters())
    assert (est.params, est.grads, est.optimizer_state) == (4 * n, 4 * n, 4 * n)  # fp32, SGD momentum
    assert est.activations and est.activations > 4 * 16 * 4  # at least the blocks' inputs, batch 4 x width 16
    assert "batch of 4" in est.activations_note
    assert est.sharded_total(2) == -(-est.static // 2) + est.activations


def test_saved_activations_are_the_tensors_kept_for_backward():
    lin = torch.nn.Linear(100, 100)
    x = torch.randn(32, 100)
    assert measure_saved_activations(lambda: lin(x).sum()) == 32 * 100 * 4  # the input, not the weight
    assert measure_saved_activations(lambda: torch.relu(lin(x)).sum()) == 2 * 32 * 100 * 4


def test_a_model_that_fits_says_so_with_the_figures():
    finding = check(_facts(1 << 30))
    assert finding.status == "ok" and "fits: parameters" in finding.evidence and "activations" in finding.evidence


def test_a_model_too_big_for_one_device_gets_fsdp_with_the_devices_it_needs():
    est = _estimate()
    total = int(est.static / FIT_SHARE * 0.8)  # even the parameters, gradients and state do not fit
    finding = check(_facts(total))
    assert finding.severity == "high", finding
    assert "does not fit one device" in finding.evidence and "parameters 4.4 KiB" in finding.evidence
    assert "--config fsdp.yaml with trainer.devices:" in finding.fix
    n = dataclasses.replace(est, device_total=total).devices_needed()
    assert n is not None and n >= 2 and f"trainer.devices: {n} or more" in finding.fix


def test_activations_that_do_not_fit_get_the_memory_preset():
    est = _estimate()
    total = int((est.static + est.activations / 2) / FIT_SHARE)  # the model fits, its activations do not
    finding = check(_facts(total))
    assert finding.severity == "high" and "activations make it too big" in finding.evidence
    assert finding.fix.startswith("--config memory.yaml")
    tiny = int(est.activations / FIT_SHARE * 0.9)  # not even the activations: sharding cannot help
    finding = check(_facts(tiny))
    assert "sharding the model cannot help" in finding.evidence and "fsdp" not in finding.fix
