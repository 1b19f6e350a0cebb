"""The fsdp preset on the projects FSDP1 could not train under one root unit: a GAN (manual optimization,
two optimizers) and a DQN (a target network synced in place inside ``training_step``).

Used two ways: in process on one device (``tests/distributed/test_fsdp_manual.py``), and as a torchrun
rank (``fsdp_manual_worker.py SCENARIO OUT``, see ``launch.py``), which writes ``OUT/rank<RANK>.json``.
The Trainer is built as a user builds it from Python: ``preset("fsdp").trainer_kwargs()`` without
``model=``, so nothing is decided before the strategy's ``setup``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the projects package

from projects.dqn import DQN
from projects.gan import DCGAN, ImageData

from lightning_speedups.callbacks import SpeedupsSummary
from lightning_speedups.presets import preset

RANK = int(os.environ.get("RANK", "0"))
LOCAL = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def full_params(trainer: pl.Trainer, prefix: str = "") -> dict[str, list[float]]:
    """The model's parameters named ``prefix...`` by their unwrapped names, gathered whole from the FSDP
    shards (summoned from the outermost module: the root unit, or the LightningModule whose sub-modules
    are the roots; summoning a nested unit before the root first ran would make it a root)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    module = trainer.strategy.model
    assert module is not None
    with FullyShardedDataParallel.summon_full_params(module, writeback=False):
        named = ((n.replace("_fsdp_wrapped_module.", ""), p) for n, p in module.named_parameters())
        return {n: p.detach().flatten().tolist() for n, p in named if n.startswith(prefix)}


class Probe(pl.Callback):
    """What the checks compare: parameters at the start of the fit, per batch, and the optimizers' steps."""

    def __init__(self) -> None:
        self.start: dict[str, list[float]] = {}
        self.adam_steps: list[list[int]] = []
        self.net_before: list[dict[str, list[float]]] = []
        self.target_after: list[dict[str, list[float]]] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = full_params(trainer)
        self.adam_steps = [sorted(int(s["step"]) for s in opt.state.values()) for opt in trainer.optimizers]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(pl_module, DQN):
            self.net_before.append(full_params(trainer, "net."))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(pl_module, DQN):
            self.target_after.append(
                {n.removeprefix("target_"): v for n, v in full_params(trainer, "target_net.").items()}
            )


def _trainer(epochs: int, probe: Probe) -> pl.Trainer:
    p = preset("fsdp")
    return pl.Trainer(
        **p.trainer_kwargs(accelerator="cpu"),
        devices=LOCAL,
        max_epochs=epochs,
        limit_train_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*p.callbacks(), probe],
    )


def _summary(trainer: pl.Trainer) -> list[str]:
    return next((cb.lines for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary)), [])


def gan(epochs: int, ckpt_in: Optional[str] = None, ckpt_out: Optional[str] = None) -> dict[str, Any]:
    """Train the DCGAN under the fsdp preset; optionally save / resume a checkpoint."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    pl.seed_everything(0, verbose=False)
    model, probe = DCGAN(), Probe()
    initial = {n: p.detach().flatten().tolist() for n, p in model.named_parameters()}
    trainer = _trainer(epochs, probe)
    trainer.fit(model, datamodule=ImageData(), ckpt_path=ckpt_in)
    if ckpt_out:
        trainer.save_checkpoint(ckpt_out)
    loss = float(model.last_loss) if model.last_loss is not None else math.nan
    roots = [n for n, m in model.named_children() if isinstance(m, FullyShardedDataParallel)]
    return {
        "loss": loss,
        "initial": initial,
        "start": probe.start,
        "final": full_params(trainer),
        "adam_steps_at_start": probe.adam_steps,
        "global_step": trainer.global_step,
        "strategy": type(trainer.strategy).__name__,
        "roots": roots,
        "summary": _summary(trainer),
        "ckpt_files": sorted(os.listdir(ckpt_out)) if ckpt_out and os.path.isdir(ckpt_out) else None,
    }


def dqn() -> dict[str, Any]:
    """Train the DQN under the fsdp preset, syncing the target network every step."""
    pl.seed_everything(0, verbose=False)
    model, probe = DQN(sync_rate=1), Probe()
    trainer = _trainer(1, probe)
    trainer.fit(model)
    loss = float(model.last_loss) if model.last_loss is not None else math.nan
    return {
        "loss": loss,
        "global_step": trainer.global_step,
        "net_before": probe.net_before,
        "target_after": probe.target_after,
        "final": full_params(trainer),
        "summary": _summary(trainer),
    }


def scenario_gan(out: Path) -> dict[str, Any]:
    ckpt = str(out / "gan.ckpt")
    res = {"first": gan(1, ckpt_out=ckpt)}
    res["resumed"] = gan(2, ckpt_in=ckpt)
    return res


def scenario_dqn(out: Path) -> dict[str, Any]:
    return {"dqn": dqn()}


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    result = globals()[f"scenario_{scenario}"](out)
    result.update(rank=RANK)
    (out / f"rank{RANK}.json").write_text(json.dumps(result))
    # Lightning keeps the process group after fit: destroyed here, not by the interpreter's exit (see fsdp_shapes_worker)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
