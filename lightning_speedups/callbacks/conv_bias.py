"""T16 ``conv-bias`` callback: fold conv biases into the following BatchNorm before training starts.

Card
----
* **What it does.** In ``setup`` (before ``configure_optimizers`` and before the DDP wrapper), calls
  :func:`~lightning_speedups.functional.conv_bias.plan_conv_bias_removal` on the LightningModule and
  removes the bias of every convolution whose output feeds nothing but a BatchNorm, folding it into the
  BatchNorm's running mean. Outputs and gradients are unchanged in train and eval mode.
* **Caveats.** Code outside the model that reads ``conv.bias`` of a changed conv breaks (it is
  ``None`` now); a model *without* the change cannot load the changed checkpoint unless it uses
  :func:`~lightning_speedups.functional.conv_bias.unfold_conv_bias_state_dict`.
* **Card.** Tip T16 ``conv-bias``: its seeds, expected gain and when it hurts are stated once, in the
  tip's record (``python -m lightning_speedups tips``).

Checkpoints:
    * A checkpoint saved with the callback resumes exactly (the callback changes the fresh model in
      ``setup``, before Lightning loads the weights).
    * A checkpoint of the *unchanged* model (saved without the callback) loads too: a
      ``load_state_dict`` pre-hook folds its biases into the running means, and ``on_load_checkpoint``
      drops the removed biases from the optimizer state when the optimizer held the model's parameters
      in one group in ``parameters()`` order. Otherwise it stops with a message saying what to do.
"""

from __future__ import annotations

from typing import Any, Optional

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_speedups.callbacks.base import SpeedupCallback
from lightning_speedups.errors import SettingTypeError
from lightning_speedups.functional.conv_bias import apply_conv_bias_plan, remap_optimizer_state_without
from lightning_speedups.functional.conv_bias_plan import ConvBiasPlan, forward_args, plan_conv_bias_removal
from lightning_speedups.trainer.hooks import forget_after_configure_model, run_after_configure_model


class ConvBiasRemoval(SpeedupCallback):
    """Remove conv biases that a following BatchNorm cancels (tip T16).

    Args:
        example_input: optional input for the model's ``forward`` (Tensor, tuple of positional
            arguments or dict of keyword arguments). Used to materialise lazy modules and to check the
            traced data flow on a real forward (it can only veto a change). ``None`` uses the
            LightningModule's ``example_input_array`` when it has one.
        fold_on_load: fold the biases of checkpoints of the unchanged model when they are loaded.

    Examples:
        >>> from lightning.pytorch import Trainer
        >>> trainer = Trainer(callbacks=[ConvBiasRemoval()], logger=False)  # doctest: +SKIP

    After ``setup``, :attr:`plan` holds the decision (``plan.pairs`` conv -> BatchNorm, ``plan.skipped``
    conv -> reason) and :attr:`removed` the names of every conv changed so far.
    """

    tip = "T16"
    part = "conv_bias"

    def __init__(self, example_input: Any = None, *, fold_on_load: bool = True) -> None:
        super().__init__()
        if not isinstance(fold_on_load, bool):
            raise SettingTypeError(f"`fold_on_load` must be True or False, got {fold_on_load!r}.")
        if example_input is not None:
            forward_args(example_input)  # raises a TypeError naming `example_input`
        self.example_input = example_input
        self.fold_on_load = fold_on_load
        self.plan: Optional[ConvBiasPlan] = None
        self._pairs: dict[str, str] = {}
        self._loaded_pairs: Optional[dict[str, str]] = None

    @property
    def removed(self) -> list[str]:
        """Qualified names of the convolutions whose bias this callback removed."""
        return list(self._pairs)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # layers built in the model's configure_model exist only after it: the surgery runs right then
        if not run_after_configure_model(pl_module, self, lambda: self._apply(trainer, pl_module, stage)):
            self._apply(trainer, pl_module, stage)

    def _apply(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        example = self.example_input
        if example is None:
            # a property in some libraries (mlcolvar draws torch.randn on every read): reading it must not move the
            # run's random stream, or the run after this part is not the run without it
            with torch.random.fork_rng(devices=[]):
                example = getattr(pl_module, "example_input_array", None)
        plan = plan_conv_bias_removal(pl_module, example)
        if trainer.optimizers and plan.pairs:
            rank_zero_warn(
                "ConvBiasRemoval: the optimizers already exist; the removed conv biases stay in them. "
                "Use the callback from the start of `fit` (its `setup` runs before `configure_optimizers`)."
            )
        changed = apply_conv_bias_plan(pl_module, plan, fold_on_load=self.fold_on_load)
        self.plan = plan
        self._pairs.update({c: plan.pairs[c] for c in changed})
        kept = f", {len(plan.skipped)} kept" if plan.skipped else ""
        if self._pairs:
            n_params = sum(int(getattr(pl_module.get_submodule(b), "num_features", 0)) for b in self._pairs.values())
            self.report(True, f"removed {len(self._pairs)} conv bias(es), {n_params} parameters{kept}")
        elif plan.skipped:
            first, why = next(iter(plan.skipped.items()))
            self.report(False, f"skipped, no conv feeds only a BatchNorm{kept} (e.g. '{first}': {why})", echo=True)
        else:
            self.report(False, "skipped, the model has no convolution with a bias", echo=True)

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        state_dict = checkpoint.get("state_dict", {})
        old = [c for c in self._pairs if f"{c}.bias" in state_dict]
        if not old:
            return
        # Lightning has already loaded the weights (our load_state_dict pre-hook folded the biases);
        # what is left is the optimizer state, loaded later in `restore_training_state`.
        if trainer.state.fn != TrainerFn.FITTING or not checkpoint.get("optimizer_states"):
            return
        removed = [f"{c}.bias" for c in old]
        current = [n for n, _ in pl_module.named_parameters()]
        original = []
        for name in current:
            original.append(name)
            if name.endswith(".weight") and f"{name[: -len('.weight')]}.bias" in removed:
                original.append(f"{name[: -len('.weight')]}.bias")
        shapes = [tuple(p.shape) for p in pl_module.parameters()]
        states = checkpoint["optimizer_states"]
        try:
            if len(states) != 1:
                raise ValueError(f"the checkpoint holds {len(states)} optimizers")
            new = remap_optimizer_state_without(states[0], original, removed)
            for idx, st in new["state"].items():
                for value in st.values():
                    if hasattr(value, "shape") and value.dim() > 0 and tuple(value.shape) != shapes[idx]:
                        raise ValueError("the saved optimizer state does not match the parameter order")
        except ValueError as exc:
            raise RuntimeError(
                f"ConvBiasRemoval: the checkpoint was saved without conv-bias removal ({len(old)} conv "
                f"biases present, e.g. '{removed[0]}') and its optimizer state cannot be remapped: {exc}. "
                "Either resume without ConvBiasRemoval, or start a new fit from its weights only: "
                "`model.load_state_dict(torch.load(path)['state_dict'])` after the callback's setup "
                "(the biases are folded on load) and `trainer.fit(model)` without `ckpt_path`."
            ) from exc
        checkpoint["optimizer_states"] = [new]
        rank_zero_warn(
            f"ConvBiasRemoval: resumed from a checkpoint of the unchanged model; folded {len(old)} conv "
            "bias(es) into the BatchNorm running means and dropped them from the optimizer state."
        )

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"pairs": dict(self._pairs)}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        loaded = dict(state_dict.get("pairs", {}))
        self._loaded_pairs = loaded
        if self._pairs and loaded and loaded != self._pairs:
            rank_zero_warn(
                "ConvBiasRemoval: the checkpoint changed a different set of convs "
                f"({sorted(set(loaded) ^ set(self._pairs))[:3]} differ) than this run; the weights "
                "loaded fine, but check that the model code is the same."
            )

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        forget_after_configure_model(pl_module, self)
