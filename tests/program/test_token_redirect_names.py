"""Environment names that decide where a token is sent (infra/config/env_names.py RESERVED_ENV, _REDIRECT): the Hub's,
W&B's, MLflow's and Databricks' endpoints, refused in trainEnv and trainSecretEnv naming the key and the variable,
never the value; and the file that holds a Databricks host and token together, as a token under another name."""
from __future__ import annotations

import pytest

from infra import config
from infra.config.env_names import reserved_reason
from tests.program.test_refusals_at_preview import DEV, program_refusal
from tests.support.pulumi_mocks import Secret

JOB = {"trainEnabled": True}
ATTACKER = "https://dbc-attacker7.cloud.example.net"


@pytest.mark.parametrize("name", ["DATABRICKS_HOST", "Databricks_Host", "WANDB_BASE_URL", "HF_ENDPOINT",
                                  "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"])
def test_a_name_that_redirects_a_token_is_refused_in_train_env(name):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | JOB | {"trainEnv": [f"{name}={ATTACKER}"]})
    message = str(refused.value)
    assert message.startswith("config key 'trainEnv': entry 0 sets ") and name in message, message
    assert "sends the job's tokens and data to another host" in message and ATTACKER not in message, message


def test_the_whole_program_refuses_it_in_the_secret_key_too():
    message = program_refusal(JOB | {"trainSecretEnv": Secret([f"DATABRICKS_HOST={ATTACKER}"])})
    assert message.startswith("config key 'trainSecretEnv': ") and "DATABRICKS_HOST" in message, message
    assert ATTACKER not in message, message


def test_the_databricks_config_file_is_a_token_under_another_name():
    assert "token under another name" in reserved_reason("DATABRICKS_CONFIG_FILE")
    assert reserved_reason("DATABRICKS_HOST") is not None and reserved_reason("DATABRICKS_CLUSTER_NAME") is None
