"""Every module of the package can be the first one a user imports (a datamodule in their own script,
a callback in a YAML class_path): no circular import depends on which module comes first."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys

import lightning_speedups

SCRIPT = r"""
import importlib, os, sys
import torch, lightning.pytorch  # the heavy imports once, in the parent
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:  # a child with no lightning_speedups module imported yet
        try:
            importlib.import_module(name)
        except BaseException as err:
            print(f"{name}: {type(err).__name__}: {err}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed.append(name)
print("FAILED", failed)
sys.exit(1 if failed else 0)
"""


def test_each_module_imports_first_in_a_fresh_interpreter():
    names = [m.name for m in pkgutil.walk_packages(lightning_speedups.__path__, "lightning_speedups.")]
    names = [n for n in names if not n.endswith("__main__")]
    assert len(names) > 100
    root = os.path.dirname(os.path.dirname(lightning_speedups.__file__))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *names], capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
