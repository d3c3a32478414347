"""The credential files the run's libraries read on their own, checked by the one rule for files a user names
(workload/user_files.py: a regular file within a bound, refused unread otherwise) before anything reads them.

A FIFO there waits forever for a writer: `NETRC=/tmp/fifo python -m workload.local --report_to wandb` hung in the W&B
key check, and requests reads the same file before every request that carries no credentials of its own (the Hub's,
MLflow's, Ray's job client). A device or a file of the kernel (/proc/self/environ) is no credential file either, and a
file of gigabytes is read whole. Exit 3 (this machine's set-up), naming the variable and the file, never its text.
`os.devnull` passes: `NETRC=/dev/null` and `AWS_CONFIG_FILE=/dev/null` are the usual way to say "none".
Standard library only: called before the heavy imports.
"""
from __future__ import annotations

import os

from workload import cli, user_files

# A credential file is a few lines (a netrc's machine entries, an AWS profile or a hundred, a token): far below this.
MAX_BYTES = 1 * 2**20


def _hub_token_path() -> str:
    # huggingface_hub/constants.py: HF_HOME = $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface;
    # HF_TOKEN_PATH = $HF_TOKEN_PATH, else $HF_HOME/token, read by huggingface_hub/utils/_auth.py
    # (_get_token_from_file: Path(HF_TOKEN_PATH).read_text()) for every request that is given no token.
    cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return os.path.join(os.environ.get("HF_HOME") or os.path.join(cache, "huggingface"), "token")


def _files() -> list[tuple[str, tuple[str, ...]]]:
    """Each variable naming a credential file, and the files read when it is unset."""
    return [
        # requests/utils.py get_netrc_auth: $NETRC, else the first of ~/.netrc and ~/_netrc that exists (NETRC_FILES),
        # on every request without auth; wandb's key when WANDB_API_KEY is unset (wandb docs, "Environment
        # variables"); Python's netrc module ~/.netrc.
        ("NETRC", ("~/.netrc", "~/_netrc")),
        ("HF_TOKEN_PATH", (_hub_token_path(),)),
        # botocore/configprovider.py: 'credentials_file' (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials) and
        # 'config_file' (AWS_CONFIG_FILE, ~/.aws/config); botocore/configloader.py raw_config_parse skips a path that
        # is no regular file (os.path.isfile): no hang, but the profile and region it was meant to give are lost.
        ("AWS_SHARED_CREDENTIALS_FILE", ("~/.aws/credentials",)),
        ("AWS_CONFIG_FILE", ("~/.aws/config",)),
        # The Databricks SDK (MLflow's databricks:// store): $DATABRICKS_CONFIG_FILE, else ~/.databrickscfg, read with
        # configparser once it exists (databricks/sdk/config.py _load_from_config_file).
        ("DATABRICKS_CONFIG_FILE", ("~/.databrickscfg",)),
    ]


def check() -> None:
    """Each credential file that exists passes user_files.problem; cli.EnvironmentProblem (exit 3) otherwise."""
    for variable, defaults in _files():
        given = os.environ.get(variable)
        for path in (given,) if given else defaults:
            full = os.path.expanduser(path)
            if full == os.devnull or not os.path.exists(full):  # as the libraries: a file that is not there is none
                continue
            try:
                why = user_files.problem(full, MAX_BYTES)
            except OSError as error:  # no permission: the libraries could not read it either
                why = f"cannot be read ({error.strerror})"
            if why is None:
                continue
            path = path if path.isprintable() and len(path) <= 200 else cli.shown(path)
            named = f"{variable} {path}" if given else f"{path} (read when {variable} is unset)"
            raise cli.EnvironmentProblem(
                f"{named} {why}; it is a credential file the run's libraries read",
                hint=f"point {variable} at a regular file of yours, or at {os.devnull} for none")
