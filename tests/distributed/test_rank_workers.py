"""T02 per rank: loader workers from the CPUs each rank may use, as the launcher (torchrun, SLURM) says."""

from __future__ import annotations

import lightning_speedups.functional.loaders as fl
from lightning_speedups.functional.loaders import auto_num_workers, launcher_processes_per_node, slurm_cpus_per_task


def _cpus(monkeypatch, n):
    monkeypatch.setattr(fl, "available_cpus", lambda: fl.CpuCount(n, n, None, f"{n} CPUs by affinity"))


def test_torchrun_ranks_share_the_node(monkeypatch):
    _cpus(monkeypatch, 32)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    choice = auto_num_workers(accelerator="cuda", devices=8)
    assert choice.num_workers == 3 and "8 process(es) per node -> 4 per process" in choice.reason
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert auto_num_workers(accelerator="cpu").num_workers == 4  # 16 CPUs each on the CPU: 4 workers


def test_a_slurm_task_bound_to_its_cpus_is_not_divided_again(monkeypatch):
    _cpus(monkeypatch, 8)  # srun --cpus-per-task 8 bound this task to 8 CPUs
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for k, v in {"SLURM_PROCID": "3", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "8"}.items():
        monkeypatch.setenv(k, v)
    assert (launcher_processes_per_node(), slurm_cpus_per_task()) == (4, 8)
    choice = auto_num_workers(accelerator="cuda", devices=4)
    assert choice.num_workers == 4 and "this rank's own" in choice.reason
    _cpus(monkeypatch, 32)  # not bound: the node's 32 CPUs shared by 4 tasks
    assert auto_num_workers(accelerator="cuda", devices=4).num_workers == 4  # 8 CPUs each: the 4 wanted fit


def test_launcher_counts_read_slurm_repeat_syntax():
    assert launcher_processes_per_node({"SLURM_PROCID": "0", "SLURM_NTASKS_PER_NODE": "2(x3)"}) == 2
    assert launcher_processes_per_node({"SLURM_NTASKS_PER_NODE": "2"}) is None  # not inside an srun step
