"""Issue 27: the shared suite (every part of the registry: acts, leaves no flag behind, keeps the maths,
composes, resumes exactly) under the older ``pytorch_lightning`` package too, in its own process (the suite's
models and Trainer are built on the package named by ``SPEEDUPS_SUITE_NAMESPACE``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is in the test extra (both namespaces)")
TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_shared_suite_passes_under_pytorch_lightning():
    # a fresh process: no rendezvous left in this one's environment by an earlier in-process DDP fit (Lightning
    # sets MASTER_PORT there; the suite's 1-process DDP cases would meet a port that may still be held)
    leaked = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in leaked and not k.startswith("PL_")}
    env["SPEEDUPS_SUITE_NAMESPACE"] = "pytorch_lightning"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(TESTS, "suite")]
    cmd += ["-o", "addopts=", "-W", "ignore::DeprecationWarning"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=880, cwd=os.path.dirname(TESTS))
    tail = "\n".join(out.stdout.splitlines()[-30:])
    assert out.returncode == 0, f"the shared suite failed under pytorch_lightning:\n{tail}\n{out.stderr[-2000:]}"
    assert " passed" in tail and "pytorch_lightning" in env["SPEEDUPS_SUITE_NAMESPACE"]
