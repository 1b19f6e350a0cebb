"""The training steps and loops of a file: its functions and the calls of them, which functions perform a
training step (:meth:`Loops.is_step_function`), and which loops are training loops, loops over epochs, over
batches or environment rollouts (see :mod:`~lightning_speedups.lint.where` for what each means).
``ctx.loops`` of a :class:`~lightning_speedups.lint.context.FileContext`."""

from __future__ import annotations

import ast
import bisect
from functools import cached_property
from typing import Optional

from lightning_speedups.lint.astutil import DEF_TYPES, LOOP_TYPES, child_nodes, terminal_name
from lightning_speedups.lint.basics import FileBasics
from lightning_speedups.lint.guards import STEP_COUNT_WORDS, text, unwrap, words
from lightning_speedups.lint.runs import FuncDef, Loop, is_step_call

#: Parts of a name (split at "_", "." and other punctuation) that make a loop a loop over batches.
_LOADER_PARTS = frozenset({"loader", "loaders", "dataloader", "dataloaders", "batch", "batches", "dl", "dls"})


class Loops:
    """The functions, step functions and loops of one file (each answer worked out once)."""

    def __init__(self, file: FileBasics) -> None:
        self.file = file
        #: memo of :meth:`is_training_loop`
        self._training_loop: dict[ast.AST, bool] = {}

    # ------------------------------------------------------------------ functions of this file
    @cached_property
    def functions(self) -> dict[str, list[FuncDef]]:
        """Functions and methods defined in the file, by name (module level and class bodies)."""
        found: dict[str, list[FuncDef]] = {}
        file = self.file
        for node in [*file.tree.body, *(n for c in file.classes for n in c.body)]:
            if isinstance(node, DEF_TYPES):
                found.setdefault(node.name, []).append(node)
        return found

    @cached_property
    def call_sites(self) -> dict[str, list[ast.Call]]:
        """Calls of a bare name or of ``self.<name>`` / ``cls.<name>``, by name."""
        found: dict[str, list[ast.Call]] = {}
        functions = self.functions
        for call in self.file.calls:
            func = call.func
            if isinstance(func, ast.Name):
                name = func.id
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in ("self", "cls")
            ):
                name = func.attr
            else:
                continue
            if name in functions:
                found.setdefault(name, []).append(call)
        return found

    def helper(self, call: ast.Call) -> Optional[FuncDef]:
        """The function of this file that ``call`` calls (by name / ``self.name``), if only one is."""
        func = call.func
        if isinstance(func, ast.Name):
            name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            name = func.attr
        else:
            return None
        defs = self.functions.get(name)
        return defs[0] if defs and len(defs) == 1 else None

    def calls_step(self, stmts: list, depth: int) -> bool:
        """``stmts`` call backward / an optimizer step, not counting nested loops (closures and step
        functions of this file they call do count)."""
        stack = list(stmts)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.ClassDef, ast.Lambda, *LOOP_TYPES)):
                continue
            if isinstance(node, ast.Call):
                if is_step_call(node):  # loss_scaler(loss, optimizer, ...) too: timm's NativeScaler steps
                    return True
                if depth < 3:
                    fn = self.helper(node)
                    if fn is not None and self.is_step_function(fn, depth + 1):
                        return True
            stack.extend(child_nodes(node))
        return False

    def step_candidates(self) -> tuple[set[FuncDef], set[FuncDef]]:
        """``(candidates, listed)``: of the file's module-level functions and methods (``listed``), those
        that can be step functions: their lines hold a backward / optimizer or scaler step call, or they
        call such a function of this file by name (as deep as :meth:`calls_step` follows helpers). A
        superset, found from the call list without walking any body."""
        return self.file.memo("step_cands", self._find_step_candidates)

    def _find_step_candidates(self) -> tuple[set[FuncDef], set[FuncDef]]:
        listed = {fn for defs in self.functions.values() for fn in defs}
        lines = sorted(call.lineno for call in self.file.calls if is_step_call(call))
        cands: set[FuncDef] = set()
        if lines:
            for fn in listed:
                i = bisect.bisect_left(lines, fn.lineno)
                if i < len(lines) and lines[i] <= (fn.end_lineno or fn.lineno):
                    cands.add(fn)
            sites = self.call_sites
            for _ in range(3):
                added = set()
                for name in {fn.name for fn in cands}:
                    for call in sites.get(name, ()):
                        for fn in listed:
                            if fn not in cands and fn.lineno <= call.lineno <= (fn.end_lineno or fn.lineno):
                                added.add(fn)
                if not added:
                    break
                cands |= added
        return cands, listed

    def is_step_function(self, fn: FuncDef, depth: int = 0) -> bool:
        """``fn`` performs one training step: it calls backward / ``optimizer.step()`` outside loops."""
        memo: dict[FuncDef, bool] = self.file.memo("step_fn", dict)
        if fn in memo:
            return bool(memo[fn])
        cands, listed = self.step_candidates()
        if fn in listed and fn not in cands:
            memo[fn] = False
            return False
        memo[fn] = False  # a recursive call is not a step
        memo[fn] = self.calls_step(fn.body, depth)
        return memo[fn]

    def nested_loops(self, loop: Loop) -> list[Loop]:
        """The loops directly nested in ``loop`` (not in a nested function, nor inside those loops)."""
        memo: dict[Loop, list[Loop]] = self.file.memo("nested", dict)
        cached = memo.get(loop)
        if cached is None:
            cached = memo[loop] = self._find_nested_loops(loop)
        return cached

    def _find_nested_loops(self, loop: Loop) -> list[Loop]:
        out: list[Loop] = []
        stack: list[ast.AST] = list(loop.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.ClassDef, ast.Lambda, *DEF_TYPES)):
                continue
            if isinstance(node, LOOP_TYPES):
                out.append(node)
                continue
            stack.extend(child_nodes(node))
        return out

    @staticmethod
    def is_epoch_loop(loop: Loop) -> bool:
        if isinstance(loop, ast.While):
            # `while step < max_steps and it.epoch < epochs:` counts steps: a step loop with an epoch cap
            test = text(loop.test)
            return "epoch" in test and "step" not in test and "iter" not in test
        if "epoch" in text(loop.target):
            return True
        # `range(epochs)` counts epochs; `range(cfg.epoch_iters)` / `range(steps_per_epoch)` counts steps in one
        parts = words(text(loop.iter))
        return any("epoch" in w for w in parts) and not any(w in STEP_COUNT_WORDS for w in parts)

    @staticmethod
    def is_batch_loop(loop: Loop) -> bool:
        if isinstance(loop, ast.While):
            return False
        parts = words(text(unwrap(loop.iter)))
        # whole name parts (train_loader, val_dl, batches), not substrings (batch2model_input: input keys)
        return any(w in _LOADER_PARTS or w.endswith("loader") for w in parts) or "batch" in words(text(loop.target))

    def is_training_loop(self, loop: Loop) -> bool:
        """``loop`` runs once per optimizer step (see the module docstring)."""
        cached = self._training_loop.get(loop)
        if cached is not None:
            return cached
        self._training_loop[loop] = False
        if self.is_epoch_loop(loop):
            return False  # one pass per epoch (in full-batch training a step is an epoch)
        found = self.calls_step(loop.body, 0)
        if not found:
            found = any(self.is_training_loop(n) and not self.is_batch_loop(n) for n in self.nested_loops(loop))
        self._training_loop[loop] = found
        return found

    def is_rollout_loop(self, loop: Loop) -> bool:
        """``loop`` steps an environment once per iteration (``envs.step(action)`` in its own body, not in
        a nested loop or function): RL rollouts run as often as training steps, or more."""
        memo: dict[Loop, bool] = self.file.memo("rollout", dict)
        cached = memo.get(loop)
        if cached is None:
            cached = False
            stack: list[ast.AST] = list(loop.body)
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.ClassDef, ast.Lambda, *DEF_TYPES, *LOOP_TYPES)):
                    continue
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step"
                    and "env" in terminal_name(node.func.value).lower()
                ):
                    cached = True
                    break
                stack.extend(child_nodes(node))
            memo[loop] = cached
        return cached

    def runs_training_loop(self, fn: FuncDef) -> str:
        """``"epoch"``: ``fn`` runs a training loop per call (a train_one_epoch: its own body runs about
        once per epoch); ``"whole"``: it runs the loop over epochs around the training loop (a main /
        train function: its own body is the run's setup); ``""``: neither."""
        found = ""
        stack: list[ast.AST] = list(fn.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.ClassDef, ast.Lambda, *DEF_TYPES)):
                continue
            if isinstance(node, LOOP_TYPES):
                if self.is_training_loop(node):
                    return "epoch"
                if self.contains_training_loop(node):
                    found = "whole"
                continue
            stack.extend(child_nodes(node))
        return found

    def contains_training_loop(self, loop: Loop) -> bool:
        memo: dict[Loop, bool] = self.file.memo("contains", dict)
        cached = memo.get(loop)
        if cached is None:
            memo[loop] = False
            cached = memo[loop] = any(
                self.is_training_loop(n) or self.contains_training_loop(n) for n in self.nested_loops(loop)
            )
        return cached

    def inner_step_loop(self, loop: Loop) -> bool:
        """``loop`` is not over batches and sits inside a loop that is (a loop over optimizers or
        micro-batches in the batch loop): its index counts within one step."""
        if self.is_batch_loop(loop):
            return False
        for anc, _ in self.file.ancestors(loop):
            if isinstance(anc, DEF_TYPES):
                return False
            if isinstance(anc, LOOP_TYPES) and (self.is_training_loop(anc) or self.is_batch_loop(anc)):
                return True
        return False
