"""A tracker's run variables (WANDB_PROJECT, MLFLOW_EXPERIMENT_NAME, ...) set while --report_to leaves that tracker
out: one `note:` line naming the variables, never their values, said by the local run before its Ray cluster starts
(workload/run/tracker_variables.py); the run goes on."""
from __future__ import annotations

from workload import cli
from workload.run import local
from workload.run.tracker_variables import unused_variables_note


def test_each_tracker_left_out_is_named_with_its_variables_and_never_their_values():
    environ = {"WANDB_RUN_GROUP": "sweep-lr-7", "WANDB_TAGS": "qwen,sft", "MLFLOW_EXPERIMENT_ID": "4211",
               "WANDB_API_KEY": "k" * 40, "MLFLOW_TRACKING_URI": "http://mlflow.internal:5000"}
    note = unused_variables_note("tensorboard", environ)
    assert note == ("WANDB_RUN_GROUP, WANDB_TAGS are set, and --report_to tensorboard leaves wandb out: nothing is "
                    "recorded in W&B (add wandb to --report_to, or unset them); MLFLOW_EXPERIMENT_ID is set, and "
                    "--report_to tensorboard leaves mlflow out: nothing is recorded in MLflow (add mlflow to "
                    "--report_to, or unset it)"), note
    assert "sweep-lr-7" not in note and "4211" not in note and "WANDB_API_KEY" not in note
    assert unused_variables_note("wandb,mlflow", environ) is None
    assert unused_variables_note("none", {"WANDB_NAME": "  "}) is None, "a blank variable is unset"
    assert "--report_to none leaves wandb out" in unused_variables_note("none", {"WANDB_MODE": "offline"})


def test_the_local_run_says_it_before_its_cluster_starts(tmp_path, monkeypatch, capsys):
    class ClusterWouldStart(cli.CheckFailed):
        pass

    def no_cluster(*args, **kwargs):
        raise ClusterWouldStart("the local Ray cluster would start now")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(local, "local_cluster", no_cluster)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "fine-tunes")
    for name in ("WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_GROUP", "WANDB_TAGS", "WANDB_NOTES", "WANDB_RUN_ID",
                 "WANDB_MODE", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    assert cli.run(local.main, ["--steps", "2", "--storage_path", "runs"]) == cli.CHECK_FAILED
    err = capsys.readouterr().err
    assert ("note: MLFLOW_EXPERIMENT_NAME is set, and --report_to tensorboard leaves mlflow out: nothing is recorded "
            "in MLflow") in err and err.index("note: MLFLOW") < err.index("the local Ray cluster would start"), err
