from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from suite.runs import Runs


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: the suite's models are tiny (threads only add overhead), and CI's two
    cores are shared. The flags snapshots are taken inside this setting, so they still see a part
    that changes the thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The shared 2-step fits (one per case and kind), computed when a test first needs one."""
    return Runs(str(tmp_path_factory.mktemp("suite")))


@pytest.fixture(autouse=True)
def _workers_by_forkserver(request: pytest.FixtureRequest) -> Iterator[None]:
    """The loader-worker case starts real worker processes. Forked from this long-lived test process
    (threads of earlier fits, gloo, tqdm's monitor), a worker can deadlock on a lock held at fork time and
    the fit waits forever (seen once in CI); forkserver workers start from a clean server process."""
    import multiprocessing

    if "T02-workers" not in request.node.name:
        yield
        return
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("forkserver", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)
