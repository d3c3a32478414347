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

# configs whose data_files name files the repo lacks: the first (resolved whenever the repo loads) and a second one
STRAY_CARD = (b"---\nconfigs:\n- config_name: main\n  default: true\n  data_files:\n  - split: train\n"
              b"    path: shards/part-*.jsonl\n  - split: validation\n    path: held/*.jsonl\n"
              b"- config_name: extra\n  data_files:\n  - split: train\n    path: extra/**/*.parquet\n---\n")


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={}) as server:
        server.datasets["lab/plain"] = {"files": {"corpus.jsonl": RECORDS}}
        server.datasets["lab/cards"] = {"files": {"README.md": CARD, "short/train.jsonl": RECORDS,
                                                  "long/train.jsonl": RECORDS, "long/validation.jsonl": RECORDS}}
        # a default by `default: true`, and by the name "default" (datasets/utils/metadata.py get_default_config_name)
        server.datasets["lab/defaulted"] = {"files": {"README.md": CARD.replace(b"name: long\n", b"name: long\n  default: true\n"),
                                                      "short/train.jsonl": RECORDS, "long/train.jsonl": RECORDS,
                                                      "long/validation.jsonl": RECORDS}}
        server.datasets["lab/named-default"] = {"files": {"README.md": CARD.replace(b"name: long", b"name: default"),
                                                          "short/train.jsonl": RECORDS, "long/train.jsonl": RECORDS,
                                                          "long/validation.jsonl": RECORDS}}
        server.datasets["lab/stray"] = {"files": {"README.md": STRAY_CARD, "shards/part-0.jsonl": RECORDS,
                                                  "held/part-0.jsonl": RECORDS}}
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


@pytest.mark.parametrize("dataset, config", [("lab/plain", "default"), ("lab/cards", "long"), ("lab/plain", ""),
                                             ("lab/defaulted", ""), ("lab/named-default", "")])
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


@pytest.mark.parametrize("dataset, names", [("lab/cards", "short, long")])
def test_no_config_for_a_repo_of_several_and_no_default_is_refused_naming_the_key_and_its_configs(hub, dataset, names):
    message = program_refusal({**JOB, "trainDataset": dataset})
    assert message.startswith(f"config key 'trainDatasetConfig': {dataset}: empty, and the repo declares 2 configs "
                              "and no default"), message
    assert message.endswith(f"allowed: one of {names}"), message


def test_a_config_whose_data_files_match_nothing_is_refused_naming_the_key_that_chose_it(hub):
    message = program_refusal({**JOB, "trainDataset": "lab/stray", "trainDatasetConfig": "extra"})
    assert message.startswith("config key 'trainDatasetConfig': lab/stray: the README's config 'extra' names files "
                              "for split 'train' (extra/**/*.parquet) that match none in the repo"), message
    assert "(its configs: main, extra)" in message, message
    run = run_program("dev", {**JOB, "trainDataset": "lab/stray", "trainEvalSplit": "validation"})
    assert run.error is None, run.error


def test_the_first_config_is_resolved_whatever_config_is_chosen(hub):
    # load.py HubDatasetModuleFactory resolves the first config's data_files to pick the builder, for any config
    hub.datasets["lab/stray"]["files"].pop("held/part-0.jsonl")
    message = program_refusal({**JOB, "trainDataset": "lab/stray"})
    assert message.startswith("config key 'trainDataset': lab/stray: the README's config 'main' names files for "
                              "split 'validation' (held/*.jsonl) that match none"), message
