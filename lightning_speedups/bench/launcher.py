"""Start one bench run in its own process and read its result back.

Every run is a separate process: by default forked from a server process that has only imported
torch and Lightning (``isolation="forkserver"``: no interpreter start per run), or a fresh
``python -m lightning_speedups.bench.worker`` (``isolation="subprocess"``). The spec goes to the
run as a JSON file, the result comes back as one; a run that dies or times out is a failed result,
never an exception.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from typing import Any, Optional

__all__ = ["Launcher"]


class Launcher:
    """Starts one run in its own process and returns its result (never raises for a failed run)."""

    def __init__(self, isolation: str, workdir: str, timeout: float) -> None:
        self.isolation = isolation
        self.workdir = workdir
        self.timeout = timeout
        self._ctx: Any = None
        if isolation == "forkserver":
            if "forkserver" not in multiprocessing.get_all_start_methods():
                self.isolation = "subprocess"
            else:
                self._ctx = multiprocessing.get_context("forkserver")
                self._ctx.set_forkserver_preload(["lightning_speedups.bench.worker", "torch", "lightning.pytorch"])

    def warm(self) -> None:
        """Start the fork server (it imports torch and Lightning once) so no run's time includes it."""
        if self.isolation == "forkserver":
            proc = self._ctx.Process(target=_noop)
            proc.start()
            proc.join(self.timeout)

    def run(self, spec: dict[str, Any], name: str, timeout: Optional[float] = None) -> dict[str, Any]:
        os.makedirs(self.workdir, exist_ok=True)
        spec_path = os.path.join(self.workdir, f"{name}.spec.json")
        result_path = os.path.join(self.workdir, f"{name}.result.json")
        log_path = os.path.join(self.workdir, f"{name}.log")
        with open(spec_path, "w", encoding="utf-8") as fh:
            json.dump(spec, fh, default=str)
        limit = self.timeout if timeout is None else min(self.timeout, timeout)
        t0 = time.perf_counter()
        exit_code: Optional[int] = None
        timed_out = False
        if self.isolation == "forkserver":
            proc = self._ctx.Process(target=_child_entry, args=(spec_path, result_path, log_path), daemon=False)
            proc.start()
            proc.join(limit)
            if proc.is_alive():
                timed_out = True
                proc.kill()
                proc.join(10)
            exit_code = proc.exitcode
        else:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")]).strip(
                os.pathsep
            )
            with open(log_path, "ab") as log:
                proc2 = subprocess.Popen(
                    [sys.executable, "-m", "lightning_speedups.bench.worker", spec_path, result_path],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
                try:
                    exit_code = proc2.wait(limit)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(proc2)
                    exit_code = proc2.wait(10)
        wall = time.perf_counter() - t0
        result: dict[str, Any]
        if os.path.exists(result_path) and not timed_out:
            with open(result_path, encoding="utf-8") as fh:
                result = json.load(fh)
        else:
            why = f"timed out after {limit:.0f} s" if timed_out else f"the run's process died (exit code {exit_code})"
            result = {"status": "failed", "reason": why}
            if timed_out:  # stopped by its time limit: not a failure of the setup
                result.update(timed_out=True, timeout_s=limit)
        result["wall_s"] = wall
        result["log"] = log_path
        if result.get("status") != "ok":
            result["log_tail"] = _tail(log_path)
        return result


def _noop() -> None:
    pass


def _child_entry(spec_path: str, result_path: str, log_path: str) -> None:
    # imported here, not at the top: `import lightning_speedups.bench` must not load the worker, or
    # `python -m lightning_speedups.bench.worker` would find it in sys.modules and run it twice
    from lightning_speedups.bench.worker import child_main

    child_main(spec_path, result_path, log_path)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # the group is gone already, or not ours to signal: the process itself
        proc.kill()


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return ""
