"""What every tracker of --report_to shares (workload/metrics/trackers.py composes them): the calls a tracker answers,
and the run's parameters and summary as trackers keep them. Standard library only."""
from __future__ import annotations

import re
from typing import Any, Protocol

# The trackers' clients the job installs at its start when --report_to names them (infra/job/job_config.py's job_pip),
# the versions requirements.txt pins for the local run (tests/runs/test_tracking.py checks they agree). mlflow-skinny: the
# client alone, without the server's SQL, UI and ML-library dependencies (the full mlflow is some 300 MB more).
TRACKER_REQUIREMENTS = {"mlflow": "mlflow-skinny==3.17.2", "wandb": "wandb==0.31.0"}
# What a parameter must not show of a URL: a user:password@ (a tracking URI can carry one).
_USERINFO = re.compile(r"(?<=//)[^/@\s]*@")


class Tracker(Protocol):
    """One destination of a run's record. Every call may raise: RunLog contains it."""

    name: str

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, step: int, values: dict[str, float]) -> None: ...

    def finish(self, summary: dict[str, Any] | None) -> None: ...


def flat_params(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted names (sharding.mesh_shape); numbers and booleans kept, anything else as text, a URL's
    credentials left out."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(flat_params(value, f"{prefix}{key}."))
        else:
            text = isinstance(value, str) or not isinstance(value, (int, float, bool))
            flat[f"{prefix}{key}"] = _USERINFO.sub("***@", "" if value is None else str(value)) if text else value
    return flat


def summary_values(summary: dict[str, Any]) -> dict[str, Any]:
    """What a tracker keeps of the run's summary: its numbers and short texts (not the NCCL logs or nested plans)."""
    return {key: value for key, value in summary.items()
            if isinstance(value, (int, float, str)) and not isinstance(value, bool)}
