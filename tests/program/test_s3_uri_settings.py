"""Every setting that takes an s3:// URI (infra/config/rules.py S3_URI_SETTINGS: trainStoragePath, trainDataset,
trainModelId, trainTokenizer and their flags) follows the one S3 rule (workload/config/s3_uri.py: S3's general purpose
bucket naming rules among them), on the stack at preview and as a flag of `tools.job submit`."""
from __future__ import annotations

import pytest

from infra import config
from infra.config.rules import S3_URI_SETTINGS
from tests.program.test_refusals_at_preview import DEV, program_refusal
from tests.support.cli_process import run_cli
from workload import cli
from workload.config.s3_uri import refusal

JOB = {"trainEnabled": True, "trainStoragePath": "s3://team-data/runs", "trainDataset": "org/corpus"}
# One value per S3 naming rule: '_' and capitals are not in a bucket name, nor is an IPv4 address, and
# "xn--" starts no bucket's name.
BAD = {"trainTokenizer": "s3://team_tokenizers/tok/", "trainModelId": "s3://Team-Models/m/",
       "trainDataset": "s3://192.168.5.4/c.jsonl", "trainStoragePath": "s3://xn--runs/out"}


@pytest.mark.parametrize("key", sorted(BAD))
def test_every_s3_key_follows_the_bucket_rule(key):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | JOB | {key: BAD[key]})
    message = str(refused.value)
    assert message.startswith(f"config key {key!r}: "), message
    assert "bucket" in message, message


def test_the_whole_program_refuses_a_tokenizer_bucket_before_any_resource():
    message = program_refusal(JOB | {"trainTokenizer": "s3://tok_store/tokenizers/"})
    assert message.startswith("config key 'trainTokenizer': ") and "bucket naming rules" in message, message


def test_the_flags_take_the_same_rule():
    assert set(S3_URI_SETTINGS.values()) == set(BAD), "one list: every s3-taking key, each with its flag"
    why = refusal("--tokenizer", "s3://team_tokenizers/tok/")
    assert why is not None and why.startswith("--tokenizer ") and "bucket" in why, why
    assert refusal("--tokenizer", "s3://team-tokenizers/tok/") is None
    assert refusal("--model_id", "org/model") is None
    code, stderr, _, _ = run_cli("tools.job", ["submit", "--stack", "dev", "--print_config", "--", "--dataset",
                                               "org/corpus", "--storage_path", "s3://team-data/runs",
                                               "--tokenizer", "s3://team_tokenizers/tok/"])
    assert code == cli.USAGE and "--tokenizer" in stderr and "bucket" in stderr, stderr[-600:]
