"""T11 ddp: DistributedDataParallel, never DataParallel.

Card:
    Seeds: A#10, B#18 (claim: one process per GPU, no GIL).
    What it does: ddp_strategy builds Lightning's DDPStrategy with gradient bucket views, a static
    graph and a bf16/fp16 gradient-compression hook on CUDA (said so, and skipped, on gloo); lint
    flags nn.DataParallel.
    Expected gain: near-linear scaling across devices.
    When it hurts: static_graph is wrong when the set of used parameters changes between steps;
    compression hooks run on CUDA only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from lightning_speedups.errors import SettingError
from lightning_speedups.functional.memory import total_memory_bytes
from lightning_speedups.inspection import Facts, Finding, Item
from lightning_speedups.inspection.memory import FIT_SHARE, estimate_fit
from lightning_speedups.inspection.words import fmt_bytes, names_text
from lightning_speedups.strategies import ddp_strategy, fsdp_strategy
from lightning_speedups.strategies.fsdp import (
    fsdp_gradient_error,
    fsdp_gradient_problems,
    fsdp_manual_error,
    manual_layout_problems,
)
from lightning_speedups.tips.record import BuildContext, Setting, SuiteCase, Tip
from lightning_speedups.trainer.internals import ddp_kwargs
from lightning_speedups.trainer.namespace import package_of


@dataclass
class DDPSettings:
    """T11: DistributedDataParallel with gradient bucket views, static graph and gradient compression."""

    enabled: bool = False
    gradient_as_bucket_view: bool = True
    static_graph: bool = True
    compression: Literal["auto", "off", "bf16", "fp16"] = "auto"
    find_unused_parameters: bool = False


@dataclass
class FSDPSettings:
    """T11 under FSDP: Lightning's FSDPStrategy wrapped at the repeated blocks (and at twin sub-networks,
    such as a DQN's target network), sharded checkpoints, mixed precision from ``speedups.precision``;
    checkpoint the blocks with ``checkpointing.targets: [auto]``. Under manual optimization each
    top-level sub-module is its own FSDP root (``training_step`` runs outside every FSDP forward)."""

    enabled: bool = False
    cpu_offload: bool = False
    sharding_strategy: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"] = "FULL_SHARD"
    state_dict_type: Literal["sharded", "full"] = "sharded"


def fit_item(facts: Facts) -> tuple[Optional[Item], str]:
    """Does the model fit one device? ``(item, note)``: an item recommending fsdp (or memory) with the
    figures when it does not, else a note with the figures (empty when there is no model)."""
    if facts.model is None:
        return None, ""
    device = "cuda" if facts.on_cuda else "cpu"
    total = facts.total_memory or total_memory_bytes(device)
    est = estimate_fit(
        facts.model,
        optimizers=facts.optimizers,
        loaders=facts.train_loaders,
        device_total=total,
        peak_memory=facts.peak_memory,
    )
    acts = fmt_bytes(est.activations) if est.activations is not None else "?"
    where = "one GPU" if facts.on_cuda else "this machine's memory (training on the CPU)"
    sharded = "FSDP" in facts.strategy and facts.world_size > 1
    need = est.sharded_total(facts.world_size) if sharded else est.total
    figures = (
        f"parameters {fmt_bytes(est.params)} + gradients {fmt_bytes(est.grads)} + optimizer state"
        f" {fmt_bytes(est.optimizer_state)} ({est.optimizer_note}) + activations {acts} ({est.activations_note})"
        f" = {fmt_bytes(est.total)}"
        + (f", {fmt_bytes(need)} per device under FSDP over {facts.world_size}" if sharded else "")
        + f", against {fmt_bytes(total)} of {where} ({need / total:.0%})"
    )
    if need <= FIT_SHARE * total:
        return None, f"fits: {figures}"
    n = est.devices_needed()
    memory_fix = (
        "--config memory.yaml (speedups.checkpointing.targets: [auto] recomputes the activations of the"
        " repeated blocks, speedups.precision: half halves them), or a smaller batch with"
        " speedups.effective_batch_size to keep the effective batch"
    )
    if n is None:
        return Item(
            "high", f"{figures}: the activations alone do not fit, sharding the model cannot help", memory_fix
        ), ""
    fsdp_fix = f"--config fsdp.yaml with trainer.devices: {n} or more (FSDP over {n}: {fmt_bytes(est.sharded_total(n))} per device)"
    if est.static <= FIT_SHARE * total:  # the model fits; its activations make it too big
        return Item(
            "high", f"{figures}: the activations make it too big for one device", f"{memory_fix}; or {fsdp_fix}"
        ), ""
    return Item("high", f"{figures}: the model does not fit one device", f"{fsdp_fix}; with {memory_fix}"), ""


def check(facts: Facts) -> Finding:
    """T11 ddp: DataParallel in the model, unused GPUs, DDP without its fast settings, and whether the
    model fits one device (parameters, gradients, optimizer state and measured activations)."""
    tip = "T11"
    if not facts.collected:
        return Finding.not_checked(tip, facts.run_note() or "the trainer was not set up")
    items: list[Item] = []
    fit, fit_note = fit_item(facts)
    if fit is not None:
        items.append(fit)
    if facts.data_parallel_modules:
        items.append(
            Item(
                "high",
                f"the model wraps {names_text(facts.data_parallel_modules)} in nn.DataParallel: one process drives every GPU"
                " through the GIL and copies the model each step",
                "remove nn.DataParallel and train with DDP: trainer.devices: N with --config ddp.yaml (speedups.ddp.enabled: true)",
            )
        )
    used = facts.num_devices * facts.num_nodes
    if facts.configured_devices is not None:
        used_note = f" (the config asks for devices={facts.configured_devices}; the doctor ran one)"
    else:
        used_note = ""
    if facts.on_cuda and facts.cuda_count > facts.num_devices and facts.configured_devices is None:
        items.append(
            Item(
                "medium",
                f"{facts.cuda_count} CUDA devices visible, training uses {facts.num_devices}",
                f"trainer.devices: {facts.cuda_count} with --config ddp.yaml (speedups.ddp.enabled: true)",
            )
        )
    strategy = facts.strategy_obj
    if strategy is not None and "DDP" in facts.strategy and (used > 1 or facts.configured_devices is not None):
        kwargs = ddp_kwargs(strategy)
        if not kwargs.get("gradient_as_bucket_view"):
            items.append(
                Item(
                    "low",
                    f"{facts.strategy} without gradient_as_bucket_view{used_note}: gradients are copied into the"
                    " communication buckets every step",
                    "speedups.ddp.enabled: true (bucket views, static graph, compression hooks on CUDA)",
                )
            )
    notes = [fit_note] if fit_note else []
    fits = f"; {fit_note}" if fit_note else ""
    if items:
        return Finding.from_items(tip, items, notes)
    if used > 1 or facts.configured_devices is not None:
        return Finding.ok(tip, f"{facts.strategy} over {facts.configured_devices or used} device(s){used_note}{fits}")
    return Finding.ok(
        tip, f"one process on one {facts.device_type} device ({facts.strategy}): nothing to distribute{fits}"
    )


def fsdp_conflicts(s: Any) -> list[str]:
    """Why the section's other settings cannot run under FSDP (empty when they can)."""
    out = []
    if s.ddp.enabled:
        out.append(
            "`speedups.ddp.enabled` and `speedups.fsdp.enabled` are both true: a run has one strategy."
            " FSDP already all-reduces (reduce-scatters) gradients; turn one of them off"
            " (--config ddp.yaml or --config fsdp.yaml, not both)"
        )
    if s.grad_clip.algorithm == "agc":
        out.append(
            "`speedups.grad_clip.algorithm: agc` does not work under FSDP: AGC clips each parameter tensor by its"
            " own norm, and each rank holds a shard of a flat parameter, not whole tensors. Use"
            " `speedups.grad_clip.algorithm: norm` (FSDP's clip_grad_norm_, one norm over every shard) or"
            " `value` with fsdp"
        )
    return out


def trainer_kwargs(s: Any, ctx: BuildContext) -> None:
    """The Trainer arguments T11 sets before the Trainer exists."""
    f = s.fsdp
    layout = manual_layout_problems(ctx.model) if f.enabled and ctx.manual_optimization else []
    if layout:  # the strategy would refuse it in setup; with the model known, skip with the reason
        ctx.note("fsdp (T11)", False, f"skipped, {fsdp_manual_error(layout).removeprefix('speedups.fsdp: ')}")
        return
    gradients = fsdp_gradient_problems(ctx.model) if f.enabled and ctx.model is not None else []
    if gradients:  # likewise: refused in setup without the model, skipped with the reason when it is known
        why = fsdp_gradient_error(gradients).removeprefix("speedups.fsdp: ")
        ctx.note("fsdp (T11)", False, f"skipped, {why}")
        return
    if f.enabled:
        problems = fsdp_conflicts(s)
        if problems:
            raise SettingError("; ".join(problems) + ".")
        sharded, reason = fsdp_strategy(
            accelerator=ctx.accelerator,
            cpu_offload=f.cpu_offload,
            sharding_strategy=f.sharding_strategy,
            state_dict_type=f.state_dict_type,
            namespace=ctx.namespace,
        )
        ctx.trainer_kwargs["strategy"] = sharded
        ctx.note("fsdp (T11)", True, reason)
        return
    d = s.ddp
    if not d.enabled:
        return
    strategy, reason = ddp_strategy(
        accelerator=ctx.accelerator,
        gradient_as_bucket_view=d.gradient_as_bucket_view,
        static_graph=d.static_graph,
        compression=d.compression,
        find_unused_parameters=d.find_unused_parameters,
        namespace=ctx.namespace,
    )
    ctx.trainer_kwargs["strategy"] = strategy
    ctx.note("ddp (T11)", True, reason)


def _ddp(trainer: Any, model: Any, callbacks: Any) -> None:
    # the Trainer's own package's DDPStrategy (a pytorch_lightning Trainer takes no other)
    assert isinstance(trainer.strategy, package_of(trainer).strategies.DDPStrategy), type(trainer.strategy).__mro__


def _fsdp(trainer: Any, model: Any, callbacks: Any) -> None:
    assert isinstance(trainer.strategy, package_of(trainer).strategies.FSDPStrategy), type(trainer.strategy).__mro__


TIP = Tip(
    id="T11",
    slug="ddp",
    title="DistributedDataParallel, never DataParallel",
    seeds=("A#10", "B#18"),
    claim="one process per GPU, no GIL",
    does="ddp_strategy builds Lightning's DDPStrategy with gradient bucket views, a static graph and a bf16/fp16 gradient-compression hook on CUDA (said so, and skipped, on gloo); lint flags nn.DataParallel.",
    gain="near-linear scaling across devices",
    hurts="static_graph is wrong when the set of used parameters changes between steps; compression hooks run on CUDA only",
    check=check,
    settings=(
        Setting("ddp", DDPSettings, factory=DDPSettings, doc="T11. DDP strategy settings.", on=lambda v: v.enabled),
        Setting(
            "fsdp",
            FSDPSettings,
            factory=FSDPSettings,
            doc="T11. FSDP strategy settings (models that do not fit one device).",
            on=lambda v: v.enabled,
        ),
    ),
    trainer_kwargs=trainer_kwargs,
    parts=(
        ddp_strategy,
        fsdp_strategy,
    ),
    lint_rules=("LS301",),
    not_timed="needs several devices; bench times one device (use the ddp preset on the real machine)",
    suite=(
        SuiteCase(
            "one_process",
            settings={"ddp.enabled": True},
            kinds=("cnn",),
            trainer={"devices": 1},
            acted=_ddp,
            compose=False,
        ),
        SuiteCase(
            "fsdp_one_process",
            settings={"fsdp.enabled": True},
            kinds=("cnn", "transformer"),
            trainer={"devices": 1},
            acted=_fsdp,
            compose=False,
        ),
    ),
)
