"""Launch the distributed workers with torchrun on loopback, bounded in time, never hanging.

Each node is its own torchrun agent (``--nnodes N --node_rank i``, master at 127.0.0.1 on a free
port). The agents run in their own process groups; when one exits with an error, the others are
stopped at once and the test fails with that node's output, and when the whole run passes its
time limit every agent is stopped and the test fails saying so.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


_TEARDOWN_ABORT = "terminate called without an active exception"


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def run_workers(
    scenario: str,
    out: Path,
    *,
    nnodes: int = 1,
    nproc: int = 2,
    timeout: float = 120.0,
    args: tuple[str, ...] = (),
    script: Path = WORKER,
) -> list[dict]:
    """Run ``script SCENARIO OUT`` on ``nnodes`` x ``nproc`` processes; return each rank's JSON result.

    Raises:
        AssertionError: a node failed (the others were stopped) or the run passed ``timeout``.
    """
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[tuple[subprocess.Popen, Path]] = []
    for node in range(nnodes):
        log = out / f"node{node}.log"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nnodes),
            "--node_rank",
            str(node),
            "--nproc_per_node",
            str(nproc),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "--max_restarts",
            "0",
            "--monitor_interval",
            "0.5",
            str(script),
            scenario,
            str(out),
            *args,
        ]
        fh = open(log, "w")
        procs.append((subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True), log))
        fh.close()
    deadline = time.monotonic() + timeout
    failed: list[str] = []
    try:
        while True:
            codes = [p.poll() for p, _ in procs]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                # a rank's failure closes its peers' connections, so a waiting node may exit first with only
                # "Connection closed by peer": give the others a moment to exit too, and report every failed node
                grace = time.monotonic() + 5.0
                while time.monotonic() < grace and any(p.poll() is None for p, _ in procs):
                    time.sleep(0.2)
                codes = [p.poll() for p, _ in procs]
                bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
                failed = [f"node {i} exited with {codes[i]}:\n{_tail(procs[i][1])}" for i in bad]
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{scenario}: still running after {timeout:.0f}s; stopped every node.\n"
                    + "\n".join(f"node {i}:\n{_tail(log)}" for i, (_, log) in enumerate(procs))
                )
            time.sleep(0.2)
    finally:
        for p, _ in procs:
            _stop(p)
    done = all((out / f"rank{rank}.json").exists() for rank in range(nnodes * nproc))
    at_exit = all(_TEARDOWN_ABORT in text for text in failed)
    if failed and not (done and at_exit):
        raise AssertionError(f"{scenario}: " + "\n".join(failed) + "\n(the other nodes were stopped)")
    # every rank wrote its result, then a process aborted while the interpreter shut down ("terminate called
    # without an active exception": a gloo thread torn down at exit, seen on torch's side before this work too):
    # the scenario finished, its results are judged below
    results = []
    for rank in range(nnodes * nproc):
        path = out / f"rank{rank}.json"
        assert path.exists(), f"{scenario}: rank {rank} wrote no result\n{_tail(procs[0][1])}"
        results.append(json.loads(path.read_text()))
    return results
