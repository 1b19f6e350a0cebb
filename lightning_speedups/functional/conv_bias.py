"""T16 ``conv-bias``: remove the bias of a convolution whose output feeds nothing but a BatchNorm.

Card
----
* **What it does.** Finds every convolution (``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d``, grouped
  or not, lazy ones once materialised) whose output goes *only* into a BatchNorm (``BatchNorm1d/2d/3d``,
  ``SyncBatchNorm``, lazy ones once materialised; affine or not; with or without running statistics;
  any momentum, including ``momentum=None``), removes the convolution's bias and folds it into the
  BatchNorm's ``running_mean``.
* **Caveats.** Never changes the maths; but the model's parameter set changes, so checkpoints of
  the unchanged model need the fold on load (done automatically, see below) and a model without the
  change cannot load a checkpoint of the changed one without :func:`unfold_conv_bias_state_dict`.
* **Card.** Tip T16 ``conv-bias``: its seeds, expected gain and when it hurts are stated once, in the
  tip's record (``python -m lightning_speedups tips``).

Why the maths is unchanged
--------------------------
Let ``y = conv(x) + b``. In train mode BatchNorm subtracts the batch mean of each channel, so the
per-channel constant ``b`` cancels and the variance is unchanged: the output and every gradient of
the remaining parameters are the same (the gradient of ``b`` itself is zero up to rounding, which is
why the bias is dead weight). The running mean is an affine average of batch means whose weights sum
to one (``(1-m) * rm + m * mean`` or, with ``momentum=None``, a cumulative average), so if the changed
model starts from ``running_mean - b`` it stays exactly ``b`` below the original's forever. In eval
mode BatchNorm computes ``conv(x) + b - running_mean == conv(x) - (running_mean - b)``. A BatchNorm
without running statistics uses batch statistics in both modes, so nothing needs folding. The one
place the two models differ is the dead bias itself: under weight decay or Adam the original's bias
drifts (Adam rescales its zero-ish gradient), which the changed model no longer does.

How the data flow is decided (never from registration order)
-------------------------------------------------------------
1. ``torch.fx`` symbolic trace of the whole model, in train *and* eval mode (``self.training``
   branches are specialised by fx). A pair ``conv -> bn`` is accepted when every call of the conv goes
   straight and only into that BatchNorm, every call of the BatchNorm takes that conv's output, and
   neither module's tensors are read directly (``get_attr``).
2. Where the whole model cannot be traced (data-dependent control flow, ``self.log`` in forward, ...),
   each submodule is traced on its own, recursively; a traced submodule's internal pairs are decided
   from its graph. A LightningModule root (anything with ``training_step``) is never traced as a
   whole, because its step methods may call submodules outside ``forward``.
3. For the direct children of a module that cannot be traced, its source is read (``ast``): a pair
   is accepted only when every mention of the two attributes in the class is the pattern
   ``self.bn(self.conv(...))`` or ``v = self.conv(...)`` immediately followed by ``v = self.bn(v)``.
4. A pair decided inside a submodule must not be reachable from the untraceable code above it: the
   source of every untraceable ancestor is scanned for direct accesses (``self.block.conv1``,
   ``self.layers[0]``, the name as a string). Modules registered under two names, modules with forward
   hooks and uninitialised lazy modules are skipped.
5. ``example_input`` (optional) materialises lazy modules and runs a checked forward in both modes
   (buffers and RNG restored afterwards) whose recorded calls can only *veto* a pair. When that
   forward fails, a warning says so and the decision rests on the traced code alone.

Every biased convolution not changed is listed with its reason in :attr:`ConvBiasPlan.skipped`
(and logged at DEBUG level by :func:`remove_conv_bias`).

Checkpoints
-----------
:func:`remove_conv_bias` registers a ``load_state_dict`` pre-hook on the model (``fold_on_load=True``)
so that ``model.load_state_dict(state_dict_of_the_unchanged_model)`` folds the old biases into the
running means on load. The same fold as a plain function: :func:`fold_conv_bias_state_dict`; the
inverse (a changed checkpoint into an unchanged model): :func:`unfold_conv_bias_state_dict`.

Examples:
    >>> import torch
    >>> from torch import Tensor, nn
    >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    >>> remove_conv_bias(net)
    ['0']
    >>> net[0].bias is None, net[3].bias is not None
    (True, True)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn
from torch.nn.parameter import is_lazy

from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.conv_bias_plan import ConvBiasPlan, plan_conv_bias_removal

log = logging.getLogger(__name__)

__all__ = [
    "apply_conv_bias_plan",
    "fold_conv_bias_state_dict",
    "remap_optimizer_state_without",
    "remove_conv_bias",
    "unfold_conv_bias_state_dict",
]

_HOOK_ATTR = "_lightning_speedups_conv_bias_pairs"

# -------------------------------------------------------------------------------------------- apply


class _FoldOnLoad:
    """``load_state_dict`` pre-hook: fold biases of a checkpoint of the unchanged model on load."""

    def __init__(self) -> None:
        self.pairs: dict[str, str] = {}

    def __call__(self, module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        folded = _fold_in_place(state_dict, self.pairs, prefix)
        if folded:
            warnings.warn(
                f"conv-bias: folded the bias of {len(folded)} conv(s) of a checkpoint of the unchanged "
                "model into the BatchNorm running means on load (outputs are unchanged).",
                stacklevel=2,
            )


def _fold_in_place(state_dict: dict, pairs: Mapping[str, str], prefix: str = "") -> list[str]:
    folded = []
    for conv, bn in pairs.items():
        bkey, rkey = f"{prefix}{conv}.bias", f"{prefix}{bn}.running_mean"
        if bkey not in state_dict:
            continue
        bias = state_dict[bkey]
        if rkey in state_dict:
            rm = state_dict[rkey]
            if rm is not None and not is_lazy(rm):
                state_dict[rkey] = (rm.double() - bias.detach().to(rm.device).double()).to(rm.dtype)
        elif f"{prefix}{bn}.running_var" in state_dict:
            continue  # malformed; leave the key so strict loading reports it
        del state_dict[bkey]
        folded.append(conv)
    return folded


def apply_conv_bias_plan(model: nn.Module, plan: ConvBiasPlan, *, fold_on_load: bool = True) -> list[str]:
    """Apply a :class:`ConvBiasPlan`: fold each bias into its BatchNorm's running mean, remove it.

    Args:
        model: the model the plan was made for.
        plan: from :func:`plan_conv_bias_removal`.
        fold_on_load: register a ``load_state_dict`` pre-hook on ``model`` that folds biases found in a
            state dict of the unchanged model (once per model; later calls extend it).

    Returns:
        The qualified names of the convs changed by this call.
    """
    changed = []
    with torch.no_grad():
        for cname, bname in plan.pairs.items():
            conv, bn = model.get_submodule(cname), model.get_submodule(bname)
            bias: Optional[Tensor] = getattr(conv, "bias", None)
            if bias is None:
                continue
            rm: Optional[Tensor] = getattr(bn, "running_mean", None)
            if rm is not None and not is_lazy(rm):
                rm.copy_((rm.double() - bias.detach().to(rm.device).double()).to(rm.dtype))
            # None unregisters the parameter (state_dict and parameters() lose it); the stub of
            # Module.__setattr__ admits only a Tensor or a Module
            conv.bias = None  # type: ignore[assignment]
            changed.append(cname)
    if fold_on_load and plan.pairs:
        hook = model.__dict__.get(_HOOK_ATTR)
        if hook is None:
            hook = _FoldOnLoad()
            model.__dict__[_HOOK_ATTR] = hook
            model.register_load_state_dict_pre_hook(hook)
        hook.pairs.update(plan.pairs)
    return changed


def remove_conv_bias(model: nn.Module, example_input: Any = None, *, fold_on_load: bool = True) -> list[str]:
    """Remove the bias of every convolution whose output feeds nothing but a BatchNorm.

    The bias is folded into the BatchNorm's running mean, so outputs and gradients of the remaining
    parameters are unchanged in train and eval mode. Idempotent: a second call changes nothing and
    returns ``[]``. For the reasons why a conv kept its bias, use :func:`plan_conv_bias_removal` (the
    reasons are also logged at DEBUG level on the ``lightning_speedups.functional.conv_bias`` logger).

    Args:
        model: any ``nn.Module``.
        example_input: optional forward input (Tensor, tuple of args or dict of kwargs), see
            :func:`plan_conv_bias_removal`.
        fold_on_load: fold biases of checkpoints of the unchanged model when they are loaded into
            ``model`` (a ``load_state_dict`` pre-hook).

    Returns:
        Qualified names of the convolutions changed by this call.

    Examples:
        >>> net = nn.Sequential(nn.Conv3d(3, 8, 3, groups=1), nn.BatchNorm3d(8))
        >>> remove_conv_bias(net), remove_conv_bias(net)
        (['0'], [])
    """
    plan = plan_conv_bias_removal(model, example_input)
    for cname, why in plan.skipped.items():
        log.debug("conv-bias: keeping the bias of '%s': %s", cname, why)
    for note in plan.notes:
        log.debug("conv-bias: %s", note)
    return apply_conv_bias_plan(model, plan, fold_on_load=fold_on_load)


# -------------------------------------------------------------------------------------- checkpoints


def _pairs_of(pairs: Union[ConvBiasPlan, Mapping[str, str]]) -> Mapping[str, str]:
    if isinstance(pairs, ConvBiasPlan):
        return pairs.pairs
    if not isinstance(pairs, Mapping):
        raise SettingTypeError(
            "`pairs` must be a ConvBiasPlan or a mapping conv name -> BatchNorm name "
            f"(e.g. `plan_conv_bias_removal(model).pairs`), got {type(pairs).__name__}."
        )
    return pairs


def fold_conv_bias_state_dict(
    state_dict: Mapping[str, Any], pairs: Union[ConvBiasPlan, Mapping[str, str]], *, prefix: str = ""
) -> dict[str, Any]:
    """Turn a state dict of the unchanged model into one for the changed model.

    Each ``<conv>.bias`` listed in ``pairs`` is subtracted from ``<bn>.running_mean`` and dropped.
    Keys of convs already without bias are left alone, so the function is idempotent. The input is not
    modified.

    Args:
        state_dict: state dict of the unchanged model (or of a changed one: then nothing happens).
        pairs: ``plan.pairs`` (conv name -> BatchNorm name) or the plan itself.
        prefix: key prefix of the model inside ``state_dict`` (e.g. ``"model."``).

    Returns:
        A new dict (tensors not listed are shared with the input).

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
        >>> old = net.state_dict()
        >>> plan = plan_conv_bias_removal(net); _ = apply_conv_bias_plan(net, plan)
        >>> net.load_state_dict(fold_conv_bias_state_dict(old, plan))
        <All keys matched successfully>
    """
    out = dict(state_dict)
    _fold_in_place(out, _pairs_of(pairs), prefix)
    return out


def unfold_conv_bias_state_dict(
    state_dict: Mapping[str, Any], pairs: Union[ConvBiasPlan, Mapping[str, str]], *, prefix: str = ""
) -> dict[str, Any]:
    """Turn a state dict of the changed model into one an unchanged model loads with equal outputs.

    Adds a zero ``<conv>.bias`` for every pair (a zero bias with the shifted running mean is exactly the
    changed model). Idempotent; the input is not modified.

    Args:
        state_dict: state dict of the changed model.
        pairs: ``plan.pairs`` (conv name -> BatchNorm name) or the plan itself.
        prefix: key prefix of the model inside ``state_dict``.
    """
    out = dict(state_dict)
    for conv, bn in _pairs_of(pairs).items():
        key = f"{prefix}{conv}.bias"
        weight = out.get(f"{prefix}{conv}.weight")
        if key in out or weight is None:
            continue
        ref = out.get(f"{prefix}{bn}.running_mean")
        if ref is None:
            ref = out.get(f"{prefix}{bn}.weight")
        if ref is None:
            continue  # no BatchNorm tensor to size the bias by: leave the checkpoint as it is
        n = ref.numel()
        out[key] = torch.zeros(n, dtype=weight.dtype, device=weight.device)
    return out


def remap_optimizer_state_without(
    optimizer_state: Mapping[str, Any], original_names: Sequence[str], removed: Sequence[str]
) -> dict[str, Any]:
    """Drop removed parameters from an optimizer state dict of the unchanged model.

    Works when the optimizer had a single parameter group holding the model's parameters in
    ``named_parameters()`` order (the ``self.parameters()`` idiom): otherwise there is no way to tell
    which saved slot held which parameter and a ``ValueError`` says what to do.

    Args:
        optimizer_state: ``optimizer.state_dict()`` saved with the unchanged model.
        original_names: parameter names of the unchanged model, in ``named_parameters()`` order.
        removed: names of the removed parameters (``<conv>.bias``).
    """
    groups = optimizer_state.get("param_groups", [])
    n_saved = sum(len(g["params"]) for g in groups)
    if len(groups) != 1 or n_saved != len(original_names):
        raise SettingError(
            f"the optimizer state has {len(groups)} parameter group(s) with {n_saved} parameters; the "
            f"unchanged model has {len(original_names)} parameters, so the slots of the removed conv "
            "biases cannot be identified"
        )
    ids = list(groups[0]["params"])
    drop = {ids[i] for i, n in enumerate(original_names) if n in set(removed)}
    keep = [i for i in ids if i not in drop]
    renumber = {old: new for new, old in enumerate(keep)}
    state = {renumber[k]: v for k, v in optimizer_state.get("state", {}).items() if k in renumber}
    group = dict(groups[0], params=[renumber[i] for i in keep])
    return dict(optimizer_state, state=state, param_groups=[group])
