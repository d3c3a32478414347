"""The directories a tracker writes under, named by the environment or a flag (workload/run/writable.py
tracker_directories): WANDB_DIR for --report_to wandb, a local MLflow store (a path, file: or sqlite:/// URI) for
--report_to mlflow. Each is held to the rule of every directory a run writes (a directory this user can write in, or
create), before Ray: exit 3 naming the variable, exit 2 naming the flag. A tracker --report_to leaves out is not
asked about."""
from __future__ import annotations

import os

import pytest

from workload import cli
from workload.run import writable


@pytest.fixture
def a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    return tmp_path / "notes.txt"


@pytest.mark.parametrize("report_to, environ", [
    ("wandb", {"WANDB_DIR": "/proc/wandb-runs"}),
    ("tensorboard,wandb", {"WANDB_DIR": "{file}/runs"}),
    ("mlflow", {"MLFLOW_TRACKING_URI": "file:///proc/mlruns"}),
    ("mlflow", {"MLFLOW_TRACKING_URI": "{file}"}),
    ("mlflow,wandb", {"MLFLOW_TRACKING_URI": "sqlite:////proc/tracking/mlflow.db"}),
])
def test_a_tracker_directory_that_takes_no_file_is_exit_3_naming_the_variable(report_to, environ, a_file):
    environ = {name: value.format(file=a_file) for name, value in environ.items()}
    (variable,) = environ
    with pytest.raises(cli.EnvironmentProblem, match=rf"^{variable} is no place for the (W&B|MLflow) .*: .*; it must "
                                                     "be a directory this user can write in or create$") as refused:
        writable.check_tracker_directories(report_to, environ=environ)
    assert f"point {variable} at a directory of yours" in refused.value.hint


def test_the_flag_is_named_over_the_variable_and_is_exit_2(a_file):
    with pytest.raises(cli.UsageError, match=r"^--mlflow_tracking_uri is no place for the MLflow store.s database: "):
        writable.check_tracker_directories("mlflow", f"sqlite:///{a_file}/mlflow.db",
                                           environ={"MLFLOW_TRACKING_URI": "http://mlflow.internal:5000"})


@pytest.mark.parametrize("report_to, environ", [
    ("none", {"WANDB_DIR": "/proc/wandb-runs", "MLFLOW_TRACKING_URI": "/proc/mlruns"}),  # trackers left out
    ("tensorboard", {"WANDB_DIR": "/proc/wandb-runs"}),
    ("mlflow", {"MLFLOW_TRACKING_URI": "https://mlflow.example.com", "WANDB_DIR": "/proc/wandb-runs"}),
    ("mlflow,wandb", {"MLFLOW_TRACKING_URI": "{tmp}/mlruns", "WANDB_DIR": "{tmp}/new/wandb"}),
    ("mlflow", {"MLFLOW_TRACKING_URI": "sqlite:///relative/mlflow.db"}),
])
def test_what_a_run_can_write_or_does_not_use_passes_and_nothing_is_made(report_to, environ, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writable.check_tracker_directories(report_to, environ={k: v.format(tmp=tmp_path) for k, v in environ.items()})
    assert os.listdir(tmp_path) == []


def test_workload_local_refuses_it_before_ray_in_a_fresh_process(tmp_path, monkeypatch):
    from tests.support.cli_process import run_cli

    monkeypatch.setenv("WANDB_DIR", "/sys/wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    code, stderr, loaded, _ = run_cli(
        "workload.local", ["--model_config", "tiny", "--report_to", "wandb", "--storage_path", str(tmp_path / "runs")],
        watch=("ray", "torch", "wandb"))
    assert code == cli.ENVIRONMENT and stderr.startswith("error: WANDB_DIR is no place for the W&B run's files: "), \
        stderr[-600:]
    assert loaded == [], f"answered before {loaded} loaded"
