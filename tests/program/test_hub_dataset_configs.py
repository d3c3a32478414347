"""A trainDatasetConfig a Hub dataset repo does not have: refused at preview naming trainDatasetConfig and the configs
the repo has (workload.data.hub_splits.config_names), where datasets' builder.py would raise
`ValueError: BuilderConfig '<name>' not found. Available: ['default']` in the data stage, on the cluster: a repo
without a loading script has the README's `configs` entries, else the single "default" (datasets/load.py
HubDatasetModuleFactory, create_builder_configs_from_metadata_configs). A config the README declares narrows the split
lookup to its own data_files. A wrong trainDatasetSplit is refused naming trainDatasetSplit. The Hub is
tests/support/fake_hub.py (its dataset files served as the Hub's resolve endpoint serves them, README.md included)."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import run_program

JOB = {"trainEnabled": True, "trainStoragePath": "s3://company-data/runs"}
RECORDS = b"".join(json.dumps({"text": f"line {i}"}).encode() + b"\n" for i in range(20))
CARD = (b"---\nconfigs:\n- config_name: short\n  data_files:\n  - split: train\n    path: short/train.jsonl\n"
        b"- config_name: long\n  data_files:\n  - split: train\n    path: long/train.jsonl\n"
        b"  - split: validation\n    path: long/validation.jsonl\n---\n# a card\n")


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={}) as server:
        server.datasets["lab/plain"] = {"files": {"corpus.jsonl": RECORDS}}
        server.datasets["lab/cards"] = {"files": {"README.md": CARD, "short/train.jsonl": RECORDS,
                                                  "long/train.jsonl": RECORDS, "long/validation.jsonl": RECORDS}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("dataset, config, has", [
    ("lab/plain", "fr", "default"),
    ("lab/cards", "medium", "short, long"),
])
def test_a_config_the_repo_lacks_is_refused_naming_the_key_and_its_configs(hub, dataset, config, has):
    message = program_refusal({**JOB, "trainDataset": dataset, "trainDatasetConfig": config})
    assert message.startswith(f"config key 'trainDatasetConfig': {dataset}: no config '{config}'"), message
    assert f"whose configs are: {has} " in message, message


@pytest.mark.parametrize("dataset, config", [("lab/plain", "default"), ("lab/cards", "long"), ("lab/cards", "")])
def test_a_config_the_repo_has_is_accepted(hub, dataset, config):
    run = run_program("dev", {**JOB, "trainDataset": dataset, "trainDatasetConfig": config})
    assert run.error is None, run.error


def test_a_config_narrows_the_splits_to_its_own_data_files(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/cards", "trainDatasetConfig": "short",
                               "trainEvalSplit": "validation"})
    assert message.startswith("config key 'trainEvalSplit': lab/cards: no data file of split 'validation' "
                              "(config 'short')"), message
    run = run_program("dev", {**JOB, "trainDataset": "lab/cards", "trainDatasetConfig": "long",
                              "trainEvalSplit": "validation"})
    assert run.error is None, run.error


def test_a_split_the_repo_lacks_is_refused_naming_trainDatasetSplit(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/plain", "trainDatasetSplit": "holdout"})
    assert message.startswith("config key 'trainDatasetSplit': lab/plain: no data file of split 'holdout'"), message
