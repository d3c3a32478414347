"""Settings in the environment that the run's libraries read with a value they do not recognize, checked before Ray
starts: huggingface_hub takes any word but 1, ON, YES, TRUE as false (HF_HUB_OFFLINE=maybe went online, silently),
wandb refused WANDB_MODE=offlin only inside wandb.init, on rank 0 after the start (and the project's own key check
named the key instead), and libgomp ignored OMP_NUM_THREADS=0 with a line of its own. Exit 3 (this machine's set-up),
naming the variable and what it takes; a value is shown only when it is short (none of these is a credential, but a
pasted line may be anything). Standard library only."""
from __future__ import annotations

import os
import re
from typing import Mapping

from workload import cli
from workload.run import allocator_settings, parsed_variables

# wandb's settings.mode (wandb/sdk/wandb_settings.py: Literal["online", "offline", "dryrun", "disabled", "run",
# "shared"]).
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")
# libgomp's OMP_NUM_THREADS: a positive integer, or a comma list of them for nested levels.
_THREADS = re.compile(r"[1-9][0-9]{0,5}(,[1-9][0-9]{0,5})*")
SHOWN_CHARS = 24
# The services' addresses the libraries read (huggingface_hub's HF_ENDPOINT, wandb's WANDB_BASE_URL, botocore's
# AWS_ENDPOINT_URL and its per-service forms): a URL, which httpx and botocore refuse without its scheme
# (HF_ENDPOINT=hf-mirror.com was "not reachable (UnsupportedProtocol)").
ENDPOINTS = ("HF_ENDPOINT", "WANDB_BASE_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS")
# Where a service's credentials go instead of its address (user:password@, ?token=): MLflow's client reads them
# from these (mlflow/environment_variables.py), and a URI with them is printed by the libraries' own messages.
CREDENTIALS_GO = {"MLFLOW_TRACKING_URI": "MLflow reads them from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, "
                                         "or MLFLOW_TRACKING_TOKEN; set those, and the URI without them"}

# The trackers' run names, bounded by the trackers themselves; a longer one fails only where rank 0 starts the tracker,
# after the data and the model have loaded (or, for MLflow, at the server's database). Each: (the most characters, a
# comma list whose every item is bounded (and not empty) rather than the whole, why).
LENGTHS = {
    # mlflow/store/tracking/dbmodels/models.py SqlExperiment.name, Column(String(256)) ("limit 256 characters"): the SQL
    # tracking store's, the stack's server's and the local run's mlflow.db; the client refuses over 500 already
    # (mlflow/utils/validation.py _validate_experiment_name, MAX_EXPERIMENT_NAME_LENGTH).
    "MLFLOW_EXPERIMENT_NAME": (256, False, "MLflow's tracking store keeps an experiment's name in 256 characters"),
    # wandb/sdk/wandb_settings.py validate_project: "Invalid project name ...: exceeded 128 characters".
    "WANDB_PROJECT": (128, False, "W&B refuses a project name over 128 characters"),
    # wandb/sdk/wandb_settings.py validate_run_tags (WANDB_TAGS split at ','): "Tags must be between 1 and 64
    # characters".
    "WANDB_TAGS": (64, True, "W&B takes a comma list of tags, each of 1 to 64 characters"),
}


def length_problem(name: str, value: str) -> str | None:
    """Why the tracker refuses `name`=`value` for its length (LENGTHS), naming the variable, never the value."""
    if name not in LENGTHS or not value:
        return None
    most, listed, why = LENGTHS[name]
    items = value.split(",") if listed else [value]
    if (longest := max(len(item) for item in items)) > most or (listed and min(map(len, items)) == 0):
        what = "an empty tag" if longest <= most else f"{longest:,} characters"
        return f"{name} ({what}; its value is not shown): {why}; set it within that, or unset it"
    return None


# Values the interpreter refuses before any code runs ("Fatal Python error: ...", exit 1 on every rank and in the
# job's driver): CPython's Python/initconfig.c and preconfig.c (config_init_hash_seed, preconfig_init_utf8_mode,
# config_init_tracemalloc, init_stdio_encoding), the Python docs' "Command line and environment" (cmdline.html:
# PYTHONHASHSEED "random" or an integer in [0, 4294967295]; PYTHONUTF8 "Setting any other non-empty string causes an
# error during interpreter initialisation"; PYTHONTRACEMALLOC a number of frames, [1; 65535]; PYTHONIOENCODING an
# encoding the codecs module knows). The names are those env_names.NOT_RESERVED leaves to trainEnv; an empty value is
# unset to Python. And torch's CUDA allocator settings, which torch refuses at the first CUDA allocation of every rank
# (workload/run/allocator_settings.py).
_STRTOUL = re.compile(r"[ \t\n\r\f\v]*\+?[0-9]+")  # C's strtoul, as CPython reads both numbers: whitespace and '+'


def _encoding_known(value: str) -> bool:
    import codecs

    try:
        codecs.lookup(value.partition(":")[0] or "utf-8")
    except LookupError:
        return False
    return True


AT_START = {
    "PYTHONHASHSEED": (lambda v: v == "random" or (bool(_STRTOUL.fullmatch(v)) and int(v) <= 4294967295),
                       'Python refuses to start with it: set "random" or an integer from 0 to 4294967295'),
    "PYTHONUTF8": (lambda v: v in ("0", "1"), "Python refuses to start with it: set 1 (UTF-8 mode) or 0"),
    "PYTHONTRACEMALLOC": (lambda v: bool(_STRTOUL.fullmatch(v)) and int(v) <= 65535,
                          "Python refuses to start with it: set a number of frames from 1 to 65535, or 0"),
    "PYTHONIOENCODING": (_encoding_known, "Python refuses to start with an encoding it does not know: set one such as "
                                          "utf-8 (or utf-8:ERRORS)"),
}


def start_problem(name: str, value: str) -> str | None:
    """Why the interpreter or torch refuses `name`=`value` where the job starts, said as `NAME=value: ...`, or None."""
    if not value:
        return None
    if name in AT_START:
        accepts, words = AT_START[name]
        return None if accepts(value) else f"{_shown(name, value)}: {words}"
    if name in allocator_settings.NAMES and (why := allocator_settings.problem(value)) is not None:
        return f"{_shown(name, value)}: torch's CUDA allocator refuses it at the first allocation of every rank: {why}"
    return None


def problem(environ: Mapping[str, str]) -> str | None:
    """The first variable set to a value its library does not recognize, said as `NAME=value: what it takes`."""
    for name in (*AT_START, *allocator_settings.NAMES):
        if (why := start_problem(name, environ.get(name, ""))) is not None:
            return why
    for name in LENGTHS:
        if (why := length_problem(name, environ.get(name, ""))) is not None:
            return why
    for name in parsed_variables.VARIABLES:  # what the libraries parse at import or start: one table
        if (why := parsed_variables.problem(name, environ.get(name, ""))) is not None:
            return f"{_shown(name, environ[name])}{why}"
    from workload.config.uri_credentials import has_credentials  # the one rule of credentials in a URI

    for name in ("MLFLOW_TRACKING_URI", *ENDPOINTS):
        if (value := environ.get(name, "")) and has_credentials(value):
            return (f"{name} holds credentials in its address (its value is not shown): "
                    + CREDENTIALS_GO.get(name, "set them in their own variables, and the address without them"))
    for name in ENDPOINTS:
        if (value := environ.get(name, "").strip()) and not value.lower().startswith(("http://", "https://")):
            return (f"{_shown(name, value)} is an address without its scheme: the libraries take a URL, "
                    f"https://{value if len(value) <= SHOWN_CHARS and value.isprintable() else '...'}")
    if (value := environ.get("WANDB_MODE", "").strip()) and value.lower() not in WANDB_MODES:
        return f"{_shown('WANDB_MODE', value)} is not a W&B mode; W&B takes {', '.join(WANDB_MODES)}"
    if (value := environ.get("OMP_NUM_THREADS", "").strip()) and not _THREADS.fullmatch(value):
        return (f"{_shown('OMP_NUM_THREADS', value)} is not a number of threads (libgomp ignores it): a whole number "
                "of at least 1, or unset it")
    return None


def check_variable_values(environ: Mapping[str, str] | None = None) -> None:
    if (why := problem(os.environ if environ is None else environ)) is not None:
        raise cli.EnvironmentProblem(why, hint="fix the variable in this shell (or unset it) and run again")


def _shown(name: str, value: str) -> str:
    from workload.config.secret_text import holds_token  # the one token rule; on the refusal path only

    shown = len(value) <= SHOWN_CHARS and value.isprintable() and not holds_token(value)
    return f"{name}={value}" if shown else f"{name} ({len(value)} characters)"
