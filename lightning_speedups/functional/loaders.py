"""Loader decisions that need no Trainer: usable CPUs, ``num_workers="auto"``, pinning, pickling.

Card: tip T02 ``loader-workers``; its seeds, expected gain and when it hurts are stated once, in the tip's
record (``python -m lightning_speedups tips``).

* **What it does.** :func:`available_cpus` counts the CPUs this process may really use (scheduler
  affinity and the cgroup CPU quota, v1 and v2 — not the host's count). :func:`auto_num_workers`
  turns that, the accelerator and the processes per node into a worker count, with the reason.
  :func:`unpinned_tensors` lists the tensors of a batch that a CUDA copy could not overlap
  (``non_blocking=True`` only overlaps from pinned memory). :func:`worker_pickle_problem` says
  why a loader's dataset cannot be sent to worker processes, if it cannot.
* **Caveats.** Workers compete with the training step for the same cores: on a 2-core CPU
  machine, 1 or 2 workers were 10% to 55% slower than 0 (benchmarks/data.md). Pinned memory on a
  machine without CUDA only costs. This is why ``auto`` looks at the machine, not at a rule.

Examples:
    >>> choice = auto_num_workers(accelerator="cuda", devices=1, cpus=16)
    >>> choice.num_workers
    4
    >>> auto_num_workers(accelerator="cpu", cpus=2).num_workers
    0
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from lightning_speedups.errors import SettingError

__all__ = [
    "CpuCount",
    "WorkersChoice",
    "auto_num_workers",
    "available_cpus",
    "cgroup_cpu_quota",
    "launcher_processes_per_node",
    "slurm_cpus_per_task",
    "unpinned_tensors",
    "worker_pickle_problem",
    "worker_start_method",
]

#: accelerators whose compute does not run on the host CPUs (workers can overlap with it).
_DEVICE_ACCELERATORS = ("cuda", "gpu", "mps", "xla", "tpu", "hpu", "xpu", "mtia")


@dataclass(frozen=True)
class CpuCount:
    """How many CPUs this process may use, and where the figure comes from."""

    count: int
    affinity: int
    quota: float | None
    reason: str


@dataclass(frozen=True)
class WorkersChoice:
    """A ``num_workers`` decision and the one-line reason for it."""

    num_workers: int
    reason: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_quota(
    proc_cgroup: str | Path = "/proc/self/cgroup",
    cgroup_root: str | Path = "/sys/fs/cgroup",
) -> float | None:
    """The CPU quota of this process's cgroup, in CPUs, or ``None`` when there is no limit.

    Reads cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), at the
    process's own cgroup and its parents (a limit set on a parent applies too), and at the root of
    the hierarchy (what a container sees of its own limit). The smallest limit found wins.

    Args:
        proc_cgroup: the file that names this process's cgroups (for tests).
        cgroup_root: where the cgroup file systems are mounted (for tests).

    Examples:
        >>> q = cgroup_cpu_quota()
        >>> q is None or q > 0
        True
    """
    root = Path(cgroup_root)
    text = _read(Path(proc_cgroup)) or ""
    limits: list[float] = []

    def candidates(base: Path, rel: str) -> list[Path]:
        rel = rel.strip("/")
        out = [base]
        if rel:
            parts = rel.split("/")
            out += [base.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)]
        return out

    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, rel = fields
        if controllers == "":  # cgroup v2 unified hierarchy
            bases = [root] if (root / "cgroup.controllers").exists() else [root / "unified"]
            for base in bases:
                for d in candidates(base, rel):
                    value = _read(d / "cpu.max")
                    if not value:
                        continue
                    quota, _, period = value.partition(" ")
                    if quota != "max":
                        try:
                            limits.append(int(quota) / int(period or "100000"))
                        except ValueError:
                            pass
        elif "cpu" in controllers.split(","):  # cgroup v1
            names = [controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"]
            for name in dict.fromkeys(names):
                for d in candidates(root / name, rel):
                    quota_s, period_s = (
                        _read(d / "cpu.cfs_quota_us"),
                        _read(d / "cpu.cfs_period_us"),
                    )
                    if quota_s is None or period_s is None:
                        continue
                    try:
                        quota_us, period_us = int(quota_s), int(period_s)
                    except ValueError:
                        continue
                    if quota_us > 0 and period_us > 0:
                        limits.append(quota_us / period_us)
    return min(limits) if limits else None


def available_cpus() -> CpuCount:
    """The CPUs this process may really use: scheduler affinity, capped by the cgroup quota.

    A fractional quota is rounded down (1.5 CPUs leave one CPU's worth of full-time work), and
    the result is at least 1.

    Examples:
        >>> available_cpus().count >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        affinity = len(os.sched_getaffinity(0))
        source = "affinity"
    else:  # pragma: no cover - macOS / Windows
        affinity = os.cpu_count() or 1
        source = "os.cpu_count"
    quota = cgroup_cpu_quota()
    count = affinity
    reason = f"{affinity} CPUs by {source}"
    if quota is not None and math.floor(quota) < affinity:
        count = max(1, math.floor(quota))
        reason = f"{count} CPUs (cgroup quota {quota:g} of {affinity} by {source})"
    return CpuCount(count=count, affinity=affinity, quota=quota, reason=reason)


def _env_int(env: Any, name: str) -> int | None:
    value = str(env.get(name, "")).split("(")[0].split(",")[0].strip()  # SLURM writes "4(x2)" for repeats
    return int(value) if value.isdigit() and int(value) > 0 else None


def launcher_processes_per_node(env: Any = None) -> int | None:
    """Training processes on this node as the launcher says: torchrun's ``LOCAL_WORLD_SIZE``, else
    SLURM's ``SLURM_NTASKS_PER_NODE`` (srun starts one task per rank), else ``None``.

    Examples:
        >>> launcher_processes_per_node({"LOCAL_WORLD_SIZE": "4"}), launcher_processes_per_node({})
        (4, None)
    """
    env = os.environ if env is None else env
    return _env_int(env, "LOCAL_WORLD_SIZE") or (
        _env_int(env, "SLURM_NTASKS_PER_NODE") if "SLURM_PROCID" in env else None
    )


def slurm_cpus_per_task(env: Any = None) -> int | None:
    """CPUs SLURM gave each task (``SLURM_CPUS_PER_TASK``) inside an srun step, else ``None``."""
    env = os.environ if env is None else env
    return _env_int(env, "SLURM_CPUS_PER_TASK") if "SLURM_PROCID" in env else None


def _is_in_memory(dataset: Any) -> bool:
    """Datasets whose ``__getitem__`` only indexes tensors: workers would only add IPC."""
    from torch.utils.data import Subset

    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


@dataclass(frozen=True)
class _RankCpus:
    """The CPUs of one training process (rank), and how they were counted."""

    processes_per_node: int
    per_process: int
    share: str  # e.g. "8 CPUs, 2 process(es) per node -> 4 per process"


def _rank_cpus(cpus: int | None, devices: int, processes_per_node: int | None, on_device: bool) -> _RankCpus:
    """The node's CPUs (measured when ``cpus`` is ``None``) divided among its processes, unless SLURM bound this task."""
    cpu_info = None
    bound = None
    if cpus is None:
        cpu_info = available_cpus()
        cpus = cpu_info.count
        per_task = slurm_cpus_per_task()
        if per_task is not None and cpus <= per_task:
            bound = per_task
    if cpus < 1:
        raise SettingError(f"`cpus` must be >= 1, got {cpus}.")
    cpu_text = cpu_info.reason if cpu_info is not None else f"{cpus} CPUs"
    if processes_per_node is None:
        processes_per_node = launcher_processes_per_node() or (devices if on_device else 1)
    processes_per_node = max(1, int(processes_per_node))
    if bound is not None:
        per_process = cpus
        share = f"{cpu_text}: this rank's own (SLURM_CPUS_PER_TASK={bound}, {processes_per_node} process(es) per node)"
    else:
        per_process = cpus // processes_per_node
        share = f"{cpu_text}, {processes_per_node} process(es) per node -> {per_process} per process"
    return _RankCpus(processes_per_node, per_process, share)


def auto_num_workers(
    *,
    accelerator: str = "cpu",
    devices: int = 1,
    processes_per_node: int | None = None,
    cpus: int | None = None,
    dataset: Dataset | None = None,
) -> WorkersChoice:
    """Choose ``num_workers`` for one process's DataLoader from the machine it runs on.

    Rules, in order:

    1. An ``IterableDataset`` gets 0: each worker would replay the whole stream unless the dataset
       shards itself with ``get_worker_info()`` (set a number explicitly when it does).
    2. An in-memory ``TensorDataset`` gets 0: indexing is cheap and workers only add IPC.
    3. With a device accelerator (CUDA, MPS, XLA, ...): the seeds' 4 per device, capped by the
       CPUs of this process's share of the node minus one for the main process.
    4. On the CPU the step itself uses the cores the workers would need: 0 workers with 2 CPUs or
       fewer per process (measured 10-55% slower with workers on 2 cores), else one worker per 4
       CPUs, at most 4.

    The CPUs of one rank: the node's CPUs divided by the processes on the node (``processes_per_node``,
    by default what the launcher says: torchrun's ``LOCAL_WORLD_SIZE``, SLURM's
    ``SLURM_NTASKS_PER_NODE``). When ``cpus`` is measured here and SLURM bound this task to its own
    ``SLURM_CPUS_PER_TASK`` CPUs (this process may use no more than that), the measured CPUs are
    already this rank's share and are not divided again.

    Args:
        accelerator: where the batches are computed (``"cpu"``, ``"cuda"``, ``"mps"``, ...).
        devices: devices this node trains on (all processes together).
        processes_per_node: training processes on this node; defaults to the launcher's count
            (:func:`launcher_processes_per_node`), else ``devices`` for a device accelerator (one
            process per device) and 1 on the CPU.
        cpus: CPUs available to the whole node's training; defaults to :func:`available_cpus`
            (this process's CPUs; a SLURM task bound to its own CPUs counts as its rank's share).
        dataset: the loader's dataset, for rules 1 and 2.

    Returns:
        The choice and a one-line reason.

    Examples:
        >>> auto_num_workers(accelerator="cuda", devices=8, cpus=32).num_workers
        3
    """
    if devices < 1:
        raise SettingError(f"`devices` must be >= 1, got {devices}.")
    accelerator = str(accelerator).lower()
    on_device = accelerator in _DEVICE_ACCELERATORS
    rank = _rank_cpus(cpus, devices, processes_per_node, on_device)
    return _workers_by_rules(dataset, accelerator, on_device, devices, rank)


def _workers_by_rules(
    dataset: Dataset | None, accelerator: str, on_device: bool, devices: int, rank: _RankCpus
) -> WorkersChoice:
    """Rules 1 to 4 of :func:`auto_num_workers`, in order."""
    per_process, share = rank.per_process, rank.share
    if isinstance(dataset, IterableDataset):
        return WorkersChoice(
            0,
            "IterableDataset: workers would each replay the stream unless it shards by get_worker_info()",
        )
    if dataset is not None and _is_in_memory(dataset):
        return WorkersChoice(0, "in-memory TensorDataset: indexing is cheap, workers would only add IPC")
    if on_device:
        devices_per_process = max(1, devices // rank.processes_per_node)
        want = 4 * devices_per_process
        cap = max(0, per_process - 1)
        n = min(want, cap)
        why = f"{accelerator}: 4 x {devices_per_process} device(s) per process, capped at {cap} ({share}, 1 for the main process)"
        return WorkersChoice(n, why)
    if per_process <= 2:
        return WorkersChoice(
            0,
            f"CPU training with {share}: workers would compete with the step for the same cores",
        )
    n = min(4, per_process // 4) if per_process >= 4 else 0
    return WorkersChoice(
        n,
        f"CPU training with {share}: 1 worker per 4 CPUs, at most 4, the rest for the step",
    )


def worker_start_method(loader: DataLoader) -> str:
    """How the loader's worker processes start: ``"fork"``, ``"spawn"`` or ``"forkserver"``."""
    ctx = loader.multiprocessing_context
    if ctx is not None:
        return ctx.get_start_method()
    method = mp.get_start_method(allow_none=True)
    if method is None:
        # what the first use would pick on this platform
        method = mp.get_context().get_start_method()
    return method


def worker_pickle_problem(loader: DataLoader, start_method: str | None = None) -> str | None:
    """Why the loader's dataset could not be sent to worker processes, or ``None`` when it can.

    Only ``spawn`` and ``forkserver`` workers receive the dataset, ``collate_fn`` and
    ``worker_init_fn`` by pickling; ``fork`` workers inherit them, so nothing is checked then.

    Examples:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> worker_pickle_problem(DataLoader(TensorDataset(torch.zeros(2))), "spawn") is None
        True
    """
    method = start_method or worker_start_method(loader)
    if method == "fork":
        return None
    for name in ("dataset", "collate_fn", "worker_init_fn"):
        obj = getattr(loader, name, None)
        if obj is None:
            continue
        try:
            pickle.dumps(obj)
        except Exception as ex:
            return f"the loader's {name} cannot be pickled for {method} workers ({type(ex).__name__}: {ex})"
    return None


def _walk(batch: Any, prefix: str = "batch"):
    if isinstance(batch, torch.Tensor):
        yield prefix, batch
    elif isinstance(batch, dict):
        for k, v in batch.items():
            yield from _walk(v, f"{prefix}[{k!r}]")
    elif isinstance(batch, (list, tuple)):
        for i, v in enumerate(batch):
            yield from _walk(v, f"{prefix}[{i}]")
    elif hasattr(batch, "__dataclass_fields__"):
        for k in batch.__dataclass_fields__:
            yield from _walk(getattr(batch, k), f"{prefix}.{k}")


def named_tensors(batch: Any, prefix: str = "batch") -> list[tuple[str, torch.Tensor]]:
    """The tensors of a (nested) batch with readable names such as ``batch[0]`` or ``batch['image']``."""
    return list(_walk(batch, prefix))


def non_tensor_leaves(batch: Any, prefix: str = "batch") -> list[tuple[str, str]]:
    """Leaves of a batch that hold array data outside tensors (numpy arrays, PIL images, lists of numbers), which
    pinning and the device transfer pass over.

    The batch is read, never rebuilt: mappings, sequences and dataclass fields are walked; an object with its own
    ``.to()`` (a graph batch, a tokenizer's encoding, a tensordict) is moved by Lightning as a whole and is not a
    leaf to report; scalars, strings and objects of unknown kinds are not reported either.

    Examples:
        >>> import numpy as np
        >>> non_tensor_leaves({"x": torch.zeros(2), "y": np.zeros(3), "id": 7, "name": "a"})
        [("batch['y']", 'numpy.ndarray')]
    """
    out: list[tuple[str, str]] = []

    def kind(x: Any) -> str:
        return type(x).__module__ + "." + type(x).__qualname__

    def walk(x: Any, name: str, depth: int) -> None:
        if isinstance(x, torch.Tensor) or depth > 6 or len(out) >= 16:
            return
        if isinstance(x, Mapping):
            if callable(getattr(x, "to", None)):
                return
            for k, v in x.items():
                walk(v, f"{name}[{k!r}]", depth + 1)
        elif isinstance(x, (list, tuple)):
            if x and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x):
                out.append((name, f"a list of {len(x)} numbers"))
                return
            for i, v in enumerate(x):
                walk(v, f"{name}[{i}]", depth + 1)
        elif is_dataclass(x) and not isinstance(x, type):
            for field in fields(x):
                walk(getattr(x, field.name, None), f"{name}.{field.name}", depth + 1)
        elif type(x).__module__.split(".")[0] == "numpy" and getattr(x, "ndim", 0) > 0:
            out.append((name, kind(x)))
        elif type(x).__module__.split(".")[0] == "PIL":
            out.append((name, kind(x)))

    walk(batch, prefix, 0)
    return out


def unpinned_tensors(batch: Any, device: str | torch.device) -> list[str]:
    """Names of the CPU tensors of ``batch`` whose copy to ``device`` cannot overlap compute.

    A host-to-CUDA copy with ``non_blocking=True`` is asynchronous only from page-locked (pinned)
    memory; from pageable memory the host waits for it. Nothing is reported for other devices.

    Examples:
        >>> import torch
        >>> unpinned_tensors([torch.zeros(2)], "cuda")
        ['batch[0]']
        >>> unpinned_tensors([torch.zeros(2)], "cpu")
        []
    """
    if torch.device(device).type != "cuda":
        return []
    out = []
    for name, t in named_tensors(batch):
        if t.device.type != "cpu":
            continue
        try:
            pinned = t.is_pinned()
        except RuntimeError:  # no CUDA runtime to ask
            pinned = False
        if not pinned:
            out.append(name)
    return out
