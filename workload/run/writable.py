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


def tracker_directories(report_to: str, mlflow_tracking_uri: str = "",
                        environ: dict | None = None) -> list[tuple[str, str, str]]:
    """(where it is named, the directory, what it holds) for each local directory a tracker in --report_to writes
    under that the flags or the environment name:
    - wandb: WANDB_DIR, the root of wandb's run directories (wandb/env.py DIR; wandb makes `wandb/` under it), which
      workload/metrics/wandb_tracker.py passes to wandb.init when it is set, else the run directory;
    - mlflow: a local store in --mlflow_tracking_uri or MLFLOW_TRACKING_URI: a path or file: URI (mlflow's FileStore,
      registered for the schemes "" and "file" in mlflow/tracking/_tracking_service/utils.py; the path as
      mlflow/utils/file_utils.py local_file_uri_to_path takes it) is the directory; sqlite:///PATH (SQLAlchemy's
      URL: three slashes, then the path, four for an absolute one) is a file whose directory must take it.
    TensorBoard's event files go under the run directory (check_storage's rule); HF_HOME is a cache (CACHE_VARIABLES).
    W&B's cache, config and data directories are left out: an offline run with each at /proc/self completed."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from workload.config import parse_report_to

    environ = os.environ if environ is None else environ
    trackers, found = parse_report_to(report_to), []
    if "wandb" in trackers and environ.get("WANDB_DIR"):
        found.append(("WANDB_DIR", environ["WANDB_DIR"], "the W&B run's files"))
    uri = mlflow_tracking_uri or environ.get("MLFLOW_TRACKING_URI", "")
    where = "--mlflow_tracking_uri" if mlflow_tracking_uri else "MLFLOW_TRACKING_URI"
    scheme = uri.split(":", 1)[0].lower() if ":" in uri and "/" not in uri.split(":", 1)[0] else ""
    if "mlflow" in trackers and uri and scheme in ("", "file"):
        found.append((where, url2pathname(urlparse(uri).path) if scheme == "file" else uri, "the MLflow store"))
    elif "mlflow" in trackers and scheme == "sqlite" and uri.lower().startswith("sqlite:///") and len(uri) > 10:
        found.append((where, os.path.dirname(os.path.abspath(uri[len("sqlite:///"):])) or "/",
                      "the MLflow store's database"))
    return found


def check_tracker_directories(report_to: str, mlflow_tracking_uri: str = "", environ: dict | None = None) -> None:
    """Each tracker directory (tracker_directories) is one this user can write in or create, by the rule of every
    directory the run writes (problem): exit 3 naming the variable (this machine's set-up), exit 2 naming the flag;
    the value is not repeated (a tracking URI may carry credentials)."""
    for where, directory, what in tracker_directories(report_to, mlflow_tracking_uri, environ):
        if (why := problem(os.path.expanduser(directory))) is None:
            continue
        message = f"{where} is no place for {what}: {why}; it must be a directory this user can write in or create"
        if where.startswith("--"):
            raise cli.UsageError(message)
        raise cli.EnvironmentProblem(message, hint=f"point {where} at a directory of yours, or unset it")
