import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _restore_global_torch_state():
    """Every test leaves torch's global flags as it found them (and a test that leaks fails loudly)."""
    before = (
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.is_anomaly_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_grad_enabled(),
    )
    yield
    after = (
        torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(),
        torch.is_anomaly_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_grad_enabled(),
    )
    torch.backends.cudnn.benchmark, _, _, _, _ = before
    torch.set_float32_matmul_precision(before[1])
    torch.autograd.set_detect_anomaly(before[2])
    torch.use_deterministic_algorithms(before[3])
    torch.set_grad_enabled(before[4])
    assert after == before, f"global torch state leaked: {before} -> {after}"


@pytest.fixture(autouse=True)
def _no_process_group_left():
    """A one-process DDP / FSDP fit in a test leaves torch.distributed's default group initialised
    (Lightning keeps it for the process's life); the next test must start without it."""
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------ the projects' CLI drivers (issue 19)
_CLI_TEST = "test_cli_every_preset_then_doctor_and_bench"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the projects' CLI drivers (tests/projects/driver.py) in the background as soon as the
    session knows which of their tests it runs: one driver at a time beside the other tests, so the
    minutes of CLI work overlap the rest of the suite instead of being charged to one test."""
    projects = [
        item.callspec.params["project"]
        for item in session.items
        if item.name.startswith(_CLI_TEST + "[") and hasattr(item, "callspec")
    ]
    if projects and not session.config.getoption("collectonly"):
        from projects.driver import session_drivers

        session_drivers(list(dict.fromkeys(projects)))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if "projects.driver" in sys.modules:
        sys.modules["projects.driver"].stop_session_drivers()
