"""Where code runs and how often, as far as the file shows: per batch, per sample, every N batches,
per epoch, once, or only on an error.

``ctx.where`` of a :class:`~lightning_speedups.lint.context.FileContext`. The answer for a node is a
:class:`~lightning_speedups.lint.runs.Runs`; rules turn it into a severity (a cost paid once per run is not a
warning). Which functions are step functions and which loops are training loops is
:class:`~lightning_speedups.lint.loops.Loops`'s to say; the callers in other files come from the project.

- **per batch**: the body of ``training_step`` / ``validation_step`` / ``test_step`` /
  ``predict_step`` / ``forward`` (a method), of a *training loop*, of a *step function* (a function
  that itself calls ``backward`` or ``optimizer.step()`` outside any loop), and of a helper that is
  called from one of these (followed through the file's own functions and methods).
- A **training loop** is a ``for`` / ``while`` loop whose body calls ``.backward()`` /
  ``manual_backward()`` / ``<opt>.step()`` / ``scaler.step()``, directly, in a closure defined in
  the loop, through a step function it calls, or in a nested loop that is not itself the batch loop
  (a loop over optimizers or micro-batches inside the batch loop); a loop over epochs (its target or
  iterable mentions ``epoch``) is never one, even in full-batch training where a step is an epoch.
- **every N batches**: under ``if ... % N ...:`` inside per-batch code.
- **first or last batch only**: under ``if batch_idx == 0:`` (a counter: ``batch_idx``, ``i``, ``step``,
  also ``< 3``, ``== len(loader) - 1``) inside per-batch code, unless a plain loop in between binds the counter: once per pass
  over the batches, reported as per epoch.
- **per epoch**: a loop over epochs (its target or iterable mentions ``epoch``), or a loop around a
  training loop, outside the inner loop; Lightning's ``on_*epoch*`` / ``*_epoch_end`` hooks.
- **once**: module level, class bodies, ``__init__`` / ``setup`` / ``configure_*`` / ``build_*`` /
  ``main`` / ``reset_parameters``, lazy initialisation (``if x is None:`` / ``if len(state) == 0:``),
  functions called only from such code.
- **on error**: a ``raise`` / ``assert`` message, an ``except`` body, an ``if`` body that raises or
  exits.
- **unknown**: anything else (a function whose callers this file does not show).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional, Protocol

from lightning_speedups.lint.astutil import DEF_TYPES, LOOP_TYPES
from lightning_speedups.lint.basics import FileBasics
from lightning_speedups.lint.facts import Facts
from lightning_speedups.lint.guards import (
    binds,
    block_of,
    every_n_test,
    exits,
    first_batch_test,
    flag_test,
    is_error_branch,
    is_lazy_init,
    is_main_test,
    periodic_skip,
    skips_unless_every_n,
    skips_unless_first,
    text,
)
from lightning_speedups.lint.loops import Loops
from lightning_speedups.lint.runs import (
    EVERY_N,
    ON_ERROR,
    ONCE,
    ORDER,
    PER_BATCH,
    PER_EPOCH,
    PER_SAMPLE,
    STEP_METHODS,
    TRAIN_BATCH_HOOKS,
    UNKNOWN,
    FuncDef,
    Runs,
    flagged,
)
from lightning_speedups.lint.scopes import Scopes

_BATCH_METHODS = frozenset({"test_step", "predict_step", "forward", "collate_fn", "collate"})
_SAMPLE_METHODS = frozenset({"__getitem__", "__getitems__", "__next__"})
_ONCE_NAMES = frozenset(
    "__init__ __post_init__ setup prepare_data configure_optimizers configure_model configure_sharded_model "
    "reset_parameters main cli_main teardown on_fit_start on_fit_end on_train_start on_train_end "
    "init_weights _init_weights load_state_dict from_pretrained".split()
)
_ONCE_PREFIXES = ("build_", "_build_", "setup_", "_setup_", "init_", "_init_", "create_model", "get_model", "load_")
#: Parts of a name (split at "_", "." and other punctuation) that make a loop a loop over batches.

#: How many calls deep a line's frequency is followed (memoised per function, so this is cheap).
_MAX_DEPTH = 24


class ProjectView(Protocol):
    """What :class:`Where` asks about the other files of the ``lint`` run (a file linted alone has none).
    :class:`~lightning_speedups.lint.context.ProjectLink` answers, through the file's project."""

    def callers(self, fn: FuncDef) -> Sequence[tuple[Where, ast.Call]]:
        """The calls of ``fn`` in every file of the run, each with the :class:`Where` of its file."""
        ...

    def file_count(self) -> int:
        """How many files the run lints (1 for a file linted alone)."""
        ...

    def near_gpu_module(self) -> bool:
        """A project module this file imports, or one that imports it, uses CUDA."""
        ...

    def hot_functions(self) -> Optional[set[ast.AST]]:
        """The functions a training step of the run reaches (``None``: not worked out, any may be)."""
        ...


class Where:
    """How often the lines of one file run (``ctx.where``): each function's frequency is worked out once.

    It reads the file (:class:`~lightning_speedups.lint.basics.FileBasics`), the bindings of its scopes (an
    every-N test stored in a variable), its step functions and loops, whether it never leaves the CPU, and
    asks the project (:class:`ProjectView`) for the callers of a function in other files."""

    def __init__(self, file: FileBasics, scopes: Scopes, loops: Loops, facts: Facts, project: ProjectView) -> None:
        self.file = file
        self.scopes = scopes
        self.loops = loops
        self.facts = facts
        self.project = project
        #: memo of :meth:`function_runs`
        self._runs: dict[ast.AST, Runs] = {}

    def every_n_flag(self, test: ast.AST) -> bool:
        """``if is_log_step:`` where every earlier binding of the name in its scope is an every-N test
        (``is_log_step = (i % log_every == 0) or last_batch``): the test stored in a variable; also
        ``flag and ...`` with such a flag, and ``flag_a or flag_b`` when each side is one."""
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And):
                return any(self.every_n_flag(v) for v in test.values)
            return all(every_n_test(v) or self.every_n_flag(v) for v in test.values)
        if not isinstance(test, ast.Name):
            return False
        prior = self.scopes.bindings_before(test)
        if not prior:
            return False
        return all(b.kind == "value" and b.value is not None and every_n_test(b.value) for b in prior)

    def runs(self, node: ast.AST, depth: int = 0) -> Runs:
        """How often ``node`` runs, as far as the file shows."""
        every_n = False
        flag = ""  # under a switch of the user's configuration
        leaves: Optional[ast.If] = None  # a branch ending in `break`: it ends the loop it is in
        first: Optional[tuple[str, int]] = None  # under `if batch_idx == 0:`: the counter and the line
        for anc, child in self.file.ancestors(node):
            for prior in block_of(anc, child):  # early exits before the line, in this block
                if prior is child:
                    break
                if not exits(prior):
                    continue
                assert isinstance(prior, ast.If)
                if (
                    skips_unless_every_n(prior.test)
                    or periodic_skip(prior.test)
                    or (isinstance(prior.test, ast.UnaryOp) and self.every_n_flag(prior.test.operand))
                ):
                    every_n = True
                counter = skips_unless_first(prior.test) if first is None else None
                if counter is not None:
                    first = (counter, prior.lineno)
            if isinstance(anc, ast.Raise) or (isinstance(anc, ast.Assert) and child is anc.msg):
                return Runs(ON_ERROR, "an error message")
            if isinstance(anc, ast.ExceptHandler):
                return Runs(ON_ERROR, "an except block")
            if isinstance(anc, ast.If) and not flag and flag_test(anc.test) and child is not anc.test:
                flag = f"`if {text(anc.test)[:60]}:` (line {anc.lineno})"  # either branch: the switch decides
            if isinstance(anc, ast.If) and any(child is s for s in anc.body):
                if is_error_branch(anc.body):
                    return Runs(ON_ERROR, f"an error branch (line {anc.lineno})")
                if is_lazy_init(anc.test):
                    return Runs(ONCE, f"a first-call initialisation (line {anc.lineno})")
                if every_n_test(anc.test) or self.every_n_flag(anc.test):
                    every_n = True

                if leaves is None and isinstance(anc.body[-1], ast.Break):
                    leaves = anc
                counter = first_batch_test(anc.test) if first is None else None
                if counter is not None:
                    first = (counter, anc.lineno)
            if isinstance(anc, LOOP_TYPES) and any(child is s for s in anc.body):
                if first is not None and binds(anc, first[0]) and self.loops.inner_step_loop(anc):
                    first = None  # `for i, opt in enumerate(optimizers): if i == 0:` inside the batch loop
                if leaves is not None and (
                    self.loops.is_training_loop(anc) or self.loops.is_rollout_loop(anc) or self.loops.is_batch_loop(anc)
                ):
                    # `if epoch_done: generate_example(); break`: at most once per run of the loop
                    return Runs(PER_EPOCH, f"a branch that leaves the loop of line {anc.lineno} (line {leaves.lineno})")
                if self.loops.is_training_loop(anc):
                    base = Runs(PER_BATCH, f"a training loop (line {anc.lineno})", True, root_cpu=self.root_cpu_only)
                elif self.loops.is_rollout_loop(anc):
                    base = Runs(PER_BATCH, f"a rollout loop (line {anc.lineno}): one environment step per iteration")
                elif self.loops.is_epoch_loop(anc) or self.loops.contains_training_loop(anc):
                    base = Runs(PER_EPOCH, f"a loop over epochs (line {anc.lineno})")
                elif self.loops.is_batch_loop(anc):
                    base = Runs(PER_BATCH, f"a loop over batches (line {anc.lineno})")
                else:
                    leaves = None  # a break there ends this plain loop, not the one around it
                    if first is not None and binds(anc, first[0]):
                        first = None  # `for i, opt in enumerate(opts): if i == 0:` the first of a plain loop
                    continue  # a plain loop: as often as the code around it (times its length)
                return flagged(self.narrowed(base, every_n, first), flag)
            if isinstance(anc, DEF_TYPES):
                if not isinstance(self.file.parents.get(anc), (ast.Module, ast.ClassDef)):
                    continue  # a closure: runs where it is defined (optimizer.step(closure))
                return flagged(self.narrowed(self.function_runs(anc, depth), every_n, first), flag)
            if isinstance(anc, ast.ClassDef):
                return Runs(ONCE, "a class body")
            if isinstance(anc, ast.If) and is_main_test(anc.test):
                return Runs(ONCE, "the script's main block")
        return Runs(ONCE, "module level")

    @staticmethod
    def narrowed(base: Runs, every_n: bool, first: Optional[tuple[str, int]]) -> Runs:
        """``base`` under an every-N test, or under a first-batch test (once per pass over the batches)."""
        if first is not None and base.how in (PER_BATCH, PER_SAMPLE, EVERY_N):
            return Runs(PER_EPOCH, f"one batch a pass (the `{first[0]}` test of line {first[1]}) of {base.where}")
        return base.every_n() if every_n else base

    def function_runs(self, fn: FuncDef, depth: int = 0) -> Runs:
        """How often the body of the function or method ``fn`` runs."""
        memo = self._runs
        if fn in memo:
            return memo[fn]
        memo[fn] = Runs(UNKNOWN, f"{fn.name}()")  # recursion guard
        result = self._function_runs(fn, depth)
        memo[fn] = result
        return result

    def _function_runs(self, fn: FuncDef, depth: int) -> Runs:
        name = fn.name
        method = isinstance(self.file.parents.get(fn), ast.ClassDef)
        if method and name in STEP_METHODS:
            return Runs(PER_BATCH, name, True)
        if method and name in TRAIN_BATCH_HOOKS:
            return Runs(PER_BATCH, f"{name} (a Lightning hook run every training step)", True)
        if method and name in _BATCH_METHODS:
            return Runs(PER_BATCH, name)
        if method and name in _SAMPLE_METHODS:
            return Runs(PER_SAMPLE, name)
        if name in _ONCE_NAMES or name.startswith(_ONCE_PREFIXES):
            return Runs(ONCE, f"{name}()")
        if "epoch" in name and (name.startswith("on_") or name.endswith(("_epoch_end", "_epoch_start"))):
            return Runs(PER_EPOCH, name)
        best: Optional[Runs] = None
        cross = False
        seen: set[ast.AST] = set()
        if depth < _MAX_DEPTH:
            for call in self.loops.call_sites.get(name, ()):
                if self.loops.helper(call) is not fn:
                    continue
                seen.add(call)
                r = self.runs(call, depth + 1)
                if best is None or ORDER.index(r.how) < ORDER.index(best.how):
                    best = r
            for other, call in self.project.callers(fn):
                if call in seen:
                    continue
                r = other.runs(call, depth + 1)
                if other is not self and r.how in (PER_BATCH, PER_SAMPLE, EVERY_N) and not r.via:
                    r = replace(r, via=f"{other.file.path}:{call.lineno}", via_call=call, via_ctx=other.file)
                if best is None or ORDER.index(r.how) < ORDER.index(best.how):
                    best, cross = r, other is not self
        if self.loops.is_step_function(fn):
            # a backward and an optimizer step make a training step only where the callers run it every
            # step: a check called once (from on_train_start, setup, main) is not one
            if best is not None and best.how == PER_EPOCH:
                # called once per epoch: full-batch training, where a step is an epoch
                return Runs(PER_EPOCH, f"{name}() (one optimizer step per epoch)")
            if best is not None and best.how == ONCE:
                return Runs(ONCE, f"{name}() (one optimizer step per call, called once: {best.where})")
            return Runs(PER_BATCH, f"{name}() (one optimizer step per call)", True, root_cpu=self.root_cpu_only)
        if best is None:
            around = self.loops.runs_training_loop(fn)
            if "epoch" in name or around == "epoch":
                return Runs(PER_EPOCH, f"{name}() (around a training loop)")
            if around == "whole":
                return Runs(ONCE, f"{name}() (it runs the whole loop over epochs)")
            files = self.project.file_count()
            return Runs(UNKNOWN, f"{name}(): no call of it in the {files} file{'s' if files != 1 else ''} linted")
        if best.how in (PER_BATCH, PER_SAMPLE, EVERY_N):
            where = f"{best.where} in {best.via.rsplit(':', 1)[0]}" if cross else best.where
            return replace(best, where=f"{name}() (called from {where})")
        if "epoch" in name and best.how in (ONCE, UNKNOWN):
            return Runs(PER_EPOCH, f"{name}()")
        if best.how == UNKNOWN:
            return Runs(UNKNOWN, f"{name}() (called only from {best.where})")
        return Runs(best.how, f"{name}()")

    def hot_context(self, node: ast.AST, step_methods: frozenset = STEP_METHODS) -> Optional[str]:
        """Where ``node`` runs once per training step (``"training_step"``, ``"a training loop (line 12)"``),
        or ``None``: not part of the training step, every N steps, an error branch, a CPU-only file."""
        r = self.hot_runs(node)
        return r.where if r is not None else None

    @property
    def root_cpu_only(self) -> bool:
        """The file never leaves the CPU (:attr:`Facts.cpu_only <lightning_speedups.lint.facts.Facts.cpu_only>`), nor do the project modules it imports (a
        device from ``dist_util.dev()`` lives in another file) or those that import it (an RL algorithm's
        ``update()`` trains on rollouts that ``main.py`` moved to the device)."""
        return self.facts.cpu_only and not self.project.near_gpu_module()

    def maybe_hot(self, node: ast.AST) -> bool:
        """``node`` is in a function a training step reaches, or in a training loop: only then can it
        run per step (cheap: the project's reachable set is computed once)."""
        hot = self.project.hot_functions()
        for anc, _ in self.file.ancestors(node):
            if isinstance(anc, DEF_TYPES):
                if hot is None or anc in hot:
                    return True
            elif isinstance(anc, LOOP_TYPES) and self.loops.is_training_loop(anc):
                return True
        return False

    def hot_runs(self, node: ast.AST) -> Optional[Runs]:
        """How often ``node`` runs when that is once per training step (``None`` otherwise: not part of
        the step, every N steps, an error branch, a CPU-only training loop); its ``via`` says which
        file's step makes it hot."""
        if not self.maybe_hot(node):
            return None
        r = self.runs(node)
        if r.how != PER_BATCH or not r.training or r.root_cpu:
            return None  # root_cpu: a plain-PyTorch loop that never leaves the CPU, a "sync" costs nothing
        return r
