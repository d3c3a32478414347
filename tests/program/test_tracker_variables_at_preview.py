"""trainEnv's tracker run variables get the local run's bounds at preview (workload/run/variable_values.py LENGTHS,
one table for both sides): refused under the mocks with nothing registered, naming the key and the variable, never the
value."""
from __future__ import annotations

import pytest

from tests.program.test_refusals_at_preview import program_refusal


@pytest.mark.parametrize("entry, name, words", [
    ("MLFLOW_EXPERIMENT_NAME=" + "exp-" * 80, "MLFLOW_EXPERIMENT_NAME", "320 characters"),
    ("WANDB_TAGS=nightly," + "g" * 90, "WANDB_TAGS", "90 characters"),
])
def test_an_over_long_tracker_variable_in_train_env_is_refused(entry, name, words):
    message = program_refusal({"trainEnabled": True, "trainEnv": ["RUN_NOTE=ok", entry]})
    assert message.startswith(f"config key 'trainEnv': entry 1: {name} ({words}; its value is not shown)"), message
    assert entry.partition("=")[2][:16] not in message, message
