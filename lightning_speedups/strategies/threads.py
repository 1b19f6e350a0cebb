"""Put back the intra-op thread count that Lightning's launchers change.

Lightning's process launchers call ``torch.set_num_threads(CPUs // local processes)`` and set
``OMP_NUM_THREADS`` when it is unset, and never restore either; the pack's strategies put both back
in ``teardown``, as the callbacks restore the global flags they touch.
"""

from __future__ import annotations

import os

import torch


class ThreadsRestore:
    """Remembers the thread count and ``OMP_NUM_THREADS`` when made; :meth:`restore` puts them back."""

    def __init__(self) -> None:
        self.threads = torch.get_num_threads()
        self.omp = os.environ.get("OMP_NUM_THREADS")

    def restore(self) -> None:
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        if self.omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = self.omp
