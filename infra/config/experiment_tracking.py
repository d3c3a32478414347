"""experimentTracking: the stack's own MLflow tracking server (infra/kubernetes/mlflow_server.py builds it), and the
names the server and the job share: its service, port and in-cluster URI, and where its artifacts go in S3."""
from __future__ import annotations

from typing import Any

from infra.config.rules import require, s3_location

EXPERIMENT_TRACKING = ("none", "mlflow")
MLFLOW_SERVICE = "mlflow"
"""The Service, Deployment and ServiceAccount name, in the Ray namespace."""
MLFLOW_PORT = 5000  # `mlflow server`'s default port
MLFLOW_ARTIFACTS_DIRECTORY = "mlflow"
"""Under trainStoragePath's prefix: the runs' artifacts and the copy of the server's SQLite store."""


def in_cluster_uri(namespace: str) -> str:
    """The server as the Ray pods reach it: its Service's cluster DNS name (plain http inside the cluster; the
    NetworkPolicies admit only the Ray pods)."""
    return f"http://{MLFLOW_SERVICE}.{namespace}.svc:{MLFLOW_PORT}"


def artifacts_location(storage_path: str) -> tuple[str, str]:
    """(bucket, prefix) of the server's artifacts: `mlflow` under trainStoragePath's S3 prefix."""
    location = s3_location(storage_path)
    assert location is not None, "experimentTracking mlflow is refused without an s3:// trainStoragePath"
    bucket, prefix = location
    return bucket, f"{prefix}/{MLFLOW_ARTIFACTS_DIRECTORY}" if prefix else MLFLOW_ARTIFACTS_DIRECTORY


def parse_experiment_tracking(raw: dict[str, Any]) -> str:
    """experimentTracking, checked: one of EXPERIMENT_TRACKING; mlflow needs an s3:// trainStoragePath, where its
    artifacts and its store's copy live."""
    value = raw["experimentTracking"]
    require(value in EXPERIMENT_TRACKING, "experimentTracking", f"{value!r} is not one of {list(EXPERIMENT_TRACKING)}")
    if value == "mlflow":
        require(s3_location(raw["trainStoragePath"]) is not None, "experimentTracking",
                 "mlflow keeps its artifacts and a copy of its store under trainStoragePath's S3 prefix, and "
                 "trainStoragePath is not an s3:// location: set it to s3://bucket/prefix, or experimentTracking none")
    return value


def default_tracking_uri(raw: dict[str, Any], trackers: tuple[str, ...] | list[str]) -> str:
    """trainMlflowTrackingUri, or the stack's own server when experimentTracking is mlflow, trainReportTo names
    mlflow and the key is unset."""
    uri = raw["trainMlflowTrackingUri"]
    if uri or "mlflow" not in trackers or parse_experiment_tracking(raw) != "mlflow":
        return uri
    return in_cluster_uri(raw["rayNamespace"])
