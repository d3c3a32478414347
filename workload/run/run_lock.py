"""One run at a time in a run directory: `python -m workload.local` holds `<storage_path>/<run_name>/.run.lock`
(its pid and host) while it runs, so a second run of the same --run_name started meanwhile is refused in one line
instead of writing its steps into the same checkpoints and event files. A lock whose process has ended on this host
(a run killed with SIGKILL, a machine restarted) is stale and taken over. A run directory in S3 is not locked: the
cluster's job has one driver, and Ray Jobs refuses a second submission id.

Standard library only: it answers before torch and Ray load.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from workload import cli

LOCK_NAME = ".run.lock"
# The folders each lock's acquire created, deepest first: a run refused before it wrote anything leaves none behind.
_made: dict[Path, list[Path]] = {}


def acquire(storage_path: str, run_name: str) -> Path | None:
    """Take the run directory's lock (None: no local run directory); a live holder is a UsageError naming it."""
    if not storage_path or "://" in storage_path:
        return None
    directory = Path(storage_path) / run_name
    made = [folder for folder in (directory, *directory.parents) if not folder.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # the storage check that follows says what is wrong with --storage_path
    path = directory / LOCK_NAME
    _made[path] = made
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):  # a stale lock removed, then created: a second try only if another run took it meanwhile
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except PermissionError:
            return None
        except FileExistsError:
            holder = _holder(path)
            if holder is not None and _alive(holder):
                raise cli.UsageError(
                    f"--run_name {run_name}: another run (pid {holder.get('pid')} on {holder.get('host')}, since "
                    f"{holder.get('started')}) is writing {directory}",
                    hint="give another --run_name, or start this one when that run has ended (it then resumes)"
                ) from None
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(descriptor, "w") as file:
            json.dump(mine, file)
        return path
    raise cli.UsageError(f"--run_name {run_name}: another run took {path} just now; give another --run_name")


def release(path: Path | None) -> None:
    if path is None:
        return
    holder = _holder(path)
    if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        path.unlink(missing_ok=True)
    for folder in _made.pop(path, []):
        try:
            folder.rmdir()  # only while empty: a run that wrote checkpoints or its flags keeps its directory
        except OSError:
            break


def _holder(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # unreadable or half-written: treated as stale
    return holder if isinstance(holder, dict) else None


def _alive(holder: dict) -> bool:
    """Whether the lock's process still runs. On another host it cannot be told: held, and the message names it."""
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(holder["pid"]), 0)
    except (KeyError, TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True  # someone else's live process
    return True
