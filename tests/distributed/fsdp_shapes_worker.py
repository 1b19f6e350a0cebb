"""The fsdp preset on the user's own Trainer settings and on models that take input gradients (issue 22).

Shapes: the user's norm clipping (``gradient_clip_algorithm: norm``, which Lightning's FSDPPrecision
refuses: the pack clips through FSDP's ``clip_grad_norm_``), value clipping, adversarial examples
(FGSM: the input gradient inside ``training_step``), a WGAN-GP-style gradient penalty
(``autograd.grad(create_graph=True)``), and an energy-based model whose sampler toggles
``requires_grad`` of its parameters (refused before training, with the fix).

Used in process on one device (``test_fsdp_shapes.py``) and as a torchrun rank
(``fsdp_shapes_worker.py SCENARIO OUT``, see ``launch.py``), which writes ``OUT/rank<RANK>.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F

from lightning_speedups.callbacks import SpeedupsSummary
from lightning_speedups.presets import preset

RANK = int(os.environ.get("RANK", "0"))
LOCAL = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
N = 32  # samples; each run sees them in order (no shuffling), so 2 ranks x 4 equal one process x 8


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(N, 8, generator=g), torch.randint(0, 4, (N,), generator=g)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Shape(pl.LightningModule):
    """A small residual MLP (two repeated blocks: two FSDP units) trained on a fixed set, per-sample mean loss."""

    def __init__(self, batch_size: int = 8, lr: float = 0.1) -> None:
        super().__init__()
        self.batch_size, self.lr = batch_size, lr
        self.stem = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(16, 4)
        self.losses: list[float] = []
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.calls += 1
        loss = self.loss(*batch)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        # each rank its interleaved share (the runs pass use_distributed_sampler=False): rank r's batch k is
        # samples r, r+2, ... of the k-th global batch, so 2 ranks x 4 see exactly one process x 8's batches
        rank, world = self.trainer.global_rank, self.trainer.world_size
        x, y = _data()
        return torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x[rank::world], y[rank::world]), batch_size=self.batch_size
        )


class Adversarial(Shape):
    """FGSM adversarial training: the input gradient inside training_step, then the loss on both."""

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.clone().requires_grad_(True)
        clean = F.cross_entropy(self(x), y)
        (grad,) = torch.autograd.grad(clean, x, retain_graph=True)
        adv = F.cross_entropy(self((x + 0.1 * grad.sign()).detach()), y)
        return 0.5 * (clean + adv)


class GradientPenalty(Shape):
    """A WGAN-GP-style penalty: the norm of the input gradient, differentiated (create_graph=True)."""

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.clone().requires_grad_(True)
        out = self(x)
        (grad,) = torch.autograd.grad(out.logsumexp(1).sum(), x, create_graph=True)
        return F.cross_entropy(out, y) + 0.1 * ((grad.norm(dim=1) - 1) ** 2).mean()


class LangevinSampler:
    """An energy-based model's sampler, shaped as public EBM tutorials write it: freezes the network,
    follows the input gradient a few steps, unfreezes it."""

    def __init__(self, net: nn.Module, steps: int = 3) -> None:
        self.net, self.steps = net, steps

    def sample(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.net.parameters():
            p.requires_grad = False
        x = x.detach().clone().requires_grad_(True)
        for _ in range(self.steps):
            energy = -self.net(x).sum()
            energy.backward()
            x = (x - 0.1 * x.grad.clamp(-0.03, 0.03)).detach().requires_grad_(True)
        for p in self.net.parameters():
            p.requires_grad = True
        return x.detach()


class Energy(Shape):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sampler = LangevinSampler(self)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fake = self.sampler.sample(torch.rand_like(x))
        real_e, fake_e = self(x).logsumexp(1), self(fake).logsumexp(1)
        return (fake_e - real_e).mean() + 0.1 * (real_e**2 + fake_e**2).mean()


MODELS = {"clip_norm": Shape, "clip_value": Shape, "adversarial": Adversarial, "gradient_penalty": GradientPenalty}
MODELS["energy"] = Energy
CLIP = {
    "clip_norm": {"gradient_clip_val": 0.05},
    "clip_value": {"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"},
}


def full_params(trainer: pl.Trainer, model: nn.Module) -> dict[str, list[float]]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    module = trainer.strategy.model
    if not isinstance(module, FullyShardedDataParallel):
        return {n: p.detach().flatten().tolist() for n, p in model.named_parameters()}
    with FullyShardedDataParallel.summon_full_params(module, writeback=False):
        named = ((n.replace("_fsdp_wrapped_module.", ""), p) for n, p in module.named_parameters())
        return {n: p.detach().flatten().tolist() for n, p in named}


def fit(
    shape: str, fsdp: bool, batch_size: int = 8, devices: int = 1, steps: int = 4, clip: bool = True, **extra: Any
) -> dict[str, Any]:
    """Train ``shape`` with plain Lightning or the fsdp preset (from Python, without ``model=``)."""
    pl.seed_everything(0, verbose=False)
    model = MODELS[shape](batch_size=batch_size)
    kwargs: dict[str, Any] = {}
    callbacks: list[Any] = []
    if fsdp:
        p = preset("fsdp")
        kwargs = p.trainer_kwargs(accelerator="cpu")
        kwargs.pop("accelerator")  # passed below, as for the plain run
        callbacks = p.callbacks()
        if os.environ.get("SHAPES_ORIG_PARAMS"):  # the cost / effect of use_orig_params=True
            kwargs["strategy"].kwargs["use_orig_params"] = True
    user = CLIP.get(shape, {}) if clip else {}
    trainer = pl.Trainer(
        **kwargs,
        **user,  # the user's own Trainer flags, as a user passes them
        accelerator="cpu",
        devices=devices,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=callbacks,
        **extra,
    )
    t0 = time.perf_counter()
    trainer.fit(model)
    summary = next((cb.lines for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary)), [])
    return {
        "losses": model.losses,
        "final": full_params(trainer, model),
        "summary": summary,
        "seconds": time.perf_counter() - t0,
        "global_step": trainer.global_step,
    }


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    if os.environ.get("SHAPES_UNCHECKED"):  # what the refusal prevents: train the shape under FSDP anyway
        import lightning_speedups.strategies.fsdp as fsdp

        fsdp.fsdp_gradient_problems = lambda model: []
    # two ranks x 4 samples: the same global batches as one process x 8
    if os.environ.get("SHAPES_DDP"):
        result = fit(scenario, fsdp=False, batch_size=4, devices=LOCAL, strategy="ddp")
    else:
        result = fit(scenario, fsdp=True, batch_size=4, devices=LOCAL)
    result.update(rank=RANK)
    (out / f"rank{RANK}.json").write_text(json.dumps(result))
    # Lightning keeps the process group after fit; left to the interpreter's exit, gloo's threads can be destroyed
    # while still joinable ("terminate called without an active exception", SIGABRT) on a busy machine
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
