"""One way to take trial steps and leave the run as it found them (Lightning's finder shape: dump, run,
restore): the weights, buffers, module modes, plain training attributes and optimizer state kept on the
host (:class:`~lightning_speedups.functional.snapshot.TrainingSnapshot`), the random generators isolated
by Lightning's own ``isolate_rng``. The LR range test (:func:`~lightning_speedups.callbacks.lr_schedule.run_range_test`)
and the start-up probe (:class:`~lightning_speedups.callbacks.auto_probe.AutoProbe`) take their steps inside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.utilities.seed import isolate_rng

from lightning_speedups.functional.snapshot import TrainingSnapshot

__all__ = ["trial_steps"]


@contextmanager
def trial_steps(
    module: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer] = (), extra: Sequence[Any] = ()
) -> Iterator[TrainingSnapshot]:
    """Inside, train as you like; on the way out ``module``, ``optimizers``, the plain attributes of ``extra``
    (a DataModule) and every random generator (torch, CUDA, Python, numpy) are back as they were.

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        >>> before = net.weight.clone()
        >>> _ = torch.manual_seed(0); draw = torch.rand(1); _ = torch.manual_seed(0)
        >>> with trial_steps(net, [opt]) as snapshot:  # the steps draw random numbers and change everything
        ...     net(torch.randn(4, 2)).sum().backward(); opt.step()
        >>> torch.equal(net.weight, before), opt.state_dict()["state"], torch.equal(torch.rand(1), draw)
        (True, {}, True)
        >>> snapshot.device_tensors()
        []
    """
    with isolate_rng(include_cuda=True):
        snapshot = TrainingSnapshot.capture(module, optimizers, extra)
        try:
            yield snapshot
        finally:
            snapshot.restore()
