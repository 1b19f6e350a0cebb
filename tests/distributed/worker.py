"""One rank of a distributed test, started by torchrun (see ``launch.py``): ``worker.py SCENARIO OUT``.

Each scenario trains :class:`models.TinyBlocks` a few steps several ways and writes what the test
compares to ``OUT/rank<RANK>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch.distributed as dist
from models import TinyBlocks, named_params

from lightning_speedups.callbacks import SpeedupsSummary
from lightning_speedups.functional.loaders import auto_num_workers, available_cpus
from lightning_speedups.presets import preset

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
NODES = WORLD // LOCAL


def trainer(kwargs: dict[str, Any], callbacks: list, epochs: int, **extra: Any) -> pl.Trainer:
    kwargs = {k: v for k, v in kwargs.items() if k != "accelerator"}  # trainer_kwargs(accelerator=) returns it
    return pl.Trainer(
        accelerator="cpu",
        devices=LOCAL,
        num_nodes=NODES,
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **{**kwargs, **extra},
        callbacks=callbacks,
    )


def params(trainer: pl.Trainer, model: TinyBlocks) -> dict[str, list[float]]:
    from lightning.pytorch.strategies import FSDPStrategy

    if isinstance(trainer.strategy, FSDPStrategy):
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False):
            return named_params(model)
    return named_params(model)


def summary_lines(trainer: pl.Trainer) -> list[str]:
    return next((cb.lines for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary)), [])


class StaticGraphProbe(pl.Callback):
    """Records whether the DDP wrapper runs a static graph (Lightning unwraps the model after the fit)."""

    static_graph: bool | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        wrapped = trainer.strategy.model
        self.static_graph = bool(wrapped.static_graph) if hasattr(wrapped, "static_graph") else None


def fit(
    names: tuple[str, ...],
    epochs: int,
    n: int = 16,
    ckpt_in: str | None = None,
    ckpt_out: str | None = None,
    set_speedups: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Train with the presets ``names`` and return what the test compares."""
    p = preset(*names)
    for key, value in (set_speedups or {}).items():
        setattr(p.speedups, key, value)
    model = TinyBlocks(n=n)
    probe = StaticGraphProbe()
    t = trainer(p.trainer_kwargs(accelerator="cpu"), [*p.callbacks(), probe], epochs, **extra)
    t.fit(model, ckpt_path=ckpt_in)
    if ckpt_out:
        t.save_checkpoint(ckpt_out)
    out: dict[str, Any] = {
        "losses": model.losses,
        "params": params(t, model),
        "global_step": t.global_step,
        "strategy": type(t.strategy).__name__,
        "summary": summary_lines(t),
        "accumulate": t.accumulate_grad_batches,
        "world_size": t.world_size,
        "num_nodes": t.num_nodes,
    }
    out["static_graph"] = probe.static_graph
    wrapped = getattr(t.strategy, "model", None)
    if type(t.strategy).__name__ == "SpeedupsFSDPStrategy":
        from torch.distributed.fsdp import FullyShardedDataParallel

        out["fsdp_units"] = sum(isinstance(m, FullyShardedDataParallel) for m in wrapped.modules())
        mp = t.strategy.mixed_precision
        out["param_dtype"] = str(mp.param_dtype) if mp is not None else None
        out["precision"] = t.precision
    return out


def scenario_fsdp(out: Path) -> dict[str, Any]:
    ckpt = str(out / "fsdp.ckpt")
    res = {"straight": fit(("fsdp",), 2), "first": fit(("fsdp",), 1, ckpt_out=ckpt)}
    res["ckpt_files"] = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else None
    res["resumed"] = fit(("fsdp",), 2, ckpt_in=ckpt)
    res["composed"] = fit(("fsdp", "fast", "memory"), 1)
    return res


def scenario_ddp(out: Path) -> dict[str, Any]:
    from lightning.pytorch.strategies import DDPStrategy

    res: dict[str, Any] = {}
    # torch's static-graph DDP with Lightning's accumulation (no_sync on the first micro-batch)
    model = TinyBlocks(n=32)
    t = trainer({"strategy": DDPStrategy(static_graph=True)}, [], 1, accumulate_grad_batches=2)
    try:
        t.fit(model)
        res["raw_static_accumulate"] = {"error": None, "params": named_params(model)}
    except Exception as err:
        res["raw_static_accumulate"] = {"error": f"{type(err).__name__}: {err}"[:500]}
    dist.barrier()
    ckpt = str(out / "ddp.ckpt")
    res["straight"] = fit(("ddp",), 2)
    res["first"] = fit(("ddp",), 1, ckpt_out=ckpt)
    res["resumed"] = fit(("ddp",), 2, ckpt_in=ckpt)
    res["accumulate"] = fit(("ddp",), 1, n=32, accumulate_grad_batches=2)
    return res


def scenario_multinode(out: Path) -> dict[str, Any]:
    ckpt = str(out / "multinode.ckpt")
    eff = {"effective_batch_size": 16}
    res = {
        "straight": fit(("ddp",), 2, n=32, set_speedups=eff),
        "first": fit(("ddp",), 1, n=32, set_speedups=eff, ckpt_out=ckpt),
    }
    res["resumed"] = fit(("ddp",), 2, n=32, set_speedups=eff, ckpt_in=ckpt)
    choice = auto_num_workers(accelerator="cpu")
    res["workers"] = {"num_workers": choice.num_workers, "reason": choice.reason, "cpus": available_cpus().count}
    return res


def scenario_probe_clocks(out: Path) -> dict[str, Any]:
    """The start-up probe under DDP with a clock per rank that disagrees: rank zero's steps are steady
    (its calibration settles at 3 steps), rank one's keep halving (by itself it would calibrate 8)."""
    from lightning_speedups.callbacks import AutoProbe, FusedOptimizer

    calls = [0]

    def clock() -> float:
        calls[0] += 1
        if RANK == 0 or calls[0] > 40:
            return 0.001 * calls[0]  # steady
        return 0.04 - 0.04 * 0.5 ** calls[0]  # every step half the one before: never settled

    probe = AutoProbe(max_seconds=1e6, max_fraction=None, clock=clock)
    model = TinyBlocks(n=32)
    t = trainer({"strategy": "ddp"}, [FusedOptimizer("auto"), probe], 1)
    t.fit(model)
    result = probe.result
    assert result is not None
    return {
        "probe_steps": result.steps,
        "calibration_steps": result.calibration_steps,
        "rounds": result.rounds,
        "skipped": result.skipped,
        "global_step": t.global_step,
        "params": named_params(model),
    }


def main() -> None:
    scenario, out = sys.argv[1], Path(sys.argv[2])
    result = globals()[f"scenario_{scenario}"](out)
    result.update(rank=RANK, world=WORLD, local_world=LOCAL)
    (out / f"rank{RANK}.json").write_text(json.dumps(result))
    # Lightning keeps the process group after fit: destroyed here, not by the interpreter's exit (see fsdp_shapes_worker)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
