"""Does the model fit one device? Parameters, gradients, optimizer state and measured activations
against the device's memory, and what FSDP over several devices would leave per device.

The doctor's T11 check reads :func:`estimate_fit`; the figures are bytes:

- parameters: every parameter's storage, at its dtype;
- gradients: one per trainable parameter, same size (``set_to_none`` frees them between steps, but
  they all exist at the optimizer step);
- optimizer state: the optimizer's own state tensors when it has stepped, else the usual count for
  its class (Adam / AdamW / Adamax / NAdam / RAdam: 2 per parameter, SGD with momentum / RMSprop /
  Adagrad: 1, plain SGD: 0, others: 2, said so);
- activations: the tensors autograd saves for backward in one training step on one real batch
  (``saved_tensors_hooks``, unique storages), at the precision that step ran in; on CUDA the measured
  peak of the doctor's steps takes over when it is larger.

Under FSDP with N processes, parameters, gradients and optimizer state are sharded (1/N each);
activations are not. The estimate leaves out allocator fragmentation, kernel workspaces and the
framework's own buffers, so a model "fits" only below :data:`FIT_SHARE` of the device.

Examples:
    >>> from torch import nn
    >>> import torch
    >>> est = estimate_fit(nn.Linear(1000, 1000), optimizers=[torch.optim.Adam(nn.Linear(1, 1).parameters())],
    ...                    device_total=10_000_000, activations=1_000_000)
    >>> est.params, est.grads, est.optimizer_state
    (4004000, 4004000, 8008000)
    >>> est.fits, est.sharded_total(4) < 10_000_000 * FIT_SHARE
    (False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["FIT_SHARE", "FitEstimate", "estimate_fit", "measure_saved_activations", "optimizer_state_bytes"]

#: A model fits one device when the estimate stays below this share of the device's memory.
FIT_SHARE = 0.85

_TWO_STATES = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adafactor")
_ONE_STATE = ("RMSprop", "Adagrad", "Adadelta", "ASGD", "Rprop")


@dataclass(frozen=True)
class FitEstimate:
    """The memory one training process needs, against one device's memory (bytes)."""

    params: int
    grads: int
    optimizer_state: int
    optimizer_note: str
    activations: Optional[int]
    activations_note: str
    device_total: int

    @property
    def static(self) -> int:
        """Parameters, gradients and optimizer state (what FSDP shards)."""
        return self.params + self.grads + self.optimizer_state

    @property
    def total(self) -> int:
        """Everything on one device."""
        return self.static + (self.activations or 0)

    @property
    def fits(self) -> bool:
        return self.total <= FIT_SHARE * self.device_total

    def sharded_total(self, processes: int) -> int:
        """Per device under FSDP FULL_SHARD over ``processes`` (activations are not sharded)."""
        return -(-self.static // max(1, processes)) + (self.activations or 0)

    def devices_needed(self) -> Optional[int]:
        """The fewest FSDP processes that bring each device under the fit share, or ``None`` when the
        activations alone do not fit (sharding cannot help: checkpoint them or shrink the batch)."""
        room = FIT_SHARE * self.device_total - (self.activations or 0)
        if room <= 0:
            return None
        return max(1, int(-(-self.static // room)))


def optimizer_state_bytes(optimizers: Sequence[Any], params: Sequence[nn.Parameter]) -> tuple[int, str]:
    """Bytes of optimizer state: measured when the optimizers hold state, else counted by class."""
    measured, seen = 0, set()
    for opt in optimizers:
        opt = getattr(opt, "optimizer", opt)  # LightningOptimizer
        for state in getattr(opt, "state", {}).values():
            for value in state.values() if isinstance(state, dict) else ():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    ref = StorageWeakRef(value.untyped_storage())
                    if ref.cdata not in seen:
                        seen.add(ref.cdata)
                        measured += value.untyped_storage().nbytes()
    if measured:
        return measured, "measured in the optimizer's state"
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    if not optimizers:
        return 2 * trainable, "no optimizer seen: counted as Adam (2 states per parameter)"
    opt = getattr(optimizers[0], "optimizer", optimizers[0])
    name = type(opt).__name__
    if name in _TWO_STATES:
        return 2 * trainable, f"{name}: 2 states per parameter"
    if name == "SGD":
        momentum = any(g.get("momentum", 0) for g in getattr(opt, "param_groups", []))
        return (trainable, "SGD with momentum: 1 state per parameter") if momentum else (0, "plain SGD: no state")
    if name in _ONE_STATE:
        return trainable, f"{name}: 1 state per parameter"
    return 2 * trainable, f"{name}: counted as 2 states per parameter"


def measure_saved_activations(step: Callable[[], Any]) -> int:
    """Bytes of the unique tensor storages autograd saves for backward while ``step()`` runs."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, nn.Parameter) or getattr(t, "_is_param", False):
            return t
        try:
            storage = t.untyped_storage()
            seen.setdefault(StorageWeakRef(storage).cdata, storage.nbytes())
        except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, fake)
            seen.setdefault(id(t), t.numel() * t.element_size())
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(seen.values())


def _step_activations(model: Any, loaders: Sequence[Any]) -> tuple[Optional[int], str]:
    """Run one training step's forward on the first batch of the first train loader, measuring."""
    if model is None or not loaders or not hasattr(model, "training_step"):
        return None, "activations not measured (no model or train loader)"
    try:
        batch = next(iter(loaders[0]))
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        transfer = getattr(model, "transfer_batch_to_device", None)
        batch = transfer(batch, device, 0) if transfer is not None else batch
        saved = {name: model.__dict__.get(name) for name in ("log", "log_dict")}
        model.log = lambda *a, **k: None  # self.log needs the fit loop's result collection
        model.log_dict = lambda *a, **k: None
        was_training = model.training
        model.train()
        try:
            nbytes = measure_saved_activations(lambda: model.training_step(batch, 0))
        finally:
            model.train(was_training)
            for name, value in saved.items():
                if value is None:
                    model.__dict__.pop(name, None)
                else:
                    model.__dict__[name] = value
    except Exception as err:
        return None, f"activations not measured ({type(err).__name__}: {str(err)[:80]})"
    size = getattr(loaders[0], "batch_size", None)
    return nbytes, f"saved for backward in one step{f' on a batch of {size}' if size else ''}"


def estimate_fit(
    model: Any,
    *,
    optimizers: Sequence[Any] = (),
    loaders: Sequence[Any] = (),
    device_total: int,
    activations: Optional[int] = None,
    peak_memory: Optional[int] = None,
) -> FitEstimate:
    """The memory one process of ``model``'s training needs, against ``device_total`` bytes.

    Args:
        model: the (Lightning) module.
        optimizers: its optimizers (their state is measured when they have stepped).
        loaders: train loaders: one batch is run through ``training_step`` to measure the activations,
            unless ``activations`` is given.
        device_total: the device's memory.
        activations: bytes of activations, when measured elsewhere.
        peak_memory: a measured peak of real steps (CUDA), used when larger than the sum.
    """
    params = list(model.parameters()) if model is not None else []
    pbytes = sum(p.numel() * p.element_size() for p in params)
    gbytes = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    obytes, onote = optimizer_state_bytes(list(optimizers), params)
    if activations is not None:
        anote = "given"
    else:
        activations, anote = _step_activations(model, list(loaders))
    if peak_memory is not None and peak_memory > pbytes + gbytes + obytes + (activations or 0):
        activations = peak_memory - (pbytes + gbytes + obytes)
        anote = "from the measured peak of the doctor's steps"
    return FitEstimate(pbytes, gbytes, obytes, onote, activations, anote, int(device_total))
