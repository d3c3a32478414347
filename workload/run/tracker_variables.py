"""A tracker's run variables set while --report_to leaves that tracker out: `WANDB_PROJECT=mine python -m
workload.local` (as a TRL or axolotl user sets it, their report_to then picking W&B up) recorded nothing anywhere but
TensorBoard, and said nothing. Said in one `note:` line naming the variables, never their values; the run goes on,
since a variable is the environment's (often set once in a shell profile) and not this run's flag. Standard library
only: it runs before Ray and the heavy imports."""
from __future__ import annotations

import os
import sys
from typing import Mapping

from workload.config import parse_report_to

# The variables that describe one run to its tracker, nothing else (the clients' documented environment variables:
# https://docs.wandb.ai/guides/track/environment-variables, mlflow/environment_variables.py). Credentials and server
# addresses (WANDB_API_KEY, MLFLOW_TRACKING_URI) are left out: a machine keeps those for every run.
RUN_VARIABLES = {
    "wandb": ("W&B", ("WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_GROUP", "WANDB_TAGS", "WANDB_NOTES", "WANDB_RUN_ID",
                      "WANDB_MODE")),
    "mlflow": ("MLflow", ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID")),
}


def unused_variables_note(report_to: str, environ: Mapping[str, str] | None = None) -> str | None:
    """One note for each tracker --report_to's value leaves out while its run variables are set, or None."""
    environ = os.environ if environ is None else environ
    trackers = parse_report_to(report_to)
    notes = []
    for tracker, (title, variables) in RUN_VARIABLES.items():
        if tracker in trackers or not (set_ := [name for name in variables if environ.get(name, "").strip()]):
            continue
        given = ",".join(trackers) or "none"
        notes.append(f"{', '.join(set_)} {'is' if len(set_) == 1 else 'are'} set, and --report_to {given} leaves "
                     f"{tracker} out: nothing is recorded in {title} (add {tracker} to --report_to, or unset "
                     f"{'it' if len(set_) == 1 else 'them'})")
    return "; ".join(notes) or None


def say_unused(report_to: str) -> None:
    """The note above, if any, on stderr."""
    if (note := unused_variables_note(report_to)) is not None:
        print(f"note: {note}", file=sys.stderr, flush=True)
