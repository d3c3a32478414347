"""--report_to: rank 0's record of a run in MLflow (a real tracking server started locally, read back through MLflow's
client) and W&B (offline: its files read back), driven through the same calls the trainer makes (workload/metrics/
trackers.py), with the values a run produces; and a failing tracker that never fails the training.
tests/runs/test_workload_train.py's reference run reports to all three through a real Ray Train run, MLflow in the local
store a run without a tracking URI keeps in its run directory."""
from __future__ import annotations

import dataclasses
import os

import pytest

from tests.support import wandb_files
from workload.config import TrainConfig, parse_report_to
from workload.metrics import tensorboard, trackers
from workload.metrics.mlflow_tracker import RUN_NAME_TAG

STEPS = 6
# What a 2-rank CPU run reports: its plan, and per step the progress line's figures (MFU is None on CPU).
SHARDING = {"sharding": "full", "mesh_shape": [2], "reduce_dtype": "fp32", "reason": "one node"}


def _run(cfg: TrainConfig, run_directory: str | None, start_step: int = 0, said: list | None = None) -> dict:
    """The trainer's calls on rank 0's RunLog for steps start_step+1..cfg.steps; returns the final summary."""
    said = [] if said is None else said
    log = trackers.for_run(cfg, run_directory, start_step, say=said.append)
    log.params({**dataclasses.asdict(cfg), "world_size": 2, "sharding": SHARDING, "memory_plan": None})
    for step in range(start_step + 1, cfg.steps + 1):
        log.scalars(step, {"train/loss": 5.0 / step, "train/learning_rate": 1e-3, "train/tokens_per_s": 100.0 + step,
                           "train/mfu": None})
        if step % 3 == 0:
            log.scalars(step, {"eval/loss": 6.0 / step})
    final = {"steps": cfg.steps, "final_loss": 5.0 / cfg.steps, "tokens_per_s": 105.0, "mfu": None,
             "diverged_at_step": None, "model": f"{run_directory}/model_{cfg.steps:06d}", "nccl_logs": {},
             "sharding": SHARDING}
    log.close(final)
    return final


def test_report_to_takes_transformers_names_and_refuses_others():
    assert parse_report_to("tensorboard") == ("tensorboard",)
    assert parse_report_to("mlflow, wandb,mlflow") == ("mlflow", "wandb")
    assert parse_report_to("none") == ()
    for wrong in ("comet", "none,mlflow", "", "all"):
        with pytest.raises(ValueError, match="--report_to must be a comma list of tensorboard, mlflow, wandb, or none"):
            TrainConfig(report_to=wrong)


def test_the_mlflow_server_has_every_step_and_the_runs_parameters_and_a_resumed_run_goes_on_in_it(
        mlflow_server, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    cfg = TrainConfig(model_config="tiny", steps=STEPS, report_to="mlflow", mlflow_tracking_uri=mlflow_server,
                      storage_path=str(tmp_path), run_name="served")
    said = []
    final = _run(dataclasses.replace(cfg, steps=4), str(tmp_path / "served"), said=said)
    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("ray-train-fsdp-llm").experiment_id],
                                filter_string=f"tags.`{RUN_NAME_TAG}` = 'served'")
    assert said == [f"tracking: mlflow run {run.info.run_id}: {mlflow_server}/#/experiments/"
                    f"{run.info.experiment_id}/runs/{run.info.run_id}"], said
    assert run.info.run_name == "served" and run.info.status == "FINISHED", run.info
    losses = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert losses == [(step, 5.0 / step) for step in range(1, 5)], losses
    assert "train/mfu" not in run.data.metrics, "a CPU run has no MFU: nothing is logged for it"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/loss")] == [3], "eval at step 3"
    params = run.data.params
    assert (params["steps"], params["model_config"], params["report_to"], params["sharding.mesh_shape"]) == (
        "4", "tiny", "mlflow", "[2]"), params
    assert run.data.tags["model"] == final["model"] and run.data.tags["summary.final_loss"] == "1.25", run.data.tags

    # The same run name again (a resume, here with more steps): the same MLflow run, its new steps added, the
    # parameter it already had kept (MLflow's are immutable).
    _run(cfg, str(tmp_path / "served"), start_step=4)
    (resumed,) = client.search_runs([run.info.experiment_id], filter_string=f"tags.`{RUN_NAME_TAG}` = 'served'")
    assert resumed.info.run_id == run.info.run_id
    losses = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert losses == list(range(1, STEPS + 1)), losses
    summary = client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path))
    assert '"final_loss": 0.8333' in open(summary).read(), "the whole summary is the run's artifact"


def test_wandb_offline_writes_every_step_the_parameters_and_the_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    cfg = TrainConfig(model_config="tiny", steps=STEPS, report_to="wandb", wandb_project="team",
                      storage_path=str(tmp_path), run_name="offline")
    said = []
    final = _run(cfg, str(tmp_path / "offline"), said=said)
    path = wandb_files.offline_run(str(tmp_path / "offline"))
    assert said[0].startswith("tracking: wandb run ") and "wandb sync " in said[0], said
    logged = wandb_files.history(path)
    assert logged["train/loss"] == [(step, 5.0 / step) for step in range(1, STEPS + 1)], logged
    assert [step for step, _ in logged["eval/loss"]] == [3, 6], logged["eval/loss"]
    config = wandb_files.config(path)
    assert (config["steps"], config["report_to"], config["sharding.mesh_shape"]) == (STEPS, "wandb", "[2]"), config
    summary = wandb_files.summary(path)
    assert summary["model"] == final["model"] and summary["final_loss"] == final["final_loss"], summary


class _Broken:
    name = "mlflow"

    def log_params(self, params):
        pass

    def log_metrics(self, step, values):
        raise ConnectionError("the server went away")

    def finish(self, summary):
        raise AssertionError("a tracker that failed is called no more")


def test_a_failing_tracker_is_one_warning_line_and_the_others_go_on(tmp_path, monkeypatch):
    said = []
    board = trackers._TensorBoard(str(tmp_path), 0)
    log = trackers.RunLog([_Broken(), board], board.log, say=said.append)
    for step in (1, 2, 3):
        log.scalars(step, {"train/loss": float(step)})
    log.close({"final_loss": 3.0})
    assert said == ["warning: --report_to mlflow failed (ConnectionError: the server went away); the run goes on "
                    "without it"], said
    assert tensorboard.read_scalars(str(tmp_path / "tensorboard"))["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0)]

    # A server that is not there at the start: the same, before the first step.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    cfg = TrainConfig(model_config="tiny", report_to="mlflow,tensorboard", mlflow_tracking_uri="http://127.0.0.1:9",
                      storage_path=str(tmp_path), run_name="down")
    said = []
    log = trackers.for_run(cfg, str(tmp_path / "down"), 0, say=said.append)
    log.scalars(1, {"train/loss": 1.0})
    log.close(None)
    assert len(said) == 1 and said[0].startswith("warning: --report_to mlflow could not start ("), said
    assert [tracker.name for tracker in log.trackers] == [] and os.path.isdir(tmp_path / "down" / "tensorboard")


def test_the_local_run_asks_the_mlflow_server_before_ray_and_refuses_one_that_does_not_answer(mlflow_server,
                                                                                              monkeypatch):
    """workload.run.services.check_services_reachable: the real server answers its /health; a closed port is exit 3
    naming where the URI came from (the flag, else MLFLOW_TRACKING_URI); a SQLite store needs no server."""
    import socket

    from workload import cli
    from workload.run import services

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    services.check_services_reachable(TrainConfig(report_to="mlflow", mlflow_tracking_uri=mlflow_server))
    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(cli.EnvironmentProblem, match=f"--mlflow_tracking_uri names, {closed}, does not answer"):
        services.check_services_reachable(TrainConfig(report_to="mlflow", mlflow_tracking_uri=closed))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", closed)
    with pytest.raises(cli.EnvironmentProblem, match="MLFLOW_TRACKING_URI names"):
        services.check_services_reachable(TrainConfig(report_to="mlflow"))
    services.check_services_reachable(TrainConfig(report_to="tensorboard"))  # not asked: no mlflow tracker
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///nowhere/mlflow.db")
    services.check_services_reachable(TrainConfig(report_to="mlflow"))


def test_without_a_tracking_uri_a_local_run_keeps_its_store_in_its_run_directory_and_a_remote_one_cannot(
        tmp_path, monkeypatch):
    from workload.metrics.mlflow_tracker import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = TrainConfig(report_to="mlflow")
    assert tracking_uri(cfg, str(tmp_path / "run")) == f"sqlite:///{tmp_path / 'run' / 'mlflow.db'}"
    with pytest.raises(ValueError, match="no --mlflow_tracking_uri"):
        tracking_uri(cfg, "s3://bucket/runs/run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.team:5000")
    assert tracking_uri(cfg, "s3://bucket/runs/run") == "http://mlflow.team:5000"
    assert tracking_uri(dataclasses.replace(cfg, mlflow_tracking_uri="http://x:1"), None) == "http://x:1"


def test_the_stacks_tracking_keys_reach_the_job_as_its_flags_and_its_clients_as_its_packages():
    from types import SimpleNamespace

    from infra import config
    from infra.job.job_config import job_pip, workload_config
    from tests.support.pulumi_mocks import stack_settings
    from workload.metrics.tracking import TRACKER_REQUIREMENTS

    raw = stack_settings(None) | {"gpuAvailabilityZone": "us-west-2b",
        "trainEnabled": True, "trainModelConfig": "tiny", "trainStoragePath": "s3://my-bucket/runs",
        "trainReportTo": "tensorboard,mlflow,wandb", "trainMlflowTrackingUri": "https://mlflow.team.example.com",
        "trainWandbProject": "team", "trainPushToHub": "me/tiny",
        "trainSecretEnv": ["WANDB_API_KEY=k", "HF_TOKEN=t"]}
    cfg = config.parse(raw)
    facts = SimpleNamespace(network_gbps=0.0, instance_type="g6e.xlarge", gpu_memory_mib=0, gpu_name="")
    args = workload_config(cfg, facts).to_args()
    for flag, value in (("--report_to", "tensorboard,mlflow,wandb"), ("--wandb_project", "team"),
                        ("--mlflow_tracking_uri", "https://mlflow.team.example.com"), ("--push_to_hub", "me/tiny")):
        assert args[args.index(flag) + 1] == value, args
    assert job_pip(cfg.train) == [TRACKER_REQUIREMENTS["mlflow"], TRACKER_REQUIREMENTS["wandb"]]
    assert job_pip(config.parse(raw | {"trainReportTo": "tensorboard", "trainMlflowTrackingUri": "",
                                                 "trainWandbProject": "", "trainPip": ["wandb==0.30.0"]}).train) == [
        "wandb==0.30.0"], "no tracker client unless trainReportTo names it, and never over trainPip's own"


def test_the_trackers_pins_are_requirements_txts():
    from tests.support.docs_shell import REPO
    from workload.metrics.tracking import TRACKER_REQUIREMENTS

    pinned = set((REPO / "requirements.txt").read_text().split())
    assert set(TRACKER_REQUIREMENTS.values()) <= pinned, "the job's tracker clients are the versions tested here"


def test_wandb_writes_under_wandb_dir_where_it_is_set(tmp_path, monkeypatch):
    """WANDB_DIR is where wandb's files go (wandb/env.py DIR), as the check before Ray takes it
    (workload/run/writable.py tracker_directories): not overridden by the run directory."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-files"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = TrainConfig(model_config="tiny", steps=STEPS, report_to="wandb", storage_path=str(tmp_path / "runs"),
                      run_name="elsewhere")
    _run(cfg, str(tmp_path / "runs" / "elsewhere"))
    path = wandb_files.offline_run(str(tmp_path / "wandb-files"))
    assert [step for step, _ in wandb_files.history(path)["train/loss"]] == list(range(1, STEPS + 1))
    assert not os.path.exists(tmp_path / "runs" / "elsewhere" / "wandb"), "nothing of W&B's in the run directory"
