"""An S3 object's web address (the console's "Object URL", https://BUCKET.s3.REGION.amazonaws.com/KEY, or the path
style https://s3.REGION.amazonaws.com/BUCKET/KEY) pasted where an s3:// URI goes: every refusal of a https:// location
adds the s3:// URI it names (workload/s3_names.py s3_uri_of), on the local run's flags, workload.export's CHECKPOINT,
a --model_id, and the stack's keys at preview."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV
from workload import cli
from workload.model import model_source
from workload.run import checks, local
from workload.s3_names import s3_hint, s3_uri_of


@pytest.mark.parametrize("address, uri", [
    ("https://team-data.s3.amazonaws.com/corpora/c.jsonl", "s3://team-data/corpora/c.jsonl"),
    ("https://team-data.s3.eu-central-1.amazonaws.com/runs/", "s3://team-data/runs/"),
    ("https://team.data.s3-ap-south-1.amazonaws.com/k", "s3://team.data/k"),
    ("https://team-data.s3.dualstack.us-east-2.amazonaws.com/a/b", "s3://team-data/a/b"),
    ("https://s3.amazonaws.com/team-data/models/base", "s3://team-data/models/base"),
    ("https://s3.us-west-1.amazonaws.com/team-data/x?versionId=3", "s3://team-data/x"),
    ("https://team-data.example.com/x", None),
    ("https://huggingface.co/datasets/org/corpus", None),
    ("https://Team_Data.s3.amazonaws.com/x", None),  # no bucket can be named so
])
def test_s3_web_addresses_are_read_as_their_uri(address, uri):
    assert s3_uri_of(address) == uri
    assert s3_hint(address) == (f"; did you mean {uri}?" if uri else "")


def test_a_key_that_may_hold_a_token_is_not_repeated():
    assert s3_hint("https://team-data.s3.amazonaws.com/" + "Ab1" * 20) == ""


@pytest.mark.parametrize("flag", ["--dataset", "--storage_path", "--tokenizer"])
def test_the_local_run_names_the_s3_uri(flag):
    argv = [flag, "https://team-data.s3.us-west-2.amazonaws.com/p/x.jsonl"]
    if flag == "--tokenizer":
        argv += ["--dataset", "data/corpus.txt"]
    with pytest.raises(cli.UsageError) as refused:
        checks.check_schemes(local.parse_args(argv))
    assert str(refused.value).endswith("; did you mean s3://team-data/p/x.jsonl?"), refused.value


def test_a_model_id_and_an_export_checkpoint_name_the_s3_uri(tmp_path):
    why = model_source.problem("https://s3.amazonaws.com/team-data/models/base")
    assert why is not None and why.endswith("; did you mean s3://team-data/models/base?"), why
    from workload import storage

    with pytest.raises(cli.UsageError) as refused:
        with storage.local_copy("https://team-data.s3.amazonaws.com/runs/r1/checkpoint_000010"):
            pass
    assert str(refused.value).endswith("did you mean s3://team-data/runs/r1/checkpoint_000010?"), refused.value


@pytest.mark.parametrize("key, value", [
    ("trainStoragePath", "https://team-data.s3.amazonaws.com/runs"),
    ("trainDataset", "https://team-data.s3.amazonaws.com/runs/c.jsonl"),
])
def test_the_preview_names_the_s3_uri(key, value):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {"trainEnabled": True, "trainStoragePath": "s3://team-data/runs", key: value})
    assert f"'{key}'" in str(refused.value) and f"did you mean s3://team-data/{value.split('.com/')[1]}?" in \
        str(refused.value), refused.value
