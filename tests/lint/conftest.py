# The fixture sources under fixtures/ are named *.py.txt so that pytest never collects or imports them.
collect_ignore_glob = ["fixtures/*"]


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """The linter's syntax cache goes to a temporary XDG_CACHE_HOME, never the user's home."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("LIGHTNING_SPEEDUPS_LINT_CACHE", raising=False)
