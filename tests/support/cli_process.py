"""A command run as a user types it, in a fresh process: its exit code, what it printed on stderr, which heavy
libraries it had imported by then, and how long it took."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The libraries that take seconds to import (boto3, pulumi and the Kubernetes client take a fraction of one).
HEAVY_MODULES = ("torch", "ray", "transformers", "datasets")


def run_cli(module: str, argv: list[str], cwd: Path = REPO,
            watch: tuple[str, ...] = HEAVY_MODULES) -> tuple[int, str, list[str], float]:
    """(exit code, stderr, the modules of `watch` loaded, seconds) of `python -m module argv` in a fresh process, with
    RAY_ADDRESS set as Ray's job supervisor sets it for the job's entrypoint (a closed port: nothing joins it)."""
    probe = (f"import runpy, sys\nsys.argv = {[module, *argv]!r}\n"
             f"try:\n    runpy.run_module('{module}', run_name='__main__')\n"
             f"except SystemExit as e:\n    print('EXIT', e.code)\n"
             f"print('LOADED', sorted(m for m in {watch!r} if m in sys.modules))")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RAY_ADDRESS": "127.0.0.1:9"})
    elapsed = time.perf_counter() - started
    exit_line, loaded_line = done.stdout.splitlines()[-2:]
    return int(exit_line.split()[1]), done.stderr, eval(loaded_line.removeprefix("LOADED ")), elapsed  # noqa: S307
