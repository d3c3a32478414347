"""A directory the run will write into, checked before anything starts: a local --storage_path (workload/run/checks.py)
and the caches the job and its libraries write into, named by the environment (CACHE_VARIABLES). One rule for all of
them: the path is a directory this user can write in, or can be made one (its nearest existing ancestor is a
directory that takes a file). A cache variable pointing at a file (HF_HOME=~/.bashrc) was a traceback from inside
huggingface_hub or datasets, after the imports or on every worker; it is now one line naming the variable, exit 3
(this machine's set-up).

Permissions alone do not tell (root passes any access check, and /proc refuses anyway), so the ancestor is written
to once, with a temporary file that is gone at once. Standard library only: nothing heavy has loaded when this runs.
"""
from __future__ import annotations

import os

from workload import cli
from workload.storage import unwritable_directory

# The variables that name a directory the job or its libraries write into, and what it holds (the line says it).
# XDG_CACHE_HOME is where HF_HOME's default (~/.cache/huggingface) lives when it is set.
CACHE_VARIABLES = (
    ("HF_HOME", "the Hugging Face cache"),
    ("HF_HUB_CACHE", "the Hugging Face Hub's cache"),
    ("HF_DATASETS_CACHE", "datasets' cache"),
    ("XDG_CACHE_HOME", "the user's cache directory"),
    ("RAYTRAIN_DATA_CACHE", "the data stage's token cache"),  # workload/data/cache.py CACHE_VARIABLE
)


# The rule, one for every directory a command writes into (workload.export's OUT too): workload/storage.py's.
problem = unwritable_directory


def check_cache_directories(environ: dict | None = None) -> None:
    """Each cache variable that is set (CACHE_VARIABLES) names a directory this user can write in, or can create:
    exit 3 naming the variable and what it must be."""
    environ = os.environ if environ is None else environ
    for name, what in CACHE_VARIABLES:
        value = environ.get(name, "")
        if not value or (why := problem(value)) is None:
            continue
        path = os.path.abspath(os.path.expanduser(value))
        if os.path.isfile(path):
            message = f"{name}={value} is a file; {what} must be a directory"
        elif why.endswith("is a file, not a directory"):
            blocking = why.removesuffix(" is a file, not a directory")
            message = f"{name}={value}: {os.path.relpath(blocking) if _below_here(blocking) else blocking} is a " \
                      f"file; {what} must be a directory"
        else:
            message = f"{name}={value} {why}; {what} must be a directory this user can write in"
        raise cli.EnvironmentProblem(message, hint=f"point {name} at a directory of yours, or unset it for the "
                                                   "default")


def _below_here(path: str) -> bool:
    return not os.path.relpath(path).startswith("..")
