"""Credentials in the environment whose value cannot be a credential as set: wrapped in quotes or with spaces at
its ends, as a `.env` line (`HF_TOKEN="hf_..."`) or a copy from a web page leaves it. Every service refuses such a
token only when the run reaches it (the Hub after training, for --push_to_hub), and its refusal says "invalid token",
not which variable or why. Named by the variable, never by its value."""
from __future__ import annotations

import os

from workload import cli

# The variables the job's libraries read a credential from: huggingface_hub, wandb, MLflow (its REST client and the
# Databricks SDK), botocore.
CREDENTIAL_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN",
                        "MLFLOW_TRACKING_PASSWORD", "DATABRICKS_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                        "AWS_SESSION_TOKEN")
QUOTES = "\"'`\u2018\u2019\u201c\u201d"


def check_credential_values() -> None:
    for name in CREDENTIAL_VARIABLES:
        value = os.environ.get(name, "")
        if not value:
            continue
        if value[0] in QUOTES or value[-1] in QUOTES:
            why = "is wrapped in quotes (a .env file's or a copied line's): the quotes became part of the value"
        elif value != value.strip():
            why = "begins or ends with a space or a line break"
        else:
            continue
        raise cli.EnvironmentProblem(f"{name} {why}; the service would refuse it as an invalid credential",
                                     hint=f"set {name} to the bare value (its value is not shown)")
