"""A tracker's run variable longer than the tracker takes (MLFLOW_EXPERIMENT_NAME, WANDB_PROJECT, WANDB_TAGS'
tags) is refused before Ray starts, naming the variable and never its value (workload/run/variable_values.py
LENGTHS): the bounds are the installed trackers' own, read from them here."""
from __future__ import annotations

import pytest

from tests.support.cli_process import run_cli
from workload import cli
from workload.run import variable_values


def test_the_bounds_are_the_trackers_own():
    from mlflow.store.tracking.dbmodels.models import SqlExperiment
    from mlflow.utils.validation import MAX_EXPERIMENT_NAME_LENGTH

    most = variable_values.LENGTHS["MLFLOW_EXPERIMENT_NAME"][0]
    assert most == SqlExperiment.__table__.c.name.type.length and most <= MAX_EXPERIMENT_NAME_LENGTH
    import wandb

    wandb.Settings(project="q" * variable_values.LENGTHS["WANDB_PROJECT"][0])
    with pytest.raises(Exception, match="exceeded"):
        wandb.Settings(project="q" * (variable_values.LENGTHS["WANDB_PROJECT"][0] + 1))
    wandb.Settings(run_tags=("k" * variable_values.LENGTHS["WANDB_TAGS"][0],))
    with pytest.raises(Exception, match="between 1 and 64"):
        wandb.Settings(run_tags=("k" * (variable_values.LENGTHS["WANDB_TAGS"][0] + 1),))


@pytest.mark.parametrize("name, value, words", [
    ("MLFLOW_EXPERIMENT_NAME", "finetune-" * 40, "360 characters"),
    ("WANDB_PROJECT", "proj" * 33, "132 characters"),
    ("WANDB_TAGS", "baseline," + "t" * 70, "70 characters"),
    ("WANDB_TAGS", "baseline,,ablation", "an empty tag"),
])
def test_an_over_long_tracker_variable_is_refused_naming_it(name, value, words):
    why = variable_values.problem({name: value})
    assert why is not None and why.startswith(f"{name} ({words}; its value is not shown)"), why
    assert value not in why and value[:12] not in why, why


@pytest.mark.parametrize("name, value", [("MLFLOW_EXPERIMENT_NAME", "x" * 256), ("WANDB_PROJECT", "w" * 128),
                                         ("WANDB_TAGS", "a,b," + "c" * 64), ("WANDB_TAGS", "")])
def test_values_within_the_trackers_bounds_pass(name, value):
    assert variable_values.problem({name: value}) is None


def test_the_local_run_refuses_it_before_ray_and_torch(monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "sweep-" * 20_000)
    code, stderr, loaded, _ = run_cli("workload.local", ["--report_to", "mlflow", "--steps", "1"])
    assert (code, loaded) == (cli.ENVIRONMENT, []), stderr
    assert "MLFLOW_EXPERIMENT_NAME (120,000 characters; its value is not shown)" in stderr, stderr
    assert "sweep-sweep" not in stderr and len(stderr) < 600, stderr
