"""Where code runs and how often, as far as the file shows: per batch, per sample, every N batches,
per epoch, once, or only on an error.

Mixed into :class:`~lightning_speedups.lint.context.FileContext`. The answer for a node is a
:class:`Runs`; rules turn it into a severity (a cost paid once per run is not a warning).

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
import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeVar, Union

from lightning_speedups.lint.astutil import DEF_TYPES, LOOP_TYPES, Binding, child_nodes, mentions_step, terminal_name
from lightning_speedups.lint.guards import (
    INFERENCE_WORDS as _INFERENCE_WORDS,
)
from lightning_speedups.lint.guards import (
    STEP_COUNT_WORDS as _STEP_COUNT_WORDS,
)
from lightning_speedups.lint.guards import (
    binds as _binds,
)
from lightning_speedups.lint.guards import (
    block_of as _block_of,
)
from lightning_speedups.lint.guards import (
    every_n_test as _every_n_test,
)
from lightning_speedups.lint.guards import (
    exits as _exits,
)
from lightning_speedups.lint.guards import (
    first_batch_test as _first_batch_test,
)
from lightning_speedups.lint.guards import (
    flag_test as _flag_test,
)
from lightning_speedups.lint.guards import (
    is_error_branch as _is_error_branch,
)
from lightning_speedups.lint.guards import (
    is_lazy_init as _is_lazy_init,
)
from lightning_speedups.lint.guards import (
    is_main_test as _is_main_test,
)
from lightning_speedups.lint.guards import (
    periodic_skip as _periodic_skip,
)
from lightning_speedups.lint.guards import (
    skips_unless_every_n as _skips_unless_every_n,
)
from lightning_speedups.lint.guards import (
    skips_unless_first as _skips_unless_first,
)
from lightning_speedups.lint.guards import (
    text as _text,
)
from lightning_speedups.lint.guards import (
    unwrap as _unwrap,
)
from lightning_speedups.lint.guards import (
    words as _words,
)

PER_BATCH = "per batch"
PER_SAMPLE = "per sample"
EVERY_N = "every N batches"
PER_EPOCH = "per epoch"
ONCE = "once"
ON_ERROR = "on error"
UNKNOWN = "unknown"
#: Most frequent first: a helper called from several places runs as often as its busiest caller.
_ORDER = (PER_SAMPLE, PER_BATCH, EVERY_N, PER_EPOCH, UNKNOWN, ONCE, ON_ERROR)

#: Methods whose body runs once per batch of training (LS201 / LS202 look there).
STEP_METHODS = frozenset({"training_step", "validation_step"})
#: Lightning hooks (of a LightningModule or a Callback) that run once per training step.
TRAIN_BATCH_HOOKS = frozenset(
    {
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "training_step_end",
    }
)
#: Methods whose body runs once per batch, though not of training.
_BATCH_METHODS = frozenset({"test_step", "predict_step", "forward", "collate_fn", "collate"})
_SAMPLE_METHODS = frozenset({"__getitem__", "__getitems__", "__next__"})
_ONCE_NAMES = frozenset(
    "__init__ __post_init__ setup prepare_data configure_optimizers configure_model configure_sharded_model "
    "reset_parameters main cli_main teardown on_fit_start on_fit_end on_train_start on_train_end "
    "init_weights _init_weights load_state_dict from_pretrained".split()
)
_ONCE_PREFIXES = ("build_", "_build_", "setup_", "_setup_", "init_", "_init_", "create_model", "get_model", "load_")
#: Parts of a name (split at "_", "." and other punctuation) that make a loop a loop over batches.
_LOADER_PARTS = frozenset({"loader", "loaders", "dataloader", "dataloaders", "batch", "batches", "dl", "dls"})


#: A function or method (what :attr:`Where.functions` lists) and a loop (what :data:`LOOP_TYPES` matches).
FuncDef = Union[ast.FunctionDef, ast.AsyncFunctionDef]
Loop = Union[ast.For, ast.AsyncFor, ast.While]

#: How many calls deep a line's frequency is followed (memoised per function, so this is cheap).
_MAX_DEPTH = 24


@dataclass(frozen=True)
class Runs:
    """How often a line runs: ``how`` (one of the constants above), ``where`` (words for messages:
    ``"training_step"``, ``"a training loop (line 12)"``), ``training`` (it is part of the training
    step itself, where LS201 / LS202 look)."""

    how: str
    where: str
    training: bool = False
    #: ``path:line`` of the call in another file through which this line runs per step ("" when the
    #: file shows it by itself): LS206 reports syncs reached that way.
    via: str = ""
    #: the training loop that makes it per step lives in a file that never leaves the CPU.
    root_cpu: bool = False
    #: the user's switch the line runs under (`` `if self.args.nan_detection:` (line 62)``): how often is then
    #: unsure, since the code does not show the switch's default.
    flag: str = ""
    #: the call in another file named by ``via``, and that file's context (what it passes).
    via_call: Optional[ast.AST] = field(default=None, compare=False)
    via_ctx: Optional[object] = field(default=None, compare=False)

    def every_n(self) -> Runs:
        return replace(self, how=EVERY_N) if self.how in (PER_BATCH, PER_SAMPLE) else self


def _is_step_call(call: ast.Call) -> bool:
    """A call :meth:`Where._calls_step` takes for a step by itself (backward, an optimizer or scaler step,
    ``loss_scaler(loss, optimizer, ...)``)."""
    func = call.func
    if isinstance(func, ast.Attribute):
        attr = func.attr
        if attr in ("backward", "manual_backward"):
            return True
        if attr == "step":
            owner = terminal_name(func.value).lower()
            if "opt" in owner or "scaler" in owner:
                return True
    return len(call.args) >= 2 and terminal_name(func).lower().endswith("scaler")


#: How a message says that a line runs only under a switch (the default lint set leaves such lines out).
UNDER_FLAG = " (under "


def _flagged(r: Runs, flag: str) -> Runs:
    if not flag or r.flag or r.how not in (PER_BATCH, PER_SAMPLE):
        return r
    return replace(r, flag=flag, where=f"{r.where}{UNDER_FLAG}{flag})")


def nodes_within(owner: Any, key: str, nodes: Any, node: ast.AST) -> list[Any]:
    """The ``nodes`` on the lines of ``node`` (from its first line to its last; all of them for a module), by a
    bisection of ``nodes`` sorted by line, the sorted index cached on ``owner`` under ``key``: what
    ``ast.walk(node)`` would find of them, without walking."""

    def build() -> tuple[list[int], list[Any]]:
        ordered = sorted(nodes, key=lambda n: n.lineno)
        return [n.lineno for n in ordered], ordered

    lines, ordered = owner.memo(key, build)
    if not hasattr(node, "lineno"):  # the module: all of them
        return list(ordered)
    lo = bisect.bisect_left(lines, node.lineno)
    hi = bisect.bisect_right(lines, getattr(node, "end_lineno", None) or node.lineno)
    return ordered[lo:hi]


T = TypeVar("T")


class WhereHost(Protocol):
    """What :class:`Where` needs from the class it is mixed into (:class:`FileContext` provides it)."""

    tree: ast.Module
    path: PurePath
    source: str
    parents: dict[ast.AST, ast.AST]
    calls: list[ast.Call]
    classes: list[ast.ClassDef]
    #: memo of :meth:`Where.is_training_loop`
    _training_loop: dict[ast.AST, bool]
    #: memo of :meth:`Where.function_runs`
    _runs: dict[ast.AST, Runs]

    @property
    def cpu_only(self) -> bool: ...

    def ancestors(self, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]: ...

    def bindings_before(self, name: ast.Name) -> Optional[list[Binding]]: ...

    def memo(self, key: str, make: Callable[[], T]) -> T: ...


if TYPE_CHECKING:  # the type checker sees the host's members on Where; at run time Where is a plain mixin
    _Hosted = WhereHost
else:
    _Hosted = object


class Where(_Hosted):
    """The "where does it run" methods of :class:`FileContext`."""

    # ------------------------------------------------------------------ functions of this file
    @property
    def functions(self) -> dict[str, list[FuncDef]]:
        """Functions and methods defined in the file, by name (module level and class bodies)."""
        cached = getattr(self, "_functions", None)
        if cached is None:
            cached = {}
            for node in [*self.tree.body, *(n for c in self.classes for n in c.body)]:
                if isinstance(node, DEF_TYPES):
                    cached.setdefault(node.name, []).append(node)
            self._functions = cached
        return cached

    @property
    def call_sites(self) -> dict[str, list[ast.Call]]:
        """Calls of a bare name or of ``self.<name>`` / ``cls.<name>``, by name."""
        cached = getattr(self, "_call_sites", None)
        if cached is None:
            cached = {}
            functions = self.functions
            for call in self.calls:
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
                    cached.setdefault(name, []).append(call)
            self._call_sites = cached
        return cached

    def _helper(self, call: ast.Call) -> Optional[FuncDef]:
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

    # ------------------------------------------------------------------ training steps and loops
    def calls_within(self, node: ast.AST) -> list[ast.Call]:
        """The calls on the lines of ``node`` (from its first line to its last), by a bisection of the
        file's calls sorted by line: what ``ast.walk(node)`` would find, without walking."""
        return nodes_within(self, "_calls_by_line", self.calls, node)

    def _calls_step(self, stmts: list, depth: int) -> bool:
        """``stmts`` call backward / an optimizer step, not counting nested loops (closures and step
        functions of this file they call do count)."""
        stack = list(stmts)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.ClassDef, ast.Lambda, *LOOP_TYPES)):
                continue
            if isinstance(node, ast.Call):
                if _is_step_call(node):  # loss_scaler(loss, optimizer, ...) too: timm's NativeScaler steps
                    return True
                if depth < 3:
                    fn = self._helper(node)
                    if fn is not None and self.is_step_function(fn, depth + 1):
                        return True
            stack.extend(child_nodes(node))
        return False

    def _step_candidates(self) -> tuple[set[FuncDef], set[FuncDef]]:
        """``(candidates, listed)``: of the file's module-level functions and methods (``listed``), those
        that can be step functions: their lines hold a backward / optimizer or scaler step call, or they
        call such a function of this file by name (as deep as :meth:`_calls_step` follows helpers). A
        superset, found from the call list without walking any body."""
        return self.memo("step_cands", self._find_step_candidates)

    def _find_step_candidates(self) -> tuple[set[FuncDef], set[FuncDef]]:
        listed = {fn for defs in self.functions.values() for fn in defs}
        lines = sorted(call.lineno for call in self.calls if _is_step_call(call))
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
        memo: dict[FuncDef, bool] = self.memo("step_fn", dict)
        if fn in memo:
            return bool(memo[fn])
        cands, listed = self._step_candidates()
        if fn in listed and fn not in cands:
            memo[fn] = False
            return False
        memo[fn] = False  # a recursive call is not a step
        memo[fn] = self._calls_step(fn.body, depth)
        return memo[fn]

    def _nested_loops(self, loop: Loop) -> list[Loop]:
        """The loops directly nested in ``loop`` (not in a nested function, nor inside those loops)."""
        memo: dict[Loop, list[Loop]] = self.memo("nested", dict)
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
            test = _text(loop.test)
            return "epoch" in test and "step" not in test and "iter" not in test
        if "epoch" in _text(loop.target):
            return True
        # `range(epochs)` counts epochs; `range(cfg.epoch_iters)` / `range(steps_per_epoch)` counts steps in one
        words = _words(_text(loop.iter))
        return any("epoch" in w for w in words) and not any(w in _STEP_COUNT_WORDS for w in words)

    @staticmethod
    def is_batch_loop(loop: Loop) -> bool:
        if isinstance(loop, ast.While):
            return False
        words = _words(_text(_unwrap(loop.iter)))
        # whole name parts (train_loader, val_dl, batches), not substrings (batch2model_input: input keys)
        return any(w in _LOADER_PARTS or w.endswith("loader") for w in words) or "batch" in _words(_text(loop.target))

    def is_training_loop(self, loop: Loop) -> bool:
        """``loop`` runs once per optimizer step (see the module docstring)."""
        cached = self._training_loop.get(loop)
        if cached is not None:
            return cached
        self._training_loop[loop] = False
        if self.is_epoch_loop(loop):
            return False  # one pass per epoch (in full-batch training a step is an epoch)
        found = self._calls_step(loop.body, 0)
        if not found:
            found = any(self.is_training_loop(n) and not self.is_batch_loop(n) for n in self._nested_loops(loop))
        self._training_loop[loop] = found
        return found

    def is_rollout_loop(self, loop: Loop) -> bool:
        """``loop`` steps an environment once per iteration (``envs.step(action)`` in its own body, not in
        a nested loop or function): RL rollouts run as often as training steps, or more."""
        memo: dict[Loop, bool] = self.memo("rollout", dict)
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

    def _runs_training_loop(self, fn: FuncDef) -> str:
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
                if self._contains_training_loop(node):
                    found = "whole"
                continue
            stack.extend(child_nodes(node))
        return found

    def _contains_training_loop(self, loop: Loop) -> bool:
        memo: dict[Loop, bool] = self.memo("contains", dict)
        cached = memo.get(loop)
        if cached is None:
            memo[loop] = False
            cached = memo[loop] = any(
                self.is_training_loop(n) or self._contains_training_loop(n) for n in self._nested_loops(loop)
            )
        return cached

    # ------------------------------------------------------------------ how often
    def _every_n_flag(self, test: ast.AST) -> bool:
        """``if is_log_step:`` where every earlier binding of the name in its scope is an every-N test
        (``is_log_step = (i % log_every == 0) or last_batch``): the test stored in a variable; also
        ``flag and ...`` with such a flag, and ``flag_a or flag_b`` when each side is one."""
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And):
                return any(self._every_n_flag(v) for v in test.values)
            return all(_every_n_test(v) or self._every_n_flag(v) for v in test.values)
        if not isinstance(test, ast.Name):
            return False
        prior = self.bindings_before(test)
        if not prior:
            return False
        return all(b.kind == "value" and b.value is not None and _every_n_test(b.value) for b in prior)

    def runs(self, node: ast.AST, depth: int = 0) -> Runs:
        """How often ``node`` runs, as far as the file shows."""
        every_n = False
        flag = ""  # under a switch of the user's configuration
        leaves: Optional[ast.If] = None  # a branch ending in `break`: it ends the loop it is in
        first: Optional[tuple[str, int]] = None  # under `if batch_idx == 0:`: the counter and the line
        for anc, child in self.ancestors(node):
            for prior in _block_of(anc, child):  # early exits before the line, in this block
                if prior is child:
                    break
                if not _exits(prior):
                    continue
                assert isinstance(prior, ast.If)
                if (
                    _skips_unless_every_n(prior.test)
                    or _periodic_skip(prior.test)
                    or (isinstance(prior.test, ast.UnaryOp) and self._every_n_flag(prior.test.operand))
                ):
                    every_n = True
                counter = _skips_unless_first(prior.test) if first is None else None
                if counter is not None:
                    first = (counter, prior.lineno)
            if isinstance(anc, ast.Raise) or (isinstance(anc, ast.Assert) and child is anc.msg):
                return Runs(ON_ERROR, "an error message")
            if isinstance(anc, ast.ExceptHandler):
                return Runs(ON_ERROR, "an except block")
            if isinstance(anc, ast.If) and not flag and _flag_test(anc.test) and child is not anc.test:
                flag = f"`if {_text(anc.test)[:60]}:` (line {anc.lineno})"  # either branch: the switch decides
            if isinstance(anc, ast.If) and any(child is s for s in anc.body):
                if _is_error_branch(anc.body):
                    return Runs(ON_ERROR, f"an error branch (line {anc.lineno})")
                if _is_lazy_init(anc.test):
                    return Runs(ONCE, f"a first-call initialisation (line {anc.lineno})")
                if _every_n_test(anc.test) or self._every_n_flag(anc.test):
                    every_n = True

                if leaves is None and isinstance(anc.body[-1], ast.Break):
                    leaves = anc
                counter = _first_batch_test(anc.test) if first is None else None
                if counter is not None:
                    first = (counter, anc.lineno)
            if isinstance(anc, LOOP_TYPES) and any(child is s for s in anc.body):
                if first is not None and _binds(anc, first[0]) and self._inner_step_loop(anc):
                    first = None  # `for i, opt in enumerate(optimizers): if i == 0:` inside the batch loop
                if leaves is not None and (
                    self.is_training_loop(anc) or self.is_rollout_loop(anc) or self.is_batch_loop(anc)
                ):
                    # `if epoch_done: generate_example(); break`: at most once per run of the loop
                    return Runs(PER_EPOCH, f"a branch that leaves the loop of line {anc.lineno} (line {leaves.lineno})")
                if self.is_training_loop(anc):
                    base = Runs(PER_BATCH, f"a training loop (line {anc.lineno})", True, root_cpu=self.root_cpu_only)
                elif self.is_rollout_loop(anc):
                    base = Runs(PER_BATCH, f"a rollout loop (line {anc.lineno}): one environment step per iteration")
                elif self.is_epoch_loop(anc) or self._contains_training_loop(anc):
                    base = Runs(PER_EPOCH, f"a loop over epochs (line {anc.lineno})")
                elif self.is_batch_loop(anc):
                    base = Runs(PER_BATCH, f"a loop over batches (line {anc.lineno})")
                else:
                    leaves = None  # a break there ends this plain loop, not the one around it
                    if first is not None and _binds(anc, first[0]):
                        first = None  # `for i, opt in enumerate(opts): if i == 0:` the first of a plain loop
                    continue  # a plain loop: as often as the code around it (times its length)
                return _flagged(self._narrowed(base, every_n, first), flag)
            if isinstance(anc, DEF_TYPES):
                if not isinstance(self.parents.get(anc), (ast.Module, ast.ClassDef)):
                    continue  # a closure: runs where it is defined (optimizer.step(closure))
                return _flagged(self._narrowed(self.function_runs(anc, depth), every_n, first), flag)
            if isinstance(anc, ast.ClassDef):
                return Runs(ONCE, "a class body")
            if isinstance(anc, ast.If) and _is_main_test(anc.test):
                return Runs(ONCE, "the script's main block")
        return Runs(ONCE, "module level")

    def _inner_step_loop(self, loop: Loop) -> bool:
        """``loop`` is not over batches and sits inside a loop that is (a loop over optimizers or
        micro-batches in the batch loop): its index counts within one step."""
        if self.is_batch_loop(loop):
            return False
        for anc, _ in self.ancestors(loop):
            if isinstance(anc, DEF_TYPES):
                return False
            if isinstance(anc, LOOP_TYPES) and (self.is_training_loop(anc) or self.is_batch_loop(anc)):
                return True
        return False

    @staticmethod
    def _narrowed(base: Runs, every_n: bool, first: Optional[tuple[str, int]]) -> Runs:
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
        method = isinstance(self.parents.get(fn), ast.ClassDef)
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
            for call in self.call_sites.get(name, ()):
                if self._helper(call) is not fn:
                    continue
                seen.add(call)
                r = self.runs(call, depth + 1)
                if best is None or _ORDER.index(r.how) < _ORDER.index(best.how):
                    best = r
            project = getattr(self, "project", None)
            if project is not None:
                for other, call in project.callers(self, fn):
                    if call in seen:
                        continue
                    r = other.runs(call, depth + 1)
                    if other is not self and r.how in (PER_BATCH, PER_SAMPLE, EVERY_N) and not r.via:
                        r = replace(r, via=f"{other.path}:{call.lineno}", via_call=call, via_ctx=other)
                    if best is None or _ORDER.index(r.how) < _ORDER.index(best.how):
                        best, cross = r, other is not self
        if self.is_step_function(fn):
            # a backward and an optimizer step make a training step only where the callers run it every
            # step: a check called once (from on_train_start, setup, main) is not one
            if best is not None and best.how == PER_EPOCH:
                # called once per epoch: full-batch training, where a step is an epoch
                return Runs(PER_EPOCH, f"{name}() (one optimizer step per epoch)")
            if best is not None and best.how == ONCE:
                return Runs(ONCE, f"{name}() (one optimizer step per call, called once: {best.where})")
            return Runs(PER_BATCH, f"{name}() (one optimizer step per call)", True, root_cpu=self.root_cpu_only)
        if best is None:
            around = self._runs_training_loop(fn)
            if "epoch" in name or around == "epoch":
                return Runs(PER_EPOCH, f"{name}() (around a training loop)")
            if around == "whole":
                return Runs(ONCE, f"{name}() (it runs the whole loop over epochs)")
            files = len(getattr(self, "project", None) or ()) or 1
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
        """The file never leaves the CPU (:attr:`cpu_only`), nor do the project modules it imports (a
        device from ``dist_util.dev()`` lives in another file) or those that import it (an RL algorithm's
        ``update()`` trains on rollouts that ``main.py`` moved to the device)."""
        if not self.cpu_only:
            return False
        project = getattr(self, "project", None)
        return project is None or not (project.imports_gpu_module(self) or project.imported_by_gpu_module(self))

    def maybe_hot(self, node: ast.AST) -> bool:
        """``node`` is in a function a training step reaches, or in a training loop: only then can it
        run per step (cheap: the project's reachable set is computed once)."""
        project = getattr(self, "project", None)
        hot = project.hot_functions() if project is not None else None
        for anc, _ in self.ancestors(node):
            if isinstance(anc, DEF_TYPES):
                if hot is None or anc in hot:
                    return True
            elif isinstance(anc, LOOP_TYPES) and self.is_training_loop(anc):
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

    # ------------------------------------------------------------------ debugging code
    @property
    def is_test_file(self) -> bool:
        """``test_*.py``, ``*_test.py``, ``conftest.py``, or under a ``tests`` / ``test`` directory."""
        parts = [p.lower() for p in self.path.parts]
        if not parts:
            return False
        name = parts[-1]
        if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
            return True
        return any(p in ("tests", "test") for p in parts[:-1])

    def under_main_guard(self, node: ast.AST) -> bool:
        """``node`` is in the body of ``if __name__ == "__main__":``."""
        return any(
            isinstance(anc, ast.If) and any(child is s for s in anc.body) and _is_main_test(anc.test)
            for anc, child in self.ancestors(node)
        )

    def for_inference(self, node: ast.AST) -> bool:
        """``node`` is in an evaluation / prediction / visualisation script (by the file's name) that shows
        no training step, nor does a project file it imports or that imports it: DataParallel there serves
        inference, not the training run that DDP would replace it in."""
        name = self.path.name.lower()
        if mentions_step(self.source) or not any(w in name for w in _INFERENCE_WORDS):
            return False
        project = getattr(self, "project", None)
        return project is None or not project.related_file_mentions(
            self, ("backward(", "training_step", ".step("), mentions_step
        )

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
        parts = [p.lower() for p in self.path.parts]
        if any(w in p for p in parts for w in words):
            return True
        for anc, child in self.ancestors(node):
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
