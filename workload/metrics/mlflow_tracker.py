"""`--report_to mlflow`: the run as an MLflow run, through MLflow's own client (MlflowClient, in mlflow-skinny).

Where: --mlflow_tracking_uri (trainMlflowTrackingUri on a stack: the team's server, or the stack's own with
`experimentTracking: mlflow`), else $MLFLOW_TRACKING_URI, else a local store in the run directory: `mlflow.db` (SQLite: MLflow 3
refuses to write its file store, "in maintenance mode") and the artifacts in `mlartifacts/`, opened with
`mlflow ui --backend-store-uri sqlite:///RUN/mlflow.db`. A run directory in S3 holds no such store: a remote run
without a tracking URI is refused by this tracker, with its one warning line.

The experiment is $MLFLOW_EXPERIMENT_NAME or EXPERIMENT; the MLflow run is named after --run_name and tagged with it,
so a resumed attempt (Ray Train's restart, or the same --run_name again) goes on in the same MLflow run: its steps
after the checkpoint are logged again beside the interrupted attempt's, as MLflow keeps every value of a step.
Parameters are immutable in MLflow, so a resumed run adds only those it did not have.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from workload import storage
from workload.metrics.tracking import summary_values

EXPERIMENT = "ray-train-fsdp-llm"
LOCAL_STORE = "mlflow.db"
LOCAL_ARTIFACTS = "mlartifacts"
RUN_NAME_TAG = "raytrain.run_name"
# MLflow's own limits (mlflow/utils/validation.py): 100 params and 1000 metrics per log_batch, 6000 chars a value.
PARAMS_PER_BATCH = 100
MAX_PARAM_LENGTH = 6000
# mlflow/environment_variables.py's names; their defaults are 7 retries, backoff factor 2, 120 s.
RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def local_store_uri(run_directory: str) -> str:
    return f"sqlite:///{Path(run_directory, LOCAL_STORE).resolve()}"


def tracking_uri(cfg, run_directory: str | None) -> str:
    """Where the run goes: the flag, the environment, or the run directory's local store."""
    uri = cfg.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri:
        return uri
    if not run_directory or storage.is_remote(run_directory):
        raise ValueError("no --mlflow_tracking_uri (trainMlflowTrackingUri) and no local run directory for a "
                         f"{LOCAL_STORE} store: set one")
    return local_store_uri(run_directory)


class MlflowTracker:
    name = "mlflow"

    def __init__(self, cfg, run_directory: str | None, say) -> None:
        from mlflow import MlflowClient

        self.uri = tracking_uri(cfg, run_directory)
        local = self.uri == local_store_uri(run_directory) if run_directory else False
        if local:
            os.makedirs(run_directory, exist_ok=True)
        # MLflow's REST client retries a server that does not answer 7 times with a doubling backoff (minutes), and
        # waits 120 s for an answer: rank 0 would stall the training that long. A couple of tries, 10 s each, unless
        # the job's env says otherwise.
        for name, value in RETRIES.items():
            os.environ.setdefault(name, value)
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        experiment = self.client.get_experiment_by_name(experiment_name)
        # A local store keeps its artifacts beside it, not in ./mlruns of whatever directory the worker runs in.
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            experiment_name, artifact_location=Path(run_directory, LOCAL_ARTIFACTS).resolve().as_uri() if local
            else None)
        earlier = self.client.search_runs([experiment_id], filter_string=f"tags.`{RUN_NAME_TAG}` = '{cfg.run_name}'",
                                          max_results=1, order_by=["attributes.start_time DESC"])
        if earlier:
            self.run_id = earlier[0].info.run_id
            self.known_params = dict(earlier[0].data.params)
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            run = self.client.create_run(experiment_id, run_name=cfg.run_name, tags={RUN_NAME_TAG: cfg.run_name})
            self.run_id, self.known_params = run.info.run_id, {}
        if local:
            say(f"tracking: mlflow run {self.run_id} in {self.uri}; open it: mlflow ui --backend-store-uri {self.uri}")
        else:
            say(f"tracking: mlflow run {self.run_id}: {self.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/"
                f"{self.run_id}")

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        new = [Param(key, str(value)[:MAX_PARAM_LENGTH]) for key, value in params.items()
               if key not in self.known_params]
        for start in range(0, len(new), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=new[start:start + PARAMS_PER_BATCH])
        self.known_params.update({param.key: param.value for param in new})

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(key, float(value), now, step)
                                                    for key, value in values.items()])

    def finish(self, summary: dict[str, Any] | None) -> None:
        status = "FINISHED"
        if summary is not None:
            values = summary_values(summary)
            for key, value in values.items():
                self.client.set_tag(self.run_id, f"summary.{key}", value)
            if summary.get("model"):
                self.client.set_tag(self.run_id, "model", summary["model"])
            # The whole summary (NCCL lines, plans) as the run's artifact, through the server's artifact proxy.
            self.client.log_text(self.run_id, json.dumps(summary, indent=2, default=str), "summary.json")
            status = "FAILED" if summary.get("diverged_at_step") is not None else status
        self.client.set_terminated(self.run_id, status=status)
