"""Which sources already passed the syntax check: a small cache under the user's cache directory.

Every file given to ``lint`` is syntax-checked (a file that does not parse is an error, exit 2), and
parsing is most of a cold run's CPU time. A file whose exact bytes passed before, under the same
Python (the grammar changes between versions), passes again: its check is skipped. The cache holds
only digests of contents (BLAKE2b, 128 bits), no paths and no code, one a line, in
``$XDG_CACHE_HOME/lightning_speedups/lint-syntax-<python tag>.txt`` (``~/.cache`` when
``XDG_CACHE_HOME`` is unset). ``LIGHTNING_SPEEDUPS_LINT_CACHE=0`` (or ``--no-cache``) turns it off;
a cache that cannot be read or written is simply not used.

Examples:
    >>> import tempfile, pathlib
    >>> cache = SyntaxCache(pathlib.Path(tempfile.mkdtemp()) / "syntax.txt")
    >>> cache.known(b"x = 1\\n")
    False
    >>> cache.add(b"x = 1\\n"); cache.save()
    >>> SyntaxCache(cache.path).known(b"x = 1\\n")
    True
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Optional

MAX_ENTRIES = 100_000  # about 3.3 MB on disk; the oldest go first
_OFF = ("0", "false", "no", "off")


def default_path() -> Optional[Path]:
    """Where the cache lives, or ``None`` when ``LIGHTNING_SPEEDUPS_LINT_CACHE`` turns it off."""
    if os.environ.get("LIGHTNING_SPEEDUPS_LINT_CACHE", "1").strip().lower() in _OFF:
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = sys.implementation.cache_tag or "python"
    return Path(base, "lightning_speedups", f"lint-syntax-{tag}.txt")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class SyntaxCache:
    """Digests of sources that compiled; ``path=None`` is a cache that remembers nothing."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self._old: dict[str, None] = {}
        self._new: dict[str, None] = {}
        if path is not None:
            try:
                self._old = dict.fromkeys(path.read_text(encoding="ascii").split())
            except (OSError, UnicodeError):
                self._old = {}

    @classmethod
    def default(cls, enabled: bool = True) -> SyntaxCache:
        return cls(default_path() if enabled else None)

    def known(self, data: bytes) -> bool:
        """``data`` compiled before (under this Python)."""
        if self.path is None:
            return False
        key = _digest(data)
        return key in self._old or key in self._new

    def add(self, data: bytes) -> None:
        """Remember that ``data`` compiled."""
        if self.path is not None:
            key = _digest(data)
            if key not in self._old:
                self._new[key] = None

    def save(self) -> None:
        """Write the cache if anything was added (atomically; a failure leaves the old file)."""
        if self.path is None or not self._new:
            return
        keys = [k for k in self._old if k not in self._new] + list(self._new)
        keys = keys[-MAX_ENTRIES:]
        import tempfile  # only when there is something to write (its imports cost start-up time)

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".lint-syntax-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="ascii") as out:
                    out.write("\n".join(keys) + "\n")
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            return
        self._old = dict.fromkeys(keys)
        self._new = {}


__all__ = ["MAX_ENTRIES", "SyntaxCache", "default_path"]
