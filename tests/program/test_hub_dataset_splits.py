"""An evaluation split (or a training split) that a Hub dataset does not have (audit 44g D16): refused at preview
naming trainEvalSplit (trainDatasetSplit for the training split) and the splits the repo has, as datasets resolves them
without a loading script (workload.data.hub_splits); datasets would raise "Unknown split" in the data stage, on the
cluster. The Hub is tests/support/fake_hub.py."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import run_program

JOB = {"trainEnabled": True, "trainDataset": "acme/notes", "trainStoragePath": "s3://company-data/runs"}
RECORDS = b"".join(json.dumps({"text": f"note number {i}"}).encode() + b"\n" for i in range(30))


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={}) as server:
        server.datasets["acme/notes"] = {"files": {"train/part-0.jsonl": RECORDS, "train/part-1.jsonl": RECORDS,
                                                   "test/part-0.jsonl": RECORDS}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("overrides, key, split", [
    ({"trainEvalSplit": "validation"}, "trainEvalSplit", "validation"),
    ({"trainEvalSplit": "valid[:200]"}, "trainEvalSplit", "valid"),
    ({"trainDatasetSplit": "training_set"}, "trainDatasetSplit", "training_set"),
])
def test_a_split_the_repo_lacks_is_refused_naming_the_key_and_its_splits(hub, overrides, key, split):
    message = program_refusal({**JOB, **overrides})
    assert message.startswith(f"config key '{key}': acme/notes: no data file of split '{split}'"), message
    assert "whose splits are: train, test " in message, message


def test_a_split_the_repo_has_is_accepted(hub):
    run = run_program("dev", {**JOB, "trainEvalSplit": "test[:50%]"})
    assert run.error is None, run.error
