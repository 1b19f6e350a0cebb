"""Loader settings (workers, pinning, persistence, prefetch) applied to an existing DataLoader.

Card (tips T02 ``loader-workers``, T03 ``pin-memory``, T21 ``non-blocking``):

* **What it does.** :class:`LoaderSettings` holds the four settings, each a value, ``"auto"`` or
  ``None`` (keep what the loader has). :func:`resolve_loader_settings` turns them into concrete
  DataLoader arguments for one loader on one machine, with the reasons and warnings.
  :func:`rebuild_dataloader` re-creates a DataLoader (or a subclass) with some arguments changed
  and everything else kept: dataset, sampler or batch sampler, collate function, batch size,
  ``drop_last``, shuffling, ``worker_init_fn``, generator, and attributes set after construction.
  It follows Lightning's own re-instantiation (the one that injects distributed samplers).
* **Seed tips.** ``num_workers`` 4 x GPUs, ``pin_memory=True``, ``non_blocking=True``.
* **Expected gain.** Up to 2x per epoch when a GPU waits for data; nothing on a 2-core CPU box.
* **When it hurts.** Workers steal cores from a CPU training step; pinned memory only costs when
  batches stay on the CPU; persistent workers hold their memory for the whole run.

Examples:
    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> dl = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, shuffle=True)
    >>> new = rebuild_dataloader(dl, num_workers=0, pin_memory=False)
    >>> new.batch_size, type(new.sampler).__name__
    (4, 'RandomSampler')
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.utils.data import BatchSampler, DataLoader

from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional.loaders import (
    auto_num_workers,
    available_cpus,
    worker_pickle_problem,
)
from lightning_speedups.trainer.internals import reinstantiate_loader

__all__ = [
    "LoaderRebuildError",
    "LoaderSettings",
    "ResolvedSettings",
    "rebuild_dataloader",
    "resolve_loader_settings",
]

Auto = Literal["auto"]


class LoaderRebuildError(RuntimeError):
    """The DataLoader could not be re-created with the new settings."""


def _check_choice(name: str, value: Any, kind: type, allow_auto: bool = True) -> None:
    if value is None or (allow_auto and value == "auto"):
        return
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingTypeError(f"`{name}` must be True, False, 'auto' or None (keep the loader's), got {value!r}.")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        extra = ", 'auto'" if allow_auto else ""
        raise SettingTypeError(f"`{name}` must be an int{extra} or None (keep the loader's), got {value!r}.")
    if value < 0:
        raise SettingError(f"`{name}` must be >= 0, got {value}.")


@dataclass
class LoaderSettings:
    """What to set on a DataLoader. ``None`` keeps the loader's own value.

    Args:
        num_workers: a number, ``"auto"`` (decide from the CPUs this process may use, the devices
            and the accelerator, see :func:`~lightning_speedups.functional.loaders.auto_num_workers`)
            or ``None``.
        pin_memory: ``True``, ``False``, ``"auto"`` (pin only when batches go to a CUDA device) or
            ``None``. ``True`` without CUDA is ignored, with a warning.
        persistent_workers: ``True``, ``False``, ``"auto"`` (on whenever there are workers) or
            ``None``. Always off without workers.
        prefetch_factor: batches each worker loads ahead, or ``None`` (PyTorch's default, 2).
            Ignored without workers.

    Examples:
        >>> LoaderSettings(num_workers=2).num_workers
        2
    """

    num_workers: int | Auto | None = "auto"
    pin_memory: bool | Auto | None = "auto"
    persistent_workers: bool | Auto | None = "auto"
    prefetch_factor: int | None = None

    def __post_init__(self) -> None:
        _check_choice("num_workers", self.num_workers, int)
        _check_choice("pin_memory", self.pin_memory, bool)
        _check_choice("persistent_workers", self.persistent_workers, bool)
        _check_choice("prefetch_factor", self.prefetch_factor, int, allow_auto=False)
        if self.prefetch_factor == 0:
            raise SettingError("`prefetch_factor` must be >= 1 (or None for PyTorch's default), got 0.")


@dataclass
class ResolvedSettings:
    """Concrete DataLoader arguments for one loader, with why and what went wrong."""

    kwargs: dict[str, Any]
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        k = self.kwargs
        return (
            f"num_workers={k['num_workers']}, pin_memory={k['pin_memory']}, "
            f"persistent_workers={k['persistent_workers']}, prefetch_factor={k['prefetch_factor']}"
        )


#: precisions under which Lightning casts floating batches on the host, before the transfer
HOST_CAST_PRECISIONS = ("16-true", "bf16-true", "64-true", "16", "bf16", "64", "transformer-engine-float16")


def dataset_device(dataset: Any, depth: int = 3) -> str | None:
    """The device type of the tensors a dataset holds directly, without reading a sample (``None``: unknown).

    Looks at ``TensorDataset.tensors`` and at tensor attributes of the data set (and of the data
    set a ``Subset`` / wrapper keeps in ``.dataset``), the usual shapes of a data set that was
    moved to the GPU up front. A GPU-resident data set must not be pinned: pinning a CUDA tensor
    raises in the loader's pin thread.
    """
    seen: list[Any] = [dataset]
    for _ in range(depth):
        if not seen:
            break
        current, seen = seen, []
        for ds in current:
            values = list(getattr(ds, "tensors", ()) or ())
            try:
                values += list(vars(ds).values())
            except TypeError:
                pass
            for v in values:
                if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                    return v.device.type
            inner = getattr(ds, "dataset", None)
            if inner is not None and inner is not ds:
                seen.append(inner)
    return None


@dataclass(frozen=True)
class _Machine:
    """Where one loader's batches go, and the CPUs the node's training processes share."""

    accelerator: str
    devices: int
    processes: int
    cpus: int

    @property
    def on_cuda(self) -> bool:
        return self.accelerator in ("cuda", "gpu")

    @property
    def cpus_per_process(self) -> int:
        return max(1, self.cpus // max(1, self.processes))


def resolve_loader_settings(
    settings: LoaderSettings,
    loader: DataLoader,
    *,
    accelerator: str = "cpu",
    devices: int = 1,
    processes_per_node: int | None = None,
    cpus: int | None = None,
    reload_every_n_epochs: int = 0,
    precision: str | None = None,
    integer_batches: bool = False,
) -> ResolvedSettings:
    """Concrete ``num_workers`` / ``pin_memory`` / ``persistent_workers`` / ``prefetch_factor``.

    Args:
        settings: what was asked.
        loader: the loader the settings apply to (its dataset and current values matter).
        accelerator: the device type batches go to (``"cpu"``, ``"cuda"``, ``"mps"``, ...).
        devices: devices on this node. processes_per_node: training processes on this node.
        cpus: CPUs of the node's training (default: :func:`available_cpus`).
        reload_every_n_epochs: the Trainer's ``reload_dataloaders_every_n_epochs`` (persistent
            pinned workers are unstable when loaders are reloaded, PyTorch issue 91252).
        precision: the Trainer's precision. Under ``16-true`` / ``bf16-true`` / ``64-true``
            Lightning casts floating batches on the host before the transfer, so a pinned batch is
            replaced by an unpinned copy: ``pin_memory="auto"`` does not pin then, unless
            ``integer_batches`` (the batches stay integer until the device, e.g. DeviceNormalize).

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> r = resolve_loader_settings(LoaderSettings(), DataLoader(TensorDataset(torch.zeros(4))))
        >>> r.kwargs["num_workers"], r.kwargs["pin_memory"]
        (0, False)
    """
    accelerator = str(accelerator).lower()
    reasons: list[str] = []
    warns: list[str] = []
    if cpus is None:
        cpus = available_cpus().count
    procs = processes_per_node or (devices if accelerator not in ("cpu",) else 1)
    machine = _Machine(accelerator=accelerator, devices=devices, processes=procs, cpus=cpus)
    nw = _resolve_num_workers(settings.num_workers, loader, machine, reasons, warns)
    pin = _resolve_pin_memory(settings.pin_memory, loader, machine, precision, integer_batches, reasons, warns)
    pers = _resolve_persistent_workers(settings.persistent_workers, loader, nw, pin, reload_every_n_epochs, reasons)
    # prefetch
    pf = settings.prefetch_factor
    if pf is None:
        pf = loader.prefetch_factor if loader.num_workers > 0 else None
    if nw == 0:
        pf = None

    kwargs = {
        "num_workers": nw,
        "pin_memory": pin,
        "persistent_workers": pers,
        "prefetch_factor": pf,
    }
    return ResolvedSettings(kwargs=kwargs, reasons=reasons, warnings=warns)


def _resolve_num_workers(
    asked: int | Auto | None, loader: DataLoader, machine: _Machine, reasons: list[str], warns: list[str]
) -> int:
    """The workers: kept, chosen by :func:`auto_num_workers` or as asked; 0 when the dataset cannot reach them."""
    nw = asked
    if nw is None:
        nw = loader.num_workers
        reasons.append(f"num_workers={nw} (kept)")
    elif nw == "auto":
        choice = auto_num_workers(
            accelerator=machine.accelerator,
            devices=machine.devices,
            processes_per_node=machine.processes,
            cpus=machine.cpus,
            dataset=loader.dataset,
        )
        nw = choice.num_workers
        reasons.append(f"num_workers={nw} ({choice.reason})")
    else:
        reasons.append(f"num_workers={nw} (asked)")
        per_process = machine.cpus_per_process
        if nw > per_process:
            warns.append(
                f"num_workers={nw} is more than the {per_process} CPU(s) this process may use: the workers will"
                " compete with each other and with the training step. Use num_workers='auto' or a smaller number."
            )
    if nw > 0:
        problem = worker_pickle_problem(loader)
        if problem is not None:
            warns.append(f"num_workers={nw} cannot work: {problem}. Falling back to num_workers=0.")
            reasons[-1] = "num_workers=0 (dataset cannot reach worker processes)"
            nw = 0
    return nw


def _resolve_pin_memory(
    asked: bool | Auto | None,
    loader: DataLoader,
    machine: _Machine,
    precision: str | None,
    integer_batches: bool,
    reasons: list[str],
    warns: list[str],
) -> bool:
    """Pinning: kept, decided for ``"auto"``, or as asked unless it cannot help (warned)."""
    pin = asked
    on_cuda, accelerator = machine.on_cuda, machine.accelerator
    if pin is None:
        pin = bool(loader.pin_memory)
    elif pin == "auto":
        pin = on_cuda
        why = "batches go to CUDA" if on_cuda else f"batches go to {accelerator}"
        resident = dataset_device(loader.dataset) if on_cuda else None
        if resident is not None:
            pin, why = False, f"the data set's tensors already live on {resident}; only CPU tensors can be pinned"
        elif on_cuda and precision in HOST_CAST_PRECISIONS and not integer_batches:
            pin, why = (
                False,
                (
                    f"under precision {precision} Lightning casts floating batches on the host before the transfer,"
                    " replacing a pinned batch by an unpinned copy"
                ),
            )
        reasons.append(f"pin_memory={pin} ({why})")
    elif pin and on_cuda and dataset_device(loader.dataset) is not None:
        warns.append(
            f"pin_memory=True ignored: the data set's tensors already live on {dataset_device(loader.dataset)};"
            " only CPU tensors can be pinned (the loader's pin thread would raise)."
        )
        pin = False
    elif pin and not on_cuda:
        warns.append(
            f"pin_memory=True ignored: batches go to {accelerator}, not a CUDA device; pinning would only cost there."
        )
        pin = False
    return pin


def _resolve_persistent_workers(
    asked: bool | Auto | None, loader: DataLoader, nw: int, pin: bool, reload_every_n_epochs: int, reasons: list[str]
) -> bool:
    """Persistence: kept or as asked, ``"auto"`` on with workers (not with pinning and reloaded loaders); off without workers."""
    pers = asked
    if pers is None:
        pers = bool(loader.persistent_workers)
    elif pers == "auto":
        pers = nw > 0 and not (pin and reload_every_n_epochs > 0)
    if pers and nw == 0:
        pers = False
        if asked is True:
            reasons.append("persistent_workers=False (no workers)")
    return pers


def _saved(loader: Any, name: str) -> Any:
    return getattr(loader, f"__pl_saved_{name}")


def _init_params(cls: type[Any]) -> tuple[dict[str, inspect.Parameter], bool]:
    params = dict(inspect.signature(cls.__init__).parameters)
    params.pop("self", None)
    variadic = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return params, variadic


def _args_from_saved(loader: DataLoader, overrides: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """Re-run the user's own constructor call (captured by Lightning while the hook ran)."""
    args = tuple(_saved(loader, "args"))
    kwargs = dict(_saved(loader, "kwargs"))
    arg_names = tuple(_saved(loader, "arg_names"))
    defaults = dict(_saved(loader, "default_kwargs"))
    _, variadic = _init_params(type(loader))
    for key, value in overrides.items():
        if key in arg_names:
            i = arg_names.index(key)
            args = args[:i] + (value,) + args[i + 1 :]
        elif key in kwargs or key in defaults or variadic:
            kwargs[key] = value
        else:
            raise LoaderRebuildError(
                f"`{type(loader).__name__}.__init__` has no `{key}` argument (nor **kwargs) to set it through."
            )
    return args, kwargs


def _args_from_attributes(loader: DataLoader, overrides: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """Rebuild from the instance's attributes, as Lightning does for loaders made outside its hooks."""
    cls = type(loader)
    params, variadic = _init_params(cls)
    if variadic:
        base, _ = _init_params(DataLoader)
        for k, v in base.items():
            params.setdefault(k, v)
    attrs = {k: v for k, v in vars(loader).items() if not k.startswith("_")}
    attrs["multiprocessing_context"] = loader.multiprocessing_context
    kwargs = {
        name: attrs[name]
        for name, p in params.items()
        if name in attrs and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.default is not attrs[name]
    }
    kwargs["dataset"] = loader.dataset
    # sampling: keep the very sampler objects (their generators and state) without re-deriving them
    for k in ("sampler", "batch_sampler", "batch_size", "drop_last", "shuffle"):
        kwargs.pop(k, None)
    custom_batch_sampler = loader.batch_sampler is not None and (
        loader.batch_size is None or type(loader.batch_sampler) is not BatchSampler
    )
    if custom_batch_sampler:
        kwargs.update(batch_sampler=loader.batch_sampler)
    else:
        kwargs.update(
            sampler=loader.sampler,
            batch_size=loader.batch_size,
            drop_last=loader.drop_last,
        )
    kwargs.update(overrides)
    missing = sorted(
        name
        for name, p in params.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty and name not in kwargs
    )
    if missing:
        raise LoaderRebuildError(
            f"`{cls.__name__}` needs {missing} to be re-created, and they are not attributes of the instance."
            " Create the loader inside the `*_dataloader` hook (Lightning then records its arguments), or store"
            " those arguments as attributes of the same name."
        )
    if not variadic:
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            raise LoaderRebuildError(f"`{cls.__name__}.__init__` does not accept {unknown}.")
    return (), kwargs


def rebuild_dataloader(loader: DataLoader, **overrides: Any) -> DataLoader:
    """A new DataLoader like ``loader`` (same class) with ``overrides`` applied, everything else kept.

    Loaders created inside a ``*_dataloader`` hook while Lightning runs carry their constructor
    arguments; the call is repeated with the overrides. Other loaders are rebuilt from their
    attributes, keeping the same sampler or batch-sampler objects.

    Args:
        loader: a :class:`~torch.utils.data.DataLoader` or a subclass.
        **overrides: constructor arguments to change, e.g. ``num_workers=4``.

    Raises:
        LoaderRebuildError: when the class does not let the arguments through, or an override was
            not applied (for example a subclass that hard-codes ``num_workers``).

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> rebuild_dataloader(DataLoader(TensorDataset(torch.zeros(4)), batch_size=2), num_workers=1).num_workers
        1
    """
    if not isinstance(loader, DataLoader):
        raise SettingTypeError(f"`loader` must be a torch.utils.data.DataLoader, got {type(loader).__name__}.")
    unknown = set(overrides) - set(_init_params(DataLoader)[0])
    if unknown:
        raise SettingTypeError(f"`rebuild_dataloader` got arguments DataLoader does not have: {sorted(unknown)}.")
    if overrides.get("num_workers") == 0 and loader.multiprocessing_context is not None:
        overrides["multiprocessing_context"] = None  # DataLoader refuses a context without workers
    if overrides.get("num_workers") == 0 and loader.timeout:
        overrides["timeout"] = 0  # a single-process loader refuses a timeout when iterated
    if hasattr(loader, "__pl_saved_args"):
        args, kwargs = _args_from_saved(loader, overrides)
    else:
        args, kwargs = _args_from_attributes(loader, overrides)
    try:
        new = reinstantiate_loader(loader, *args, **kwargs)
    except Exception as ex:
        raise LoaderRebuildError(f"`{type(loader).__name__}(...)` failed with the new settings: {ex}") from ex
    for key, value in overrides.items():
        got = getattr(new, key, value)
        if key == "prefetch_factor" and value is None:
            continue  # PyTorch fills in its default
        if got != value:
            raise LoaderRebuildError(
                f"`{type(loader).__name__}` ignored `{key}={value!r}` (it has {key}={got!r}); it probably sets"
                " the value itself in `__init__`."
            )
    return new


def machine_from_trainer(trainer: Any) -> dict[str, Any]:
    """The facts :func:`resolve_loader_settings` needs, read from a Trainer (``{}`` for ``None``).

    Returns ``accelerator`` (the root device type), ``devices`` (devices on this node),
    ``processes_per_node`` (training processes on this node), ``reload_every_n_epochs``,
    ``precision`` and ``integer_batches`` (a callback keeps batches integer until the device).
    """
    if trainer is None:
        return {}
    strategy = trainer.strategy
    try:
        accelerator = strategy.root_device.type
    except (AttributeError, RuntimeError):  # a strategy without a root device yet (before setup)
        accelerator = "cpu"
    devices = max(1, int(getattr(trainer, "num_devices", 1) or 1))
    # imported here: lightning_speedups.callbacks imports this module, so a user's first import of
    # lightning_speedups.data (a datamodule in their script) must not start with the callbacks package
    from lightning_speedups.trainer.namespace import is_lightning

    if is_lightning(strategy, "ParallelStrategy"):  # either Lightning package's
        procs = max(1, int(getattr(strategy, "num_processes", devices) or devices))
    else:
        procs = 1
    return {
        "accelerator": accelerator,
        "devices": devices,
        "processes_per_node": procs,
        "reload_every_n_epochs": int(getattr(trainer, "reload_dataloaders_every_n_epochs", 0) or 0),
        "precision": str(getattr(trainer, "precision", "32-true")),
        "integer_batches": any(
            getattr(cb, "expects_integer_batches", False) for cb in getattr(trainer, "callbacks", [])
        ),
    }
