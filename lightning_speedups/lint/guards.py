"""How a guard reads: the tests around a line (``if step % N == 0:``, ``if batch_idx == 0:``, an early
``return`` / ``continue``, a switch of the user's configuration) and what each says about how often the
line runs. Pure functions over ``ast`` nodes; :mod:`lightning_speedups.lint.where` puts them together."""

from __future__ import annotations

import ast
import re
from typing import Optional

from lightning_speedups.lint.astutil import terminal_name


def words(text: str) -> list[str]:
    """The parts of the names in ``text``: ``self.train_loader`` -> self, train, loader."""
    return [w for w in re.split(r"[^a-z0-9]+", text) if w]


EXIT_CALLS = frozenset({"exit", "quit", "_exit", "abort"})


def text(node: Optional[ast.AST]) -> str:
    if node is None:
        return ""
    try:
        return ast.unparse(node).lower()
    except (ValueError, TypeError, AttributeError, RecursionError):  # pragma: no cover
        return ""


def unwrap(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Call) and node.args and terminal_name(node.func) in ("enumerate", "tqdm", "iter", "zip"):
        node = node.args[0]
    return node


def is_lazy_init(test: ast.AST) -> bool:
    """``x is None`` / ``not state`` / ``len(state) == 0`` / ``"k" not in state``: a first-call branch;
    also ``<conditions> and x is None`` (SwAV's queue, created once when an epoch is reached)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(
            isinstance(v, ast.Compare)
            and len(v.ops) == 1
            and isinstance(v.ops[0], ast.Is)
            and is_none(v.comparators[0])
            for v in test.values
        )
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        if isinstance(operand, ast.Call) and terminal_name(operand.func) == "hasattr":
            return True
        return isinstance(operand, (ast.Name, ast.Attribute, ast.Subscript))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            return True
        if isinstance(op, ast.NotIn):
            return True
        if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and right.value == 0:
            left = test.left
            return isinstance(left, ast.Call) and terminal_name(left.func) == "len"
    return False


def is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def every_n_test(test: ast.AST) -> bool:
    """``if step % N == 0:`` / ``if divisible_by(step, N):`` / ``if should_log_every(...)``: every N steps."""
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return True
        if isinstance(n, ast.Call):
            name = terminal_name(n.func).lower()
            if "divisible" in name or "every" in name or "freq" in name:  # check_frequency(step)
                return True
    return False


#: Names of scripts, functions and classes that evaluate or show a trained model.
INFERENCE_WORDS = (
    "eval",
    "predict",
    "infer",
    "visual",
    "fid",
    "extract",
    "demo",
    "valid",
    "export",
    "sample",
    "zeroshot",
    "zero_shot",
    "test",
)
#: Words that make ``range(<...epoch...>)`` a count of steps within an epoch (``epoch_iters``, ``steps_per_epoch``).
STEP_COUNT_WORDS = frozenset({"iter", "iters", "iterations", "step", "steps", "batch", "batches", "per"})
#: Parts of a counter's name (``batch_idx``, ``batch_nb``, ``i``, ``global_step``, ``n_iter``).
COUNTER_PARTS = frozenset(
    {"batch", "idx", "nb", "step", "steps", "iter", "iters", "iteration", "it", "itr", "niter", "i", "bi", "ni"}
)


def first_batch_test(test: ast.AST) -> Optional[str]:
    """``if batch_idx == 0:`` / ``if i < 2 and ...:`` / ``if i == len(loader) - 1:``: the first or the last
    batches of a loop only; the counter's name (a plain loop binding it between the test and the batch loop makes it that loop's index)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for v in test.values:
            found = first_batch_test(v)
            if found is not None:
                return found
        return None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq) and (isinstance(left, ast.Constant) or last_index(left)):
        left, right = right, left
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and isinstance(left.right, ast.Constant):
        left = left.left  # `i + 1 == len(loader)`
    if isinstance(op, ast.Eq) and last_index(right):
        pass  # the last batch: `i == len(loader) - 1`, `batch_idx == num_batches - 1`
    elif not (isinstance(right, ast.Constant) and type(right.value) is int):
        return None
    elif not ((isinstance(op, ast.Eq) and right.value == 0) or (isinstance(op, ast.Lt) and 0 < right.value <= 8)):
        return None
    name = terminal_name(left)
    if not isinstance(left, (ast.Name, ast.Attribute)) or not name:
        return None
    return name if COUNTER_PARTS.intersection(words(name.lower())) else None


def skips_unless_every_n(test: ast.AST) -> bool:
    """The test of an early exit (``if step % N != 0: return``, ``if batch_idx % N: continue``,
    ``if not should_log(step): return``, ``if step % N or not is_main: return``): what follows runs
    only every N steps."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(skips_unless_every_n(v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return every_n_test(test.operand)
    if isinstance(test, ast.BinOp) and isinstance(test.op, ast.Mod):
        return True  # `if step % N:` (truthy: not a multiple)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.Gt)):
        sides = (test.left, test.comparators[0])
        return any(isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mod) for x in sides)
    return False


def periodic_skip(test: ast.AST) -> bool:
    """The test of an early exit that waits for a threshold that moves (``if cur_nimg < tick_start + kimg * 1000:
    continue``, ``if time.time() - last < interval: return``): what follows runs once per period."""
    if isinstance(test, ast.BoolOp):
        return any(periodic_skip(v) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))):
        return False
    left, right = test.left, test.comparators[0]

    def moving(x: ast.AST, op: type) -> bool:
        return (
            isinstance(x, ast.BinOp)
            and isinstance(x.op, op)
            and not all(isinstance(v, ast.Constant) for v in (x.left, x.right))
            and not any(isinstance(v, ast.Constant) for v in (x.left, x.right) if v is x.left)
        )

    return moving(right, ast.Add) or moving(left, ast.Sub)


#: Roots of a configuration value (``args.use_amp``, ``self.hparams.debug``, ``cfg.log_images``).
FLAG_ROOTS = frozenset(
    {"args", "opt", "opts", "cfg", "config", "conf", "hparams", "flags", "FLAGS", "params", "hp", "hps", "options"}
)
#: Attributes that are not a user's switch: run state, ranks, Lightning's own flags.
NOT_FLAGS = (
    "training",
    "global_zero",
    "automatic_optimization",
    "rank",
    "main_process",
    "master",
    "device",
    "trainer",
)


def flag_ref(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute):
        return False
    parts: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name) or any(w in p for p in parts for w in NOT_FLAGS):
        return False
    parts.append(cur.id)
    parts.reverse()  # root first: ["self", "args", "nan_detection"]
    if parts[0] in FLAG_ROOTS:
        return True
    return parts[0] == "self" and (len(parts) == 2 or parts[1] in FLAG_ROOTS)


def flag_test(test: ast.AST) -> bool:
    """``if self.args.nan_detection:``, ``if not cfg.fast:``, ``if self.momentum_classifier is not None:``: a
    switch of the user's configuration, whose default the code does not show."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return flag_test(test.operand)
    if isinstance(test, ast.BoolOp):
        return all(flag_test(v) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        return is_none(test.comparators[0]) and flag_ref(test.left)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant):
        return flag_ref(test.left)  # `if args.my_qa_mask != 1:`, `if cfg.mode == "train":`
    return flag_ref(test)


def skips_unless_first(test: ast.AST) -> Optional[str]:
    """``if batch_idx != 0: return`` / ``if batch_idx > 0: continue``: what follows runs for the first batch only."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, right = test.ops[0], test.comparators[0]
    if not (isinstance(op, (ast.NotEq, ast.Gt)) and isinstance(right, ast.Constant) and right.value == 0):
        return None
    return first_batch_test(ast.Compare(left=test.left, ops=[ast.Eq()], comparators=[right]))


def exits(stmt: ast.stmt) -> bool:
    """``if <test>: ... return`` / ``continue`` with no ``else``: an early exit of the block that holds it."""
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and bool(stmt.body)
        and isinstance(stmt.body[-1], (ast.Return, ast.Continue))
    )


def block_of(anc: ast.AST, child: ast.AST) -> list[ast.stmt]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(anc, name, None)
        if isinstance(block, list) and any(child is x for x in block):
            return block
    return []


def last_index(node: ast.AST) -> bool:
    """``len(loader) - 1``, ``len(loader)``, ``num_batches - 1``: the index (or count) of the last batch."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant):
        node = node.left
        if not isinstance(node, ast.Call):
            return isinstance(node, (ast.Name, ast.Attribute))
    return isinstance(node, ast.Call) and terminal_name(node.func) == "len"


def is_main_test(test: ast.AST) -> bool:
    """``__name__ == "__main__"``: the script's main guard."""
    return text(test).replace(" ", "") in ('__name__=="__main__"', "__name__=='__main__'")


def binds(loop: ast.AST, name: str) -> bool:
    """The loop's target binds ``name``."""
    target = getattr(loop, "target", None)
    return target is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def is_error_branch(body: list[ast.stmt]) -> bool:
    """The statements end the run: a ``raise``, ``sys.exit(...)``/``exit()``/``os._exit()``."""
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            if terminal_name(stmt.value.func) in EXIT_CALLS:
                return True
    return False
