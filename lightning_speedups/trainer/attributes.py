"""What Lightning sets on every ``Trainer`` without declaring it on the class, typed for the pack's code."""

from __future__ import annotations

from typing import Optional, Protocol, Union, cast

from lightning.pytorch import LightningDataModule, Trainer
from lightning.pytorch.callbacks import Callback

__all__ = ["TrainerSetAtInit", "set_at_init"]


class TrainerSetAtInit(Protocol):
    """The attributes Lightning's connectors set on every ``Trainer`` in its ``__init__``, which the class
    does not declare (so the type checker does not know them)."""

    #: CallbackConnector
    callbacks: list[Callback]
    #: DataConnector (``None`` until a fit / validate / test / predict is given one)
    datamodule: Optional[LightningDataModule]
    #: Trainer._init_debugging_flags
    fast_dev_run: Union[int, bool]
    #: LoggerConnector
    log_every_n_steps: int


def set_at_init(trainer: Trainer) -> TrainerSetAtInit:
    """``trainer`` typed with the attributes Lightning sets on it at init (:class:`TrainerSetAtInit`)."""
    return cast(TrainerSetAtInit, trainer)  # every constructed Trainer has them
