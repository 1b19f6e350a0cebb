"""One project through the CLI with every packaged preset, then ``doctor --json`` and a short ``bench``.

``python -m projects.driver NAME OUT.json`` (with ``tests/`` on ``sys.path``): one process per project,
the presets looped in-process, so the interpreter and torch start once.

:class:`Drivers` runs those processes for a pytest session: ``tests/conftest.py`` starts it once the
session's tests are collected (only for the projects whose CLI test was selected) and it runs one
driver at a time in the background while the other tests run on the other core. Each project's test
asks for its own driver's result (:meth:`Drivers.result`): a driver not started yet starts at once, and
every driver is killed at its own deadline, so a test waits for one project's work at most, never for
the others' (the per-test timeout covers one driver on a loaded machine).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Optional

#: seconds one driver may run before it is killed (idle: 30-60 s; with both cores busy, about 3x that)
DRIVER_DEADLINE = 400.0

#: an in-process DDP / FSDP fit (the Python-API tests) leaves Lightning's MASTER_PORT, LOCAL_RANK, ...
#: in os.environ: a child that inherits them believes it is a launched rank
LEAKED = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "LOCAL_RANK",
    "RANK",
    "WORLD_SIZE",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "PL_GLOBAL_SEED",
    "PL_SEED_WORKERS",
}


class Drivers:
    """The drivers of a session's projects: ``background`` at a time in the background, in the order given,
    plus any a test asks for before its turn (started at once). One torch thread each."""

    def __init__(self, projects: list[str], background: int = 1, deadline: float = DRIVER_DEADLINE) -> None:
        self.todo = list(projects)
        self.background = background
        self.deadline = deadline
        self.out_dir = tempfile.mkdtemp(prefix="projects-drivers-")
        self.running: dict[str, tuple[subprocess.Popen, float]] = {}
        self.results: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)
        self.stopped = False
        self.waiting = 0  # tests waiting for a result: the test process is idle, one more driver may run
        self.thread = threading.Thread(target=self._loop, name="projects-drivers", daemon=True)
        self.thread.start()

    def _env(self) -> dict[str, str]:
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        clean = {k: v for k, v in os.environ.items() if k not in LEAKED}
        return {
            **clean,
            "PYTHONPATH": tests + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }

    def _start(self, name: str) -> None:  # holds the lock
        self.todo.remove(name)
        cmd = [sys.executable, "-m", "projects.driver", name, os.path.join(self.out_dir, f"{name}.json")]
        proc = subprocess.Popen(cmd, env=self._env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._drain, args=(name, proc), daemon=True).start()
        self.running[name] = (proc, time.monotonic())

    def _drain(self, name: str, proc: subprocess.Popen) -> None:
        """Read the driver's output as it comes (a full pipe would block it), then record its result."""
        log = proc.communicate()[0] or ""
        path = os.path.join(self.out_dir, f"{name}.json")
        with self.lock:
            t0 = self.running.pop(name, (None, time.monotonic()))[1]
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    self.results[name] = json.load(fh)
            else:
                took = time.monotonic() - t0
                why = (
                    f"killed after {took:.0f}s (deadline {self.deadline:.0f}s)" if took > self.deadline else "no output"
                )
                why += f", exit {proc.returncode}"
                self.results[name] = {"crash": f"driver {name}: {why}\n{log[-4000:]}"}
            self.done.notify_all()

    def _loop(self) -> None:
        while True:
            with self.lock:
                if self.stopped:
                    return
                now = time.monotonic()
                for proc, t0 in self.running.values():
                    if proc.poll() is None and now - t0 > self.deadline:
                        proc.kill()
                if self.todo and len(self.running) < self.background + min(self.waiting, 1):
                    self._start(self.todo[0])
                if not self.todo and not self.running:
                    return
            time.sleep(0.2)

    def result(self, name: str) -> Any:
        """This project's driver output (``{"crash": ...}`` when it failed or passed its deadline)."""
        with self.lock:
            if name not in self.results and name not in self.running:
                if name not in self.todo:
                    self.todo.insert(0, name)
                self._start(name)
            self.waiting += 1
            while name not in self.results:
                entry = self.running.get(name)  # the deadline holds even if the loop thread is gone
                if entry and entry[0].poll() is None and time.monotonic() - entry[1] > self.deadline:
                    entry[0].kill()
                self.done.wait(1.0)
            self.waiting -= 1
            return self.results[name]

    def stop(self) -> None:
        """Kill what still runs (an interrupted session) and remove the outputs."""
        with self.lock:
            self.stopped = True
            self.todo.clear()
            procs = [p for p, _ in self.running.values()]
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(self.out_dir, ignore_errors=True)


_SESSION: Optional[Drivers] = None


def session_drivers(projects: Optional[list[str]] = None) -> Drivers:
    """The session's :class:`Drivers` (created on first use, e.g. when conftest did not start it)."""
    global _SESSION
    if _SESSION is None:
        from projects.registry import PROJECTS

        _SESSION = Drivers(list(projects if projects is not None else PROJECTS))
    return _SESSION


def stop_session_drivers() -> None:
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None


def main(argv: list[str]) -> int:
    name, out_path = argv[0], argv[1]
    from lightning_speedups.cli import main as cli_main
    from projects.matrix import PROJECTS, fit_cli, presets, write_user_yaml

    project = PROJECTS[name]
    out: dict[str, Any] = {"project": name, "cli": {}, "seconds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        user_yaml = write_user_yaml(project, tmp)
        os.chdir(tmp)  # a fit leaves nothing in the caller's folder
        for preset in presets():
            t0 = time.perf_counter()
            try:
                out["cli"][preset] = fit_cli(preset, user_yaml)
            except BaseException as err:
                out["cli"][preset] = {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-3000:]}
            out["seconds"][preset] = round(time.perf_counter() - t0, 2)
        # doctor --json, smallest run
        t0 = time.perf_counter()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()) as err:
            code = cli_main(["doctor", "--config", user_yaml, "--json", "--steps", "2", "--no-lint"])
        text = buf.getvalue()
        try:
            doctor = json.loads(text[text.index("{") :])
        except ValueError:
            doctor = {"unparsed": text[-2000:]}
        out["doctor"] = {"code": code, "json": doctor, "stderr": err.getvalue()[-2000:]}
        out["seconds"]["doctor"] = round(time.perf_counter() - t0, 2)
        # a short bench: the baseline alone, 1 warm-up + 2 timed batches, once
        t0 = time.perf_counter()
        bench_json = os.path.join(tmp, "bench.json")
        with contextlib.redirect_stdout(io.StringIO()) as bout, contextlib.redirect_stderr(io.StringIO()) as berr:
            code = cli_main(
                [
                    "bench",
                    "--config",
                    user_yaml,
                    "--tips",
                    "none",
                    "--presets",
                    "none",
                    "--steps",
                    "2",
                    "--warmup",
                    "1",
                    "--repeats",
                    "1",
                    "--no-search",
                    "--no-extras",
                    "--no-noise-pair",
                    "--no-memory-step",
                    "--no-progress",
                    "--threads",
                    "1",
                    "--json",
                    bench_json,
                ]
            )
        bench: Any = None
        if os.path.exists(bench_json):
            with open(bench_json, encoding="utf-8") as fh:
                bench = json.load(fh)
        out["bench"] = {
            "code": code,
            "json": bench,
            "stdout": bout.getvalue()[-3000:],
            "stderr": berr.getvalue()[-3000:],
        }
        out["seconds"]["bench"] = round(time.perf_counter() - t0, 2)
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
