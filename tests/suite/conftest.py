from __future__ import annotations

import pytest

from suite.runs import Runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The shared 2-step fits (one per case and kind), computed when a test first needs one."""
    return Runs(str(tmp_path_factory.mktemp("suite")))
