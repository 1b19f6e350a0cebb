"""What a file's code is for, where that changes what a rule reports: a test file, a script's main block, an
evaluation or prediction script, code meant for debugging or profiling. ``ctx.purpose`` of a
:class:`~lightning_speedups.lint.context.FileContext`."""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import cached_property
from typing import Protocol

from lightning_speedups.lint.astutil import DEF_TYPES, mentions_step
from lightning_speedups.lint.basics import FileBasics
from lightning_speedups.lint.guards import INFERENCE_WORDS, is_main_test


class RelatedFiles(Protocol):
    """What :class:`Purpose` asks about the other files of the run (a file linted alone has none)."""

    def related_file_mentions(self, words: tuple[str, ...], test: Callable[[str], bool]) -> bool:
        """A project file this one imports, or one that imports it, mentions one of ``words`` and passes ``test``."""
        ...


class Purpose:
    """What the code of one file is for (``ctx.purpose``): it reads the file's path, text and tree, and asks the
    project whether a related file trains."""

    def __init__(self, file: FileBasics, project: RelatedFiles) -> None:
        self.file = file
        self.project = project

    @cached_property
    def is_test_file(self) -> bool:
        """``test_*.py``, ``*_test.py``, ``conftest.py``, or under a ``tests`` / ``test`` directory."""
        parts = [p.lower() for p in self.file.path.parts]
        if not parts:
            return False
        name = parts[-1]
        if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
            return True
        return any(p in ("tests", "test") for p in parts[:-1])

    def under_main_guard(self, node: ast.AST) -> bool:
        """``node`` is in the body of ``if __name__ == "__main__":``."""
        return any(
            isinstance(anc, ast.If) and any(child is s for s in anc.body) and is_main_test(anc.test)
            for anc, child in self.file.ancestors(node)
        )

    def for_inference(self, node: ast.AST) -> bool:
        """``node`` is in an evaluation / prediction / visualisation script (by the file's name) that shows
        no training step, nor does a project file it imports or that imports it: DataParallel there serves
        inference, not the training run that DDP would replace it in."""
        name = self.file.path.name.lower()
        if mentions_step(self.file.source) or not any(w in name for w in INFERENCE_WORDS):
            return False
        return not self.project.related_file_mentions(("backward(", "training_step", ".step("), mentions_step)

    def is_exempt(self, node: ast.AST, words: tuple[str, ...], flag_words: tuple[str, ...] = ()) -> bool:
        """``node`` is in code meant for debugging/profiling.

        True in test files (:attr:`is_test_file`), in files or directories whose name contains one
        of ``words``, inside a function or class whose name contains one (or a function named
        ``test*``), and in the body (not the ``else``) of an ``if`` whose condition mentions one of
        ``words`` or ``flag_words`` (``if args.debug:``, ``if cfg.detect_anomaly:``).
        """
        cond_words = words + flag_words
        if self.is_test_file:
            return True
        parts = [p.lower() for p in self.file.path.parts]
        if any(w in p for p in parts for w in words):
            return True
        for anc, child in self.file.ancestors(node):
            if isinstance(anc, (*DEF_TYPES, ast.ClassDef)):
                lowered = anc.name.lower()
                if any(w in lowered for w in words) or (isinstance(anc, DEF_TYPES) and lowered.startswith("test")):
                    return True
            elif isinstance(anc, ast.If) and any(child is s for s in anc.body):
                for n in ast.walk(anc.test):
                    text = ""
                    if isinstance(n, ast.Name):
                        text = n.id
                    elif isinstance(n, ast.Attribute):
                        text = n.attr
                    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                        text = n.value
                    if any(w in text.lower() for w in cond_words):
                        return True
        return False
