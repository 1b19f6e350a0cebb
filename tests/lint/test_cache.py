"""The syntax cache: a file whose exact bytes compiled before is not compiled again; a file that does
not parse is reported on every run; the cache lives under XDG_CACHE_HOME and can be turned off."""

from __future__ import annotations

import builtins
import os
import symtable
from pathlib import Path

import pytest

from lightning_speedups.lint import main
from lightning_speedups.lint.cache import SyntaxCache, default_path

PLAIN = "import os\n\n\ndef helper(x):\n    return os.path.join(x, 'a')\n"  # no rule's trigger: syntax check only
BROKEN = "def helper(x:\n    return x\n"


def _compiles(monkeypatch) -> list[str]:
    """The files syntax-checked: parsed (compile to an ast) or checked through the symbol table."""
    seen: list[str] = []

    def counting(real):
        def check(source, filename, *args, **kwargs):
            seen.append(str(filename))
            return real(source, filename, *args, **kwargs)

        return check

    monkeypatch.setattr(builtins, "compile", counting(builtins.compile))
    monkeypatch.setattr(symtable, "symtable", counting(symtable.symtable))
    return seen


def test_second_run_skips_the_syntax_check_of_unchanged_files(tmp_path, monkeypatch, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "plain.py").write_text(PLAIN)
    seen = _compiles(monkeypatch)
    assert main([str(src)]) == 0
    assert any(p.endswith("plain.py") for p in seen)
    cache_file = default_path()
    assert cache_file is not None and cache_file.is_file()
    assert str(cache_file).startswith(os.environ["XDG_CACHE_HOME"])
    assert "plain" not in cache_file.read_text()  # digests only, no paths
    seen.clear()
    assert main([str(src)]) == 0
    assert not any(p.endswith("plain.py") for p in seen)
    (src / "plain.py").write_text(PLAIN + "y = 2\n")  # changed contents: checked again
    assert main([str(src)]) == 0
    assert any(p.endswith("plain.py") for p in seen)


def test_a_file_that_does_not_parse_is_reported_on_every_run(tmp_path, capsys):
    (tmp_path / "broken.py").write_text(BROKEN)
    for _ in range(2):
        assert main([str(tmp_path)]) == 2
        assert f"{tmp_path / 'broken.py'}:1:" in capsys.readouterr().err
    # a file fixed to the same bytes as a cached one is not an error any more
    (tmp_path / "broken.py").write_text(PLAIN)
    assert main([str(tmp_path)]) == 0


@pytest.mark.parametrize(
    "text", ["def helper(a, a):\n    return a\n", "nonlocal x\n", "def f():\n    x = 1\n    global x\n"]
)
def test_a_scope_error_in_a_file_no_rule_reads_is_reported(tmp_path, text):
    # files no rule triggers on are checked through the symbol table, not compiled: its errors count
    (tmp_path / "plain.py").write_text(text)
    assert main([str(tmp_path), "--no-cache"]) == 2


def test_cache_off_by_flag_or_environment(tmp_path, monkeypatch, capsys):
    (tmp_path / "plain.py").write_text(PLAIN)
    cache_file = default_path()
    assert cache_file is not None
    assert main([str(tmp_path), "--no-cache"]) == 0
    assert not cache_file.exists()
    monkeypatch.setenv("LIGHTNING_SPEEDUPS_LINT_CACHE", "0")
    assert default_path() is None
    assert main([str(tmp_path)]) == 0
    assert not cache_file.exists()


def test_unreadable_or_unwritable_cache_is_not_used(tmp_path):
    bad = tmp_path / "a-file"
    bad.write_text("x")
    cache = SyntaxCache(bad / "sub" / "cache.txt")  # its folder cannot be made
    cache.add(b"x = 1\n")
    cache.save()  # no error
    assert SyntaxCache(bad / "sub" / "cache.txt").known(b"x = 1\n") is False


def test_cache_keeps_the_newest_entries(tmp_path, monkeypatch):
    import lightning_speedups.lint.cache as cache_mod

    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 3)
    path = Path(tmp_path, "c.txt")
    for i in range(5):
        c = SyntaxCache(path)
        c.add(f"x = {i}\n".encode())
        c.save()
    c = SyntaxCache(path)
    assert [c.known(f"x = {i}\n".encode()) for i in range(5)] == [False, False, True, True, True]
