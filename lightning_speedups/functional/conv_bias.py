"""T16 ``conv-bias``: remove the bias of a convolution whose output feeds nothing but a BatchNorm.

Card
----
* **What it does.** Finds every convolution (``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d``, grouped
  or not, lazy ones once materialised) whose output goes *only* into a BatchNorm (``BatchNorm1d/2d/3d``,
  ``SyncBatchNorm``, lazy ones once materialised; affine or not; with or without running statistics;
  any momentum, including ``momentum=None``), removes the convolution's bias and folds it into the
  BatchNorm's ``running_mean``.
* **Seed tip.** A#15, B#17 ("no bias in a conv right before BatchNorm").
* **Expected gain.** One parameter vector per such conv: less optimizer state, one add kernel less
  per conv in forward and backward (a few percent on small CNNs, nothing dramatic).
* **When it hurts.** Never changes the maths; but the model's parameter set changes, so checkpoints of
  the unchanged model need the fold on load (done automatically, see below) and a model without the
  change cannot load a checkpoint of the changed one without :func:`unfold_conv_bias_state_dict`.

Why the maths is unchanged
--------------------------
Let ``y = conv(x) + b``. In train mode BatchNorm subtracts the batch mean of each channel, so the
per-channel constant ``b`` cancels and the variance is unchanged: the output and every gradient of
the remaining parameters are the same (the gradient of ``b`` itself is zero up to rounding, which is
why the bias is dead weight). The running mean is an affine average of batch means whose weights sum
to one (``(1-m) * rm + m * mean`` or, with ``momentum=None``, a cumulative average), so if the changed
model starts from ``running_mean - b`` it stays exactly ``b`` below the original's forever. In eval
mode BatchNorm computes ``conv(x) + b - running_mean == conv(x) - (running_mean - b)``. A BatchNorm
without running statistics uses batch statistics in both modes, so nothing needs folding. The one
place the two models differ is the dead bias itself: under weight decay or Adam the original's bias
drifts (Adam rescales its zero-ish gradient), which the changed model no longer does.

How the data flow is decided (never from registration order)
-------------------------------------------------------------
1. ``torch.fx`` symbolic trace of the whole model, in train *and* eval mode (``self.training``
   branches are specialised by fx). A pair ``conv -> bn`` is accepted when every call of the conv goes
   straight and only into that BatchNorm, every call of the BatchNorm takes that conv's output, and
   neither module's tensors are read directly (``get_attr``).
2. Where the whole model cannot be traced (data-dependent control flow, ``self.log`` in forward, ...),
   each submodule is traced on its own, recursively; a traced submodule's internal pairs are decided
   from its graph. A LightningModule root (anything with ``training_step``) is never traced as a
   whole, because its step methods may call submodules outside ``forward``.
3. For the direct children of a module that cannot be traced, its source is read (``ast``): a pair
   is accepted only when every mention of the two attributes in the class is the pattern
   ``self.bn(self.conv(...))`` or ``v = self.conv(...)`` immediately followed by ``v = self.bn(v)``.
4. A pair decided inside a submodule must not be reachable from the untraceable code above it: the
   source of every untraceable ancestor is scanned for direct accesses (``self.block.conv1``,
   ``self.layers[0]``, the name as a string). Modules registered under two names, modules with forward
   hooks and uninitialised lazy modules are skipped.
5. ``example_input`` (optional) materialises lazy modules and runs a checked forward in both modes
   (buffers and RNG restored afterwards) whose recorded calls can only *veto* a pair. When that
   forward fails, a warning says so and the decision rests on the traced code alone.

Every biased convolution not changed is listed with its reason in :attr:`ConvBiasPlan.skipped`
(and logged at DEBUG level by :func:`remove_conv_bias`).

Checkpoints
-----------
:func:`remove_conv_bias` registers a ``load_state_dict`` pre-hook on the model (``fold_on_load=True``)
so that ``model.load_state_dict(state_dict_of_the_unchanged_model)`` folds the old biases into the
running means on load. The same fold as a plain function: :func:`fold_conv_bias_state_dict`; the
inverse (a changed checkpoint into an unchanged model): :func:`unfold_conv_bias_state_dict`.

Example:
    >>> import torch
    >>> from torch import nn
    >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    >>> remove_conv_bias(net)
    ['0']
    >>> net[0].bias is None, net[3].bias is not None
    (True, True)
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import logging
import textwrap
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd
from torch.nn.parameter import is_lazy

log = logging.getLogger(__name__)

__all__ = [
    "ConvBiasPlan",
    "apply_conv_bias_plan",
    "fold_conv_bias_state_dict",
    "plan_conv_bias_removal",
    "remap_optimizer_state_without",
    "remove_conv_bias",
    "unfold_conv_bias_state_dict",
]

_CONV_FORWARDS = {
    cls.forward
    for cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
}
_BN_FORWARDS = {_BatchNorm.forward, nn.SyncBatchNorm.forward}
# source scans ignore classes defined by these libraries (their code never reaches into user modules)
_LIBRARY_PREFIXES = ("torch", "lightning", "pytorch_lightning", "builtins", "typing", "abc")
_HOOK_ATTR = "_lightning_speedups_conv_bias_pairs"


@dataclass
class ConvBiasPlan:
    """What :func:`plan_conv_bias_removal` decided.

    Attributes:
        pairs: qualified conv name -> qualified name of the BatchNorm its bias folds into.
        skipped: qualified conv name -> one-line reason, for every biased conv that keeps its bias.
        notes: other findings (untraceable modules and the first line of the tracer's reason).
    """

    pairs: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what would change and what is kept."""
        if not self.pairs and not self.skipped:
            return "no convolution with a bias"
        return f"{len(self.pairs)} conv bias(es) folded into BatchNorm, {len(self.skipped)} kept"


# --------------------------------------------------------------------------------------------- utils


def _is_conv(m: nn.Module) -> bool:
    return isinstance(m, _ConvNd) and type(m).forward in _CONV_FORWARDS


def _is_bn(m: nn.Module) -> bool:
    return isinstance(m, _BatchNorm) and type(m).forward in _BN_FORWARDS


def _biased(m: nn.Module) -> bool:
    return _is_conv(m) and getattr(m, "bias", None) is not None


def _lazy(m: nn.Module) -> bool:
    tensors = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
    return any(is_lazy(t) for t in tensors)


def _has_forward_hooks(m: nn.Module) -> bool:
    return bool(m._forward_hooks) or bool(m._forward_pre_hooks)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@contextlib.contextmanager
def _training_mode(model: nn.Module, mode: bool) -> Iterator[None]:
    flags = {m: m.training for m in model.modules()}
    try:
        model.train(mode)
        yield
    finally:
        for m, flag in flags.items():
            m.training = flag


def _as_args(example_input: Any) -> tuple[tuple, dict]:
    if isinstance(example_input, Tensor):
        return (example_input,), {}
    if isinstance(example_input, (tuple, list)):
        return tuple(example_input), {}
    if isinstance(example_input, Mapping):
        return (), dict(example_input)
    raise TypeError(
        "`example_input` must be a Tensor, a tuple/list of positional arguments or a dict of keyword "
        f"arguments for the model's forward, got {type(example_input).__name__}; pass e.g. "
        "`example_input=torch.randn(2, 3, 32, 32)`."
    )


@contextlib.contextmanager
def _side_effect_free(model: nn.Module) -> Iterator[None]:
    """Restore every buffer, the training flags and the RNG state after a probing forward."""
    buffers = {id(b): (b, b.detach().clone()) for b in model.buffers() if not is_lazy(b)}
    devices = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        devices = list(range(torch.cuda.device_count()))
    with torch.random.fork_rng(devices=devices), torch.no_grad(), _training_mode(model, model.training):
        try:
            yield
        finally:
            for b, saved in buffers.values():
                if b.shape == saved.shape:
                    b.copy_(saved)


# ------------------------------------------------------------------------------------ fx analysis


def _trace(module: nn.Module) -> torch.fx.Graph:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.fx.Tracer().trace(module)


def _user_desc(node: torch.fx.Node, root: nn.Module) -> str:
    if node.op == "call_module":
        return type(root.get_submodule(str(node.target))).__name__
    if node.op == "output":
        return "the module's output"
    target = node.target
    return getattr(target, "__name__", str(target))


def _analyse_graph(unit: nn.Module, graph: torch.fx.Graph) -> tuple[dict[int, int], dict[int, str]]:
    """Return ``(accepted conv id -> bn id, rejected conv id -> reason)`` for one traced graph."""
    calls: dict[int, list[torch.fx.Node]] = {}
    mods: dict[int, nn.Module] = {}
    touched: set[int] = set()
    for node in graph.nodes:
        if node.op == "call_module":
            m = unit.get_submodule(str(node.target))
            calls.setdefault(id(m), []).append(node)
            mods[id(m)] = m
        elif node.op == "get_attr":
            path = str(node.target)
            owner = path.rsplit(".", 1)[0] if "." in path else ""
            for p in {path, owner}:
                with contextlib.suppress(AttributeError):
                    touched.add(id(unit.get_submodule(p)))
    accepted: dict[int, int] = {}
    rejected: dict[int, str] = {}
    for cid, nodes in calls.items():
        conv = mods[cid]
        if not _biased(conv):
            continue
        if cid in touched:
            rejected[cid] = "its weight or bias is read directly in forward"
            continue
        bn_ids = set()
        reason = None
        for node in nodes:
            users = list(node.users)
            bn_user = [u for u in users if u.op == "call_module" and _is_bn(unit.get_submodule(str(u.target)))]
            if len(users) != 1 or not bn_user:
                others = [_user_desc(u, unit) for u in users if u not in bn_user] or ["nothing"]
                what = "a BatchNorm and " if bn_user else ""
                reason = f"output feeds {what}{', '.join(sorted(set(others)))}, not only a BatchNorm"
                break
            user = bn_user[0]
            if user.args[:1] != (node,) or len(user.args) != 1 or user.kwargs:
                reason = "output reaches the BatchNorm in an unusual call"
                break
            bn_ids.add(id(unit.get_submodule(str(user.target))))
        if reason is None and len(bn_ids) != 1:
            reason = "output feeds several BatchNorms"
        if reason is None:
            bid = next(iter(bn_ids))
            if bid in touched:
                reason = "the BatchNorm's tensors are read directly in forward"
            else:
                for bn_node in calls[bid]:
                    src = bn_node.args[0] if bn_node.args else None
                    if not (
                        isinstance(src, torch.fx.Node) and src.op == "call_module" and src in nodes
                    ):
                        reason = "its BatchNorm also normalises other inputs"
                        break
        if reason is None:
            accepted[cid] = bid
        else:
            rejected[cid] = reason
    return accepted, rejected


# ------------------------------------------------------------------------------ source (ast) analysis


def _user_classes_of(module_cls: type) -> list[type]:
    out = []
    for cls in module_cls.__mro__:
        mod = getattr(cls, "__module__", "") or ""
        if cls is object or mod.split(".")[0] in _LIBRARY_PREFIXES:
            continue
        out.append(cls)
    return out


def _class_trees(module: nn.Module) -> Optional[list[ast.AST]]:
    trees = _class_trees_of(type(module))
    return None if trees is None else list(trees)


@functools.lru_cache(maxsize=512)
def _class_trees_of(module_cls: type) -> Optional[tuple[ast.AST, ...]]:
    trees = []
    for cls in _user_classes_of(module_cls):
        try:
            src = textwrap.dedent(inspect.getsource(cls))
            trees.append(ast.parse(src))
        except (OSError, TypeError, SyntaxError):
            return None
    return tuple(trees)


def _walk(trees: list[ast.AST]) -> Iterator[ast.AST]:
    """Walk the class sources, skipping ``__init__`` (it has run before the surgery) and stores."""
    stack = list(trees)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init__":
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _self_rooted(node: ast.AST) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return _is_self(node)


def _chain(node: ast.AST) -> Optional[list[str]]:
    """``self.a.b[0]`` -> ``["a", "b", "0"]`` (``"*"`` for a computed index); None if not self-rooted."""
    parts: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        else:
            sl = node.slice
            parts.append(str(sl.value) if isinstance(sl, ast.Constant) else "*")
        node = node.value
    return parts[::-1] if _is_self(node) else None


def _reaches_in(trees: list[ast.AST], tokens: set[str], path: list[str]) -> Optional[str]:
    """Find code in an untraceable ancestor that reaches below the submodule at ``path`` (relative).

    Flags ``self.<path>.<token>`` / ``self.<path>[<token>]`` chains, any ``<expr>.<token>`` attribute
    access not rooted at ``self`` and any string equal to a non-numeric token.
    """
    named = {t for t in tokens if not t.isdigit()}
    for node in _walk(trees):
        chain = _chain(node) if isinstance(node, (ast.Attribute, ast.Subscript)) else None
        if chain is not None:
            n = len(path)
            if len(chain) > n and all(c in (p, "*") for c, p in zip(chain, path)) and chain[n] in tokens | {"*"}:
                return f"'self.{'.'.join(chain)}' is accessed directly (line {node.lineno})"
        elif isinstance(node, ast.Attribute) and node.attr in named:
            return f"'.{node.attr}' is accessed directly (line {node.lineno})"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in named:
            return f"the name '{node.value}' appears as a string (line {node.lineno})"
    return None


_REFLECTION = {"children", "named_children", "modules", "named_modules", "_modules", "__dict__"}


def _ast_pairs(module: nn.Module, trees: list[ast.AST]) -> dict[str, str]:
    """Direct-child pairs ``conv attr -> bn attr`` proven by the source patterns (see module doc)."""
    mentions: dict[str, list[ast.Attribute]] = {}
    for node in _walk(trees):
        if isinstance(node, ast.Attribute):
            if node.attr in _REFLECTION:
                return {}
            mentions.setdefault(node.attr, []).append(node)
        elif isinstance(node, ast.Name) and node.id in {"getattr", "vars", "setattr"}:
            return {}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            mentions.setdefault(node.value, []).append(node)  # type: ignore[arg-type]

    found: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # conv attr -> [(conv attr node, bn attr node)]
    found_bn: dict[str, str] = {}
    for node in _walk(trees):
        # self.bn(self.conv(...))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_self(node.func.value):
            if len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Call):
                inner = node.args[0]
                if isinstance(inner.func, ast.Attribute) and _is_self(inner.func.value):
                    found.setdefault(inner.func.attr, []).append((inner.func, node.func))
                    found_bn.setdefault(inner.func.attr, node.func.attr)
        # v = self.conv(...); v = self.bn(v)
        body = getattr(node, "body", None)
        for block in (body, getattr(node, "orelse", None), getattr(node, "finalbody", None)):
            if not isinstance(block, list):
                continue
            for first, second in zip(block, block[1:]):
                if not (isinstance(first, ast.Assign) and isinstance(second, ast.Assign)):
                    continue
                if len(first.targets) != 1 or len(second.targets) != 1:
                    continue
                t1, t2 = first.targets[0], second.targets[0]
                if not (isinstance(t1, ast.Name) and isinstance(t2, ast.Name) and t1.id == t2.id):
                    continue
                v1, v2 = first.value, second.value
                if not (isinstance(v1, ast.Call) and isinstance(v1.func, ast.Attribute) and _is_self(v1.func.value)):
                    continue
                if not (isinstance(v2, ast.Call) and isinstance(v2.func, ast.Attribute) and _is_self(v2.func.value)):
                    continue
                if len(v2.args) != 1 or v2.keywords or not (isinstance(v2.args[0], ast.Name) and v2.args[0].id == t1.id):
                    continue
                found.setdefault(v1.func.attr, []).append((v1.func, v2.func))
                found_bn.setdefault(v1.func.attr, v2.func.attr)
    out = {}
    for conv_attr, uses in found.items():
        bn_attr = found_bn[conv_attr]
        if any(b.attr != bn_attr for _, b in uses):
            continue
        conv_nodes = {id(c) for c, _ in uses}
        bn_nodes = {id(b) for _, b in uses}
        # every mention of both names must be one of the matched patterns
        if {id(n) for n in mentions.get(conv_attr, [])} != conv_nodes:
            continue
        if {id(n) for n in mentions.get(bn_attr, [])} != bn_nodes:
            continue
        # the bn must not be fed by another conv pattern either
        if any(found_bn.get(other) == bn_attr for other in found if other != conv_attr):
            continue
        out[conv_attr] = bn_attr
    return out


# ------------------------------------------------------------------------------------------ planning


class _ProbeFailed(RuntimeError):
    pass


def _probe_failed(plan: ConvBiasPlan, why: str) -> None:
    msg = f"the forward with example_input failed ({why}); decided from the traced code alone"
    plan.notes.append(msg)
    warnings.warn(f"conv-bias: {msg}", stacklevel=3)


def _dynamic_veto(model: nn.Module, pairs: dict[str, str], example_input: Any) -> dict[str, str]:
    """Run ``example_input`` in train and eval mode; return conv name -> reason for refuted pairs."""
    args, kwargs = _as_args(example_input)
    vetoed: dict[str, str] = {}
    for mode in (True, False):
        outs: dict[str, list[Tensor]] = {c: [] for c in pairs}
        ins: dict[str, list[Tensor]] = {b: [] for b in pairs.values()}
        handles = []
        for c in pairs:
            handles.append(
                model.get_submodule(c).register_forward_hook(lambda _m, _i, o, c=c: outs[c].append(o))
            )
        for b in set(pairs.values()):
            handles.append(
                model.get_submodule(b).register_forward_pre_hook(lambda _m, i, b=b: ins[b].append(i[0]))
            )
        try:
            with _side_effect_free(model), _training_mode(model, mode):
                model(*args, **kwargs)
        except Exception as exc:  # the probe only adds evidence: a failing one vetoes nothing
            raise _ProbeFailed(_first_line(exc)) from exc
        finally:
            for h in handles:
                h.remove()
        for c, b in pairs.items():
            got, fed = outs[c], ins[b]
            if len(got) != len(fed) or any(x is not y for x, y in zip(got, fed)):
                vetoed[c] = "example_input shows its output and the BatchNorm's input differ"
            elif any(x.dim() < 3 for x in fed):
                vetoed[c] = "BatchNorm sees a tensor without a spatial dimension (unbatched input?)"
    return vetoed


def plan_conv_bias_removal(model: nn.Module, example_input: Any = None) -> ConvBiasPlan:
    """Decide which conv biases can be folded into a BatchNorm, without changing anything.

    Args:
        model: any ``nn.Module`` (a LightningModule too).
        example_input: optional input for ``model(...)``: a Tensor, a tuple of positional arguments or a
            dict of keyword arguments. Materialises lazy modules and vetoes pairs its forward refutes.

    Returns:
        A :class:`ConvBiasPlan`: accepted ``pairs`` and the ``skipped`` convs with their reasons.

    Example:
        >>> net = nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4))
        >>> plan_conv_bias_removal(net).pairs
        {'0': '1'}
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}.")
    plan = ConvBiasPlan()
    if example_input is not None:
        args, kwargs = _as_args(example_input)
        if any(_lazy(m) for m in model.modules()):
            try:
                with _side_effect_free(model), _training_mode(model, False):
                    model(*args, **kwargs)  # materialise lazy modules (eval: no statistics update)
            except Exception as exc:
                _probe_failed(plan, _first_line(exc))
                example_input = None
    names_of: dict[int, list[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        names_of.setdefault(id(m), []).append(name)
    name_of = {i: n[0] for i, n in names_of.items()}
    biased = {name_of[id(m)]: m for m in model.modules() if _biased(m)}
    if not biased:
        return plan
    # candidate pairs: conv name -> (bn name, decision-module name, whole-model?)
    found: dict[str, tuple[str, str]] = {}
    rejected: dict[str, str] = {}
    untraceable: dict[str, nn.Module] = {}

    def subtree_has_biased(m: nn.Module) -> bool:
        return any(_biased(s) for s in m.modules())

    def visit(module: nn.Module, prefix: str) -> None:
        if not subtree_has_biased(module) or _is_conv(module):
            return
        reason_untraced: Optional[str] = None
        if prefix == "" and hasattr(module, "training_step"):
            reason_untraced = "LightningModule: its step methods may call submodules outside forward"
        else:
            results = []
            for mode in (True, False):
                try:
                    with _training_mode(module, mode):
                        graph = _trace(module)
                    results.append(_analyse_graph(module, graph))
                except Exception as exc:  # fx raises many kinds (TraceError, TypeError, NotImplemented, ...)
                    reason_untraced = _first_line(exc)
                    break
            if reason_untraced is None:
                acc_t, rej_t = results[0]
                acc_e, rej_e = results[1]
                for cid in set(acc_t) | set(rej_t) | set(acc_e) | set(rej_e):
                    cname = name_of[cid]
                    if cid in acc_t and cid in acc_e and acc_t[cid] == acc_e[cid]:
                        found[cname] = (name_of[acc_t[cid]], prefix)
                    else:
                        rejected[cname] = rej_t.get(cid) or rej_e.get(cid) or "train and eval graphs differ"
                return
        untraceable[prefix] = module
        where = f"'{prefix}'" if prefix else "the model"
        plan.notes.append(f"{where} ({type(module).__name__}) cannot be traced: {reason_untraced}")
        trees = _class_trees(module)
        children = dict(module.named_children())
        if trees is not None:
            for conv_attr, bn_attr in _ast_pairs(module, trees).items():
                c, b = children.get(conv_attr), children.get(bn_attr)
                if c is not None and b is not None and _biased(c) and _is_bn(b):
                    found[_join(prefix, conv_attr)] = (_join(prefix, bn_attr), prefix)
        for child_name, child in children.items():
            full = _join(prefix, child_name)
            if _biased(child) and full not in found:
                rejected.setdefault(
                    full,
                    f"used in the untraceable forward of {where} ({reason_untraced}), not as "
                    "`self.bn(self.conv(x))`; put conv+BN in a traceable submodule (e.g. nn.Sequential)",
                )
            visit(child, full)

    visit(model, "")

    # safety filters on the candidates
    for cname, (bname, decider) in list(found.items()):
        conv, bn = model.get_submodule(cname), model.get_submodule(bname)
        reason = None
        if decider in untraceable or decider != "":
            # decided locally: sharing outside the decider and reach-ins from untraceable ancestors
            if len(names_of[id(conv)]) > 1 or len(names_of[id(bn)]) > 1:
                reason = "the conv or its BatchNorm is registered under several names"
            for anc_name, anc in untraceable.items():
                if reason:
                    break
                inside = decider == anc_name or anc_name == "" or decider.startswith(anc_name + ".")
                if not inside or (anc_name == decider):
                    continue
                rel = [p[len(decider) + 1 :] if decider else p for p in (cname, bname)]
                tokens = {t for r in rel for t in r.split(".")}
                dec_rel = (decider[len(anc_name) + 1 :] if anc_name else decider).split(".")
                trees = _class_trees(anc)
                where = f"'{anc_name}'" if anc_name else "model"
                if trees is None:
                    reason = f"source of the untraceable {where} is unavailable to check direct accesses"
                else:
                    hit = _reaches_in(trees, tokens, dec_rel)
                    if hit:
                        reason = f"the untraceable {where} may use it directly: {hit}"
        if reason is None and (_lazy(conv) or _lazy(bn)):
            reason = "lazy module not initialised yet: run one forward pass first or pass example_input"
        if reason is None and (_has_forward_hooks(conv) or _has_forward_hooks(bn)):
            reason = "the conv or its BatchNorm has forward hooks that would see the change"
        if reason is None and getattr(bn, "num_features", None) != conv.out_channels:
            reason = f"BatchNorm has {bn.num_features} features, conv has {conv.out_channels} outputs"
        if reason is not None:
            del found[cname]
            rejected[cname] = reason
    if example_input is not None and found:
        try:
            vetoed = _dynamic_veto(model, {c: b for c, (b, _) in found.items()}, example_input)
        except _ProbeFailed as exc:
            _probe_failed(plan, str(exc))
            vetoed = {}
        for cname, why in vetoed.items():
            del found[cname]
            rejected[cname] = why

    for cname in biased:
        if cname in found:
            plan.pairs[cname] = found[cname][0]
        else:
            plan.skipped[cname] = rejected.get(cname, "not called in the traced forward")
    return plan


# -------------------------------------------------------------------------------------------- apply


class _FoldOnLoad:
    """``load_state_dict`` pre-hook: fold biases of a checkpoint of the unchanged model on load."""

    def __init__(self) -> None:
        self.pairs: dict[str, str] = {}

    def __call__(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        folded = _fold_in_place(state_dict, self.pairs, prefix)
        if folded:
            warnings.warn(
                f"conv-bias: folded the bias of {len(folded)} conv(s) of a checkpoint of the unchanged "
                "model into the BatchNorm running means on load (outputs are unchanged).",
                stacklevel=2,
            )


def _fold_in_place(state_dict: dict, pairs: Mapping[str, str], prefix: str = "") -> list[str]:
    folded = []
    for conv, bn in pairs.items():
        bkey, rkey = f"{prefix}{conv}.bias", f"{prefix}{bn}.running_mean"
        if bkey not in state_dict:
            continue
        bias = state_dict[bkey]
        if rkey in state_dict:
            rm = state_dict[rkey]
            if rm is not None and not is_lazy(rm):
                state_dict[rkey] = (rm.double() - bias.detach().to(rm.device).double()).to(rm.dtype)
        elif f"{prefix}{bn}.running_var" in state_dict:
            continue  # malformed; leave the key so strict loading reports it
        del state_dict[bkey]
        folded.append(conv)
    return folded


def apply_conv_bias_plan(model: nn.Module, plan: ConvBiasPlan, *, fold_on_load: bool = True) -> list[str]:
    """Apply a :class:`ConvBiasPlan`: fold each bias into its BatchNorm's running mean, remove it.

    Args:
        model: the model the plan was made for.
        plan: from :func:`plan_conv_bias_removal`.
        fold_on_load: register a ``load_state_dict`` pre-hook on ``model`` that folds biases found in a
            state dict of the unchanged model (once per model; later calls extend it).

    Returns:
        The qualified names of the convs changed by this call.
    """
    changed = []
    with torch.no_grad():
        for cname, bname in plan.pairs.items():
            conv, bn = model.get_submodule(cname), model.get_submodule(bname)
            if conv.bias is None:
                continue
            rm = bn.running_mean
            if rm is not None and not is_lazy(rm):
                rm.copy_((rm.double() - conv.bias.detach().to(rm.device).double()).to(rm.dtype))
            conv.bias = None  # unregisters the parameter (state_dict and parameters() lose it)
            changed.append(cname)
    if fold_on_load and plan.pairs:
        hook = model.__dict__.get(_HOOK_ATTR)
        if hook is None:
            hook = _FoldOnLoad()
            model.__dict__[_HOOK_ATTR] = hook
            model._register_load_state_dict_pre_hook(hook)
        hook.pairs.update(plan.pairs)
    return changed


def remove_conv_bias(model: nn.Module, example_input: Any = None, *, fold_on_load: bool = True) -> list[str]:
    """Remove the bias of every convolution whose output feeds nothing but a BatchNorm.

    The bias is folded into the BatchNorm's running mean, so outputs and gradients of the remaining
    parameters are unchanged in train and eval mode. Idempotent: a second call changes nothing and
    returns ``[]``. For the reasons why a conv kept its bias, use :func:`plan_conv_bias_removal` (the
    reasons are also logged at DEBUG level on the ``lightning_speedups.functional.conv_bias`` logger).

    Args:
        model: any ``nn.Module``.
        example_input: optional forward input (Tensor, tuple of args or dict of kwargs), see
            :func:`plan_conv_bias_removal`.
        fold_on_load: fold biases of checkpoints of the unchanged model when they are loaded into
            ``model`` (a ``load_state_dict`` pre-hook).

    Returns:
        Qualified names of the convolutions changed by this call.

    Example:
        >>> net = nn.Sequential(nn.Conv3d(3, 8, 3, groups=1), nn.BatchNorm3d(8))
        >>> remove_conv_bias(net), remove_conv_bias(net)
        (['0'], [])
    """
    plan = plan_conv_bias_removal(model, example_input)
    for cname, why in plan.skipped.items():
        log.debug("conv-bias: keeping the bias of '%s': %s", cname, why)
    for note in plan.notes:
        log.debug("conv-bias: %s", note)
    return apply_conv_bias_plan(model, plan, fold_on_load=fold_on_load)


# -------------------------------------------------------------------------------------- checkpoints


def _pairs_of(pairs: Union[ConvBiasPlan, Mapping[str, str]]) -> Mapping[str, str]:
    if isinstance(pairs, ConvBiasPlan):
        return pairs.pairs
    if not isinstance(pairs, Mapping):
        raise TypeError(
            "`pairs` must be a ConvBiasPlan or a mapping conv name -> BatchNorm name "
            f"(e.g. `plan_conv_bias_removal(model).pairs`), got {type(pairs).__name__}."
        )
    return pairs


def fold_conv_bias_state_dict(
    state_dict: Mapping[str, Any], pairs: Union[ConvBiasPlan, Mapping[str, str]], *, prefix: str = ""
) -> dict[str, Any]:
    """Turn a state dict of the unchanged model into one for the changed model.

    Each ``<conv>.bias`` listed in ``pairs`` is subtracted from ``<bn>.running_mean`` and dropped.
    Keys of convs already without bias are left alone, so the function is idempotent. The input is not
    modified.

    Args:
        state_dict: state dict of the unchanged model (or of a changed one: then nothing happens).
        pairs: ``plan.pairs`` (conv name -> BatchNorm name) or the plan itself.
        prefix: key prefix of the model inside ``state_dict`` (e.g. ``"model."``).

    Returns:
        A new dict (tensors not listed are shared with the input).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
        >>> old = net.state_dict()
        >>> plan = plan_conv_bias_removal(net); _ = apply_conv_bias_plan(net, plan)
        >>> net.load_state_dict(fold_conv_bias_state_dict(old, plan))
        <All keys matched successfully>
    """
    out = dict(state_dict)
    _fold_in_place(out, _pairs_of(pairs), prefix)
    return out


def unfold_conv_bias_state_dict(
    state_dict: Mapping[str, Any], pairs: Union[ConvBiasPlan, Mapping[str, str]], *, prefix: str = ""
) -> dict[str, Any]:
    """Turn a state dict of the changed model into one an unchanged model loads with equal outputs.

    Adds a zero ``<conv>.bias`` for every pair (a zero bias with the shifted running mean is exactly the
    changed model). Idempotent; the input is not modified.

    Args:
        state_dict: state dict of the changed model.
        pairs: ``plan.pairs`` (conv name -> BatchNorm name) or the plan itself.
        prefix: key prefix of the model inside ``state_dict``.
    """
    out = dict(state_dict)
    for conv, bn in _pairs_of(pairs).items():
        key = f"{prefix}{conv}.bias"
        weight = out.get(f"{prefix}{conv}.weight")
        if key in out or weight is None:
            continue
        ref = out.get(f"{prefix}{bn}.running_mean")
        n = ref.numel() if ref is not None else out.get(f"{prefix}{bn}.weight").numel()
        out[key] = torch.zeros(n, dtype=weight.dtype, device=weight.device)
    return out


def remap_optimizer_state_without(
    optimizer_state: Mapping[str, Any], original_names: Sequence[str], removed: Sequence[str]
) -> dict[str, Any]:
    """Drop removed parameters from an optimizer state dict of the unchanged model.

    Works when the optimizer had a single parameter group holding the model's parameters in
    ``named_parameters()`` order (the ``self.parameters()`` idiom): otherwise there is no way to tell
    which saved slot held which parameter and a ``ValueError`` says what to do.

    Args:
        optimizer_state: ``optimizer.state_dict()`` saved with the unchanged model.
        original_names: parameter names of the unchanged model, in ``named_parameters()`` order.
        removed: names of the removed parameters (``<conv>.bias``).
    """
    groups = optimizer_state.get("param_groups", [])
    n_saved = sum(len(g["params"]) for g in groups)
    if len(groups) != 1 or n_saved != len(original_names):
        raise ValueError(
            f"the optimizer state has {len(groups)} parameter group(s) with {n_saved} parameters; the "
            f"unchanged model has {len(original_names)} parameters, so the slots of the removed conv "
            "biases cannot be identified"
        )
    ids = list(groups[0]["params"])
    drop = {ids[i] for i, n in enumerate(original_names) if n in set(removed)}
    keep = [i for i in ids if i not in drop]
    renumber = {old: new for new, old in enumerate(keep)}
    state = {renumber[k]: v for k, v in optimizer_state.get("state", {}).items() if k in renumber}
    group = dict(groups[0], params=[renumber[i] for i in keep])
    return dict(optimizer_state, state=state, param_groups=[group])
