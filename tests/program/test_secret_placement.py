"""A key may be a Pulumi secret only where its value reaches the job or the pods whole (settings.SECRET_CAPABLE_KEYS):
a secret on a key that names or shapes resources is refused at preview, naming the key and never the value."""
from __future__ import annotations

import pytest

from infra.config.settings import SECRET_CAPABLE_KEYS, SECRET_UNLESS_S3_KEYS
from tests.support.pulumi_mocks import Secret, _run, plain_strings

PLANTED = "hiddenR5tq2"
JOB = {"trainEnabled": True}


@pytest.mark.parametrize("overrides, key", [
    ({"clusterName": Secret(f"team-{PLANTED}")}, "clusterName"),
    ({"rayNamespace": Secret(f"ns-{PLANTED.lower()}")}, "rayNamespace"),
    ({"rayClusterName": Secret(f"rc-{PLANTED.lower()}")}, "rayClusterName"),
    ({**JOB, "trainStoragePath": Secret(f"s3://ml-runs/{PLANTED}")}, "trainStoragePath"),
    ({"gpuNodeCount": Secret("3")}, "gpuNodeCount"),
    ({**JOB, "trainStoragePath": "s3://ml-runs/x", "trainModelId": Secret(f"s3://ml-models/{PLANTED}/")},
     "trainModelId"),
    ({**JOB, "trainStoragePath": "s3://ml-runs/x", "trainDataset": Secret(f"s3://ml-data/{PLANTED}.jsonl")},
     "trainDataset"),
])
def test_a_secret_on_a_resource_shaping_key_is_refused_without_its_value(overrides, key):
    run = _run("dev", overrides)
    message = str(run.error)
    assert isinstance(run.error, ValueError), run.error
    assert message.startswith(f"config key {key!r}: cannot be a secret"), message
    assert PLANTED not in message and PLANTED.lower() not in message and "\n" not in message
    assert not run.resources


def test_a_secret_on_a_capable_key_is_accepted_and_kept_out_of_plain_inputs(monkeypatch):
    # The control: a Hub tokenizer id may be a secret; it reaches the job's arguments only, marked secret there.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    run = _run("dev", {**JOB, "trainStoragePath": "s3://ml-runs/x", "trainDataset": "org/corpus",
                       "trainTokenizer": Secret(f"some-org/tok-{PLANTED}")})
    assert run.error is None, run.error
    assert not [text for r in run.resources for text in plain_strings(r.inputs) if PLANTED in text]


def test_the_declared_keys_are_keys_of_the_schema():
    from infra.config.schema import schema
    assert SECRET_CAPABLE_KEYS <= set(schema()) and set(SECRET_UNLESS_S3_KEYS) <= SECRET_CAPABLE_KEYS
    assert "clusterName" not in SECRET_CAPABLE_KEYS and "trainStoragePath" not in SECRET_CAPABLE_KEYS


@pytest.mark.parametrize("value", [f"wb{PLANTED}{'k' * 30}\n", f"hf_{PLANTED}{'Q' * 23}\rAWS_REGION=x",
                                   f"tok{PLANTED}\u200bend", f"tok{PLANTED}\u2028next", f"\t{PLANTED}"])
def test_a_secret_value_with_a_control_format_or_line_separator_character_is_refused_without_it(value):
    # infra/config/train_keys.py _parse_env: a token holds none; huggingface_hub's _clean_token would delete a newline
    # and send another token, and a token file's trailing newline would reach the pods' variable.
    run = _run("dev", {**JOB, "trainReportTo": "wandb", "trainSecretEnv": Secret([f"WANDB_API_KEY={value}"])})
    message = str(run.error)
    assert isinstance(run.error, ValueError), run.error
    assert message.startswith("config key 'trainSecretEnv': entry 0 (WANDB_API_KEY): the value holds U+"), message
    assert PLANTED not in message and "\n" not in message and not run.resources
