"""T16 conv-bias, planning: decide which conv biases can fold into a BatchNorm, changing nothing.

How the decision is made is described in :mod:`lightning_speedups.functional.conv_bias`; the source
analysis for untraceable modules lives in :mod:`lightning_speedups.functional.conv_bias_source`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm  # private: no public base of all BatchNorms
from torch.nn.modules.conv import _ConvNd  # private: no public base of all convolutions
from torch.nn.parameter import is_lazy

from lightning_speedups.errors import SettingTypeError
from lightning_speedups.functional.conv_bias_source import (
    ast_pairs,
    class_trees,
    dead_methods,
    reaches_in,
    referenced_names,
)

__all__ = ["ConvBiasPlan", "forward_args", "plan_conv_bias_removal"]

_CONV_FORWARDS = {
    cls.forward for cls in (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
}
_BN_FORWARDS = {_BatchNorm.forward, nn.SyncBatchNorm.forward}


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
    # private: nn.Module has no public way to ask whether forward hooks are registered
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


def forward_args(example_input: Any) -> tuple[tuple, dict]:
    """``example_input`` (a Tensor, a tuple of positional arguments or a dict of keyword arguments) as ``(args, kwargs)``."""
    if isinstance(example_input, Tensor):
        return (example_input,), {}
    if isinstance(example_input, (tuple, list)):
        return tuple(example_input), {}
    if isinstance(example_input, Mapping):
        return (), dict(example_input)
    raise SettingTypeError(
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
                    if not (isinstance(src, torch.fx.Node) and src.op == "call_module" and src in nodes):
                        reason = "its BatchNorm also normalises other inputs"
                        break
        if reason is None:
            accepted[cid] = bid
        else:
            rejected[cid] = reason
    return accepted, rejected


# ------------------------------------------------------------------------------------------ planning


class _ProbeFailed(RuntimeError):
    pass


def _probe_failed(plan: ConvBiasPlan, why: str) -> None:
    msg = f"the forward with example_input failed ({why}); decided from the traced code alone"
    plan.notes.append(msg)
    warnings.warn(f"conv-bias: {msg}", stacklevel=4)  # the caller of plan_conv_bias_removal, through one helper


def _dynamic_veto(model: nn.Module, pairs: dict[str, str], example_input: Any) -> dict[str, str]:
    """Run ``example_input`` in train and eval mode; return conv name -> reason for refuted pairs."""
    args, kwargs = forward_args(example_input)
    vetoed: dict[str, str] = {}
    for mode in (True, False):
        outs: dict[str, list[Tensor]] = {c: [] for c in pairs}
        ins: dict[str, list[Tensor]] = {b: [] for b in pairs.values()}
        handles = []
        for c in pairs:
            handles.append(
                model.get_submodule(c).register_forward_hook(lambda _m, _i, o, c=c, outs=outs: outs[c].append(o))
            )
        for b in set(pairs.values()):
            handles.append(
                model.get_submodule(b).register_forward_pre_hook(lambda _m, i, b=b, ins=ins: ins[b].append(i[0]))
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


@dataclass
class _Search:
    """One planning run: the model's module names and the candidate pairs found so far."""

    model: nn.Module
    plan: ConvBiasPlan
    #: id of a module -> every name it is registered under (first: the name the plan uses)
    names_of: dict[int, list[str]]
    #: candidate pairs: conv name -> (bn name, name of the module whose graph or source decided it)
    found: dict[str, tuple[str, str]] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    untraceable: dict[str, nn.Module] = field(default_factory=dict)
    #: names in the model's source, read once when needed
    referenced: Optional[frozenset[str]] = None
    #: id of a module -> the name the plan uses for it
    name_of: dict[int, str] = field(init=False)

    def __post_init__(self) -> None:
        self.name_of = {i: n[0] for i, n in self.names_of.items()}


def plan_conv_bias_removal(model: nn.Module, example_input: Any = None) -> ConvBiasPlan:
    """Decide which conv biases can be folded into a BatchNorm, without changing anything.

    Args:
        model: any ``nn.Module`` (a LightningModule too).
        example_input: optional input for ``model(...)``: a Tensor, a tuple of positional arguments or a
            dict of keyword arguments. Materialises lazy modules and vetoes pairs its forward refutes.

    Returns:
        A :class:`ConvBiasPlan`: accepted ``pairs`` and the ``skipped`` convs with their reasons.

    Examples:
        >>> net = nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4))
        >>> plan_conv_bias_removal(net).pairs
        {'0': '1'}
    """
    if not isinstance(model, nn.Module):
        raise SettingTypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}.")
    plan = ConvBiasPlan()
    if example_input is not None:
        example_input = _materialise_lazy_modules(model, example_input, plan)
    names_of: dict[int, list[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        names_of.setdefault(id(m), []).append(name)
    search = _Search(model, plan, names_of)
    biased = [search.name_of[id(m)] for m in model.modules() if _biased(m)]
    if not biased:
        return plan
    _visit(search, model, "")
    _drop_unsafe_pairs(search)
    if example_input is not None and search.found:
        _drop_vetoed_pairs(search, example_input)
    for cname in biased:
        if cname in search.found:
            plan.pairs[cname] = search.found[cname][0]
        else:
            plan.skipped[cname] = search.rejected.get(cname, "not called in the traced forward")
    return plan


def _materialise_lazy_modules(model: nn.Module, example_input: Any, plan: ConvBiasPlan) -> Any:
    """Run ``example_input`` once in eval mode if the model has lazy modules; ``None`` if that forward fails."""
    args, kwargs = forward_args(example_input)
    if any(_lazy(m) for m in model.modules()):
        try:
            with _side_effect_free(model), _training_mode(model, False):
                model(*args, **kwargs)  # materialise lazy modules (eval: no statistics update)
        except Exception as exc:
            _probe_failed(plan, _first_line(exc))
            return None
    return example_input


def _subtree_has_biased(m: nn.Module) -> bool:
    return any(_biased(s) for s in m.modules())


def _visit(search: _Search, module: nn.Module, prefix: str) -> None:
    """Find the candidate pairs under ``module``: from its traced graphs, or else from its source and its children."""
    if not _subtree_has_biased(module) or _is_conv(module):
        return
    if prefix == "" and hasattr(module, "training_step"):
        reason_untraced = "LightningModule: its step methods may call submodules outside forward"
    else:
        traced = _pairs_from_graphs(search, module, prefix)
        if traced is None:
            return
        reason_untraced = traced
    _pairs_from_source(search, module, prefix, reason_untraced)


def _pairs_from_graphs(search: _Search, module: nn.Module, prefix: str) -> Optional[str]:
    """Trace ``module`` in train and eval mode and keep the pairs both graphs agree on.

    Returns ``None`` when traced, else why it cannot be traced.
    """
    results = []
    for mode in (True, False):
        try:
            with _training_mode(module, mode):
                graph = _trace(module)
            results.append(_analyse_graph(module, graph))
        except Exception as exc:  # fx raises many kinds (TraceError, TypeError, NotImplemented, ...)
            return _first_line(exc)
    acc_t, rej_t = results[0]
    acc_e, rej_e = results[1]
    for cid in set(acc_t) | set(rej_t) | set(acc_e) | set(rej_e):
        cname = search.name_of[cid]
        if cid in acc_t and cid in acc_e and acc_t[cid] == acc_e[cid]:
            search.found[cname] = (search.name_of[acc_t[cid]], prefix)
        else:
            search.rejected[cname] = rej_t.get(cid) or rej_e.get(cid) or "train and eval graphs differ"
    return None


def _pairs_from_source(search: _Search, module: nn.Module, prefix: str, reason_untraced: str) -> None:
    """For an untraceable ``module``: pairs of its children proven from its source, then each child visited."""
    search.untraceable[prefix] = module
    where = f"'{prefix}'" if prefix else "the model"
    search.plan.notes.append(f"{where} ({type(module).__name__}) cannot be traced: {reason_untraced}")
    trees = class_trees(module)
    children = dict(module.named_children())
    if trees is not None:
        for conv_attr, bn_attr in ast_pairs(module, trees).items():
            c, b = children.get(conv_attr), children.get(bn_attr)
            if c is not None and b is not None and _biased(c) and _is_bn(b):
                search.found[_join(prefix, conv_attr)] = (_join(prefix, bn_attr), prefix)
    for child_name, child in children.items():
        full = _join(prefix, child_name)
        if _biased(child) and full not in search.found:
            search.rejected.setdefault(
                full,
                f"used in the untraceable forward of {where} ({reason_untraced}), not as "
                "`self.bn(self.conv(x))`; put conv+BN in a traceable submodule (e.g. nn.Sequential)",
            )
        _visit(search, child, full)


def _drop_unsafe_pairs(search: _Search) -> None:
    """The safety filters on the candidates: move each pair that fails one to ``rejected``."""
    for cname, (bname, decider) in list(search.found.items()):
        reason = _unsafe_reason(search, cname, bname, decider)
        if reason is not None:
            del search.found[cname]
            search.rejected[cname] = reason


def _unsafe_reason(search: _Search, cname: str, bname: str, decider: str) -> Optional[str]:
    """Why the pair ``cname -> bname`` (decided in ``decider``) is not safe to fold, or ``None``."""
    conv, bn = search.model.get_submodule(cname), search.model.get_submodule(bname)
    if decider in search.untraceable or decider != "":
        reason = _reached_from_outside(search, conv, bn, cname, bname, decider)
        if reason is not None:
            return reason
    if _lazy(conv) or _lazy(bn):
        return "lazy module not initialised yet: run one forward pass first or pass example_input"
    if _has_forward_hooks(conv) or _has_forward_hooks(bn):
        return "the conv or its BatchNorm has forward hooks that would see the change"
    if getattr(bn, "num_features", None) != conv.out_channels:
        return f"BatchNorm has {bn.num_features} features, conv has {conv.out_channels} outputs"
    return None


def _reached_from_outside(
    search: _Search, conv: nn.Module, bn: nn.Module, cname: str, bname: str, decider: str
) -> Optional[str]:
    """For a pair decided locally: sharing outside the decider, or reach-ins from untraceable ancestors."""
    if len(search.names_of[id(conv)]) > 1 or len(search.names_of[id(bn)]) > 1:
        return "the conv or its BatchNorm is registered under several names"
    for anc_name, anc in search.untraceable.items():
        inside = decider == anc_name or anc_name == "" or decider.startswith(anc_name + ".")
        if not inside or (anc_name == decider):
            continue
        reason = _reach_in_from(search, anc_name, anc, cname, bname, decider)
        if reason:
            return reason
    return None


def _reach_in_from(
    search: _Search, anc_name: str, anc: nn.Module, cname: str, bname: str, decider: str
) -> Optional[str]:
    """Whether the source of the untraceable ancestor ``anc`` may use the pair directly."""
    rel = [p[len(decider) + 1 :] if decider else p for p in (cname, bname)]
    tokens = {t for r in rel for t in r.split(".")}
    dec_rel = (decider[len(anc_name) + 1 :] if anc_name else decider).split(".")
    trees = class_trees(anc)
    where = f"'{anc_name}'" if anc_name else "model"
    if trees is None:
        return f"source of the untraceable {where} is unavailable to check direct accesses"
    if search.referenced is None:
        search.referenced = referenced_names(search.model)
    dead = dead_methods(anc, trees, search.referenced)
    note = (
        f"methods of the untraceable {where} that training never calls (not named in the"
        f" model's source) were not searched for direct accesses: {', '.join(sorted(dead))}"
    )
    if dead and note not in search.plan.notes:
        search.plan.notes.append(note)
    hit = reaches_in(trees, tokens, dec_rel, dead)
    if hit:
        return f"the untraceable {where} may use it directly: {hit}"
    return None


def _drop_vetoed_pairs(search: _Search, example_input: Any) -> None:
    """Run ``example_input`` and move the pairs its forward refutes to ``rejected``."""
    try:
        vetoed = _dynamic_veto(search.model, {c: b for c, (b, _) in search.found.items()}, example_input)
    except _ProbeFailed as exc:
        _probe_failed(search.plan, str(exc))
        vetoed = {}
    for cname, why in vetoed.items():
        del search.found[cname]
        search.rejected[cname] = why
