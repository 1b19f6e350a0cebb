"""One project through the CLI with every packaged preset, then ``doctor --json`` and a short ``bench``.

``python -m projects.driver NAME OUT.json`` (with ``tests/`` on ``sys.path``): one process per project,
the presets looped in-process, so the interpreter and torch start once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any


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
