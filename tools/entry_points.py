"""The commands as `pip install .` names them (pyproject.toml's [project.scripts]): each runs its module's main
exactly as `python -m MODULE` does, with the same flags and exit codes (workload/cli.py)."""
from __future__ import annotations

import importlib

from workload import cli

# Command name -> the module `python -m` runs.
COMMANDS = {
    "raytrain-local": "workload.local",
    "raytrain-train": "workload.train",
    "raytrain-export": "workload.export",
    "raytrain-transport": "workload.transport",
    "raytrain-capacity": "tools.capacity.cli",
    "raytrain-status": "tools.status",
    "raytrain-job": "tools.job",
    "raytrain-loss-curve": "tools.loss_curve",
    "raytrain-gpu-panel": "tools.gpu_panel",
    "raytrain-doctor": "tools.doctor",
    "raytrain-leftovers": "tools.leftovers",
}


def _run(module: str) -> int:
    main = importlib.import_module(module).main
    # tools.capacity's main maps its own errors (it takes an AWS stand-in in tests); the others leave it to cli.run.
    return main() if module == "tools.capacity.cli" else cli.run(main)


def local() -> int: return _run(COMMANDS["raytrain-local"])
def train() -> int: return _run(COMMANDS["raytrain-train"])
def export() -> int: return _run(COMMANDS["raytrain-export"])
def transport() -> int: return _run(COMMANDS["raytrain-transport"])
def capacity() -> int: return _run(COMMANDS["raytrain-capacity"])
def status() -> int: return _run(COMMANDS["raytrain-status"])
def job() -> int: return _run(COMMANDS["raytrain-job"])
def loss_curve() -> int: return _run(COMMANDS["raytrain-loss-curve"])
def gpu_panel() -> int: return _run(COMMANDS["raytrain-gpu-panel"])
def doctor() -> int: return _run(COMMANDS["raytrain-doctor"])
def leftovers() -> int: return _run(COMMANDS["raytrain-leftovers"])
