"""Lightning's private attributes the pack reads outside its trial steps and hook patches, each in one
function that says which public alternative Lightning lacks (the trial steps' own private accesses are in
:mod:`~lightning_speedups.trainer.trial_steps` and :mod:`~lightning_speedups.trainer.batch_trials`, commented
where they are). A test keeps every other module of the pack off Lightning's private names."""

from __future__ import annotations

from typing import Any, Optional

# private: Lightning's own way to re-create a loader (and the wrapping that lets it inject samplers later); the
# public ``DataLoader(...)`` call would lose the user's subclass arguments Lightning recorded at construction
from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls

__all__ = ["data_source", "ddp_kwargs", "detect_anomaly", "reinstantiate_loader"]


def data_source(loop: Any) -> Optional[Any]:
    """The ``_DataLoaderSource`` a loop requests its loaders from (``None`` when it has none)."""
    # private: Lightning has no public way to see or replace the loaders a loop will request, nor to tell
    # loaders passed to fit() from the model's own
    return getattr(loop, "_data_source", None)


def ddp_kwargs(strategy: Any) -> dict[str, Any]:
    """The keyword arguments a ``DDPStrategy`` passes to ``DistributedDataParallel`` (``{}`` for other strategies)."""
    # private: the strategy keeps them for its wrapper and exposes no accessor
    return dict(getattr(strategy, "_ddp_kwargs", None) or {})


def detect_anomaly(trainer: Any) -> bool:
    """Whether ``Trainer(detect_anomaly=True)`` was given."""
    # private: the Trainer stores its init flag without a public property
    return bool(getattr(trainer, "_detect_anomaly", False))


def reinstantiate_loader(loader: Any, *args: Any, **kwargs: Any) -> Any:
    """``type(loader)(*args, **kwargs)`` as Lightning re-creates loaders (keeping its wrapping of the class)."""
    return _reinstantiate_wrapped_cls(loader, *args, **kwargs)
