"""The data stage's cost at preview: jobDataPlan states the tokens, the token shards and the stage's seconds from
trainDataset's size (an S3 object's HeadObject under moto, a Hub dataset's file list from the fake Hub), a dataset
whose shards cannot fit is refused naming trainDataset, and a size that cannot be read is a warning.

Expected figures are worked by hand: 6.07 bytes a text token and 404,000 tokens per CPU second (the data_scale
benchmark's), 4 bytes a token in the shards, parquet read as 1.7 times its size, dev's 2 x g6.12xlarge giving Ray
2 x 40 worker CPUs and the head's 2.
"""
from __future__ import annotations

import json
import logging

import boto3
from botocore.stub import Stubber

from infra import config
from infra.config import AwsIdentity
from infra.preview import data_cost
from tests.support.fake_hub import FakeHub, LargeFile, unreachable_hub
from tests.support.pulumi_mocks import run_program, run_program_expecting_error, stack_settings

QWEN_7B = {"trainEnabled": True, "trainModelId": "Qwen/Qwen2.5-7B", "trainStoragePath": "s3://bucket/runs"}
RECORDS = "".join(json.dumps({"text": f"document {n} about the cat"}) + "\n" for n in range(100)).encode()


def warnings_of(caplog, word: str = "its size") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and word in r.getMessage()]


def test_an_s3_objects_size_gives_the_plans_tokens_shards_and_seconds(aws_env, caplog):
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="data")
    body = RECORDS * (3_000_000 // len(RECORDS))
    s3.put_object(Bucket="data", Key="corpus.jsonl", Body=body)
    with caplog.at_level(logging.WARNING):
        plan = run_program("dev", {**QWEN_7B, "trainDataset": "s3://data/corpus.jsonl"}).exports["jobDataPlan"]
    tokens = len(body) / 6.07
    assert plan["dataset_gb"] == round(len(body) / 1e9, 3) and plan["cpus"] == 82, plan
    assert plan["tokens_millions"] == round(tokens / 1e6, 1), plan
    assert plan["shards_gb"] == round(tokens * 4 / 1e9, 3), plan
    assert plan["stage_seconds"] == round(tokens / (404_000 * 82), 1), plan
    assert plan["summary"] == (f"data: ~{len(body) / 1e6:.1f} MB s3 object -> ~{tokens / 1e3:.1f} k tokens, shards "
                               f"~{tokens * 4 / 1e6:.1f} MB, stage ~0 s on 82 Ray CPUs (a cache hit tokenizes "
                               "nothing)"), plan
    assert not warnings_of(caplog), "the size was read"


def test_without_a_dataset_there_is_no_stage_and_no_plan():
    assert run_program("dev", QWEN_7B).exports["jobDataPlan"] is None


def hub(files: dict) -> FakeHub:
    server = FakeHub()
    server.datasets["acme/web"] = {"files": files}
    return server


def test_a_hub_splits_parquet_files_are_counted_expanded(monkeypatch):
    files = {"data/train-00000-of-00002.parquet": LargeFile(b"", 10**9),
             "data/train-00001-of-00002.parquet": LargeFile(b"", 10**9),
             "data/test-00000-of-00001.parquet": LargeFile(b"", 10**8)}  # another split: not counted
    with hub(files) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        plan = run_program("dev", {**QWEN_7B, "trainDataset": "acme/web"}).exports["jobDataPlan"]
    assert ("GET", "/api/datasets/acme/web", "") in server.requests, server.requests
    tokens = 2e9 * 1.7 / 6.07  # 560.1 M
    assert (plan["dataset_gb"], plan["text_gb"]) == (2.0, 3.4), plan
    assert plan["summary"] == ("data: ~2.0 GB in 2 parquet files on the Hub -> ~560.1 M tokens, shards ~2.2 GB, "
                               "stage ~17 s on 82 Ray CPUs (a cache hit tokenizes nothing)"), plan
    assert plan["stage_seconds"] == round(tokens / (404_000 * 82), 1), plan


def test_a_dataset_whose_shards_cannot_fit_is_refused_naming_the_key(monkeypatch):
    """60 GB of .jsonl text: ~9.9 B tokens, whose streams and shards (8 bytes a token, ~79 GB) the Ray head cannot
    hold on its 100 GiB system disk beside the image (40 GiB usable: ~32.6 GB of text)."""
    files = {f"data/train-0000{n}-of-00002.jsonl": LargeFile(RECORDS, 30 * 10**9) for n in range(2)}
    with hub(files) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        failed = run_program_expecting_error("dev", {**QWEN_7B, "trainDataset": "acme/web"})
    message = str(failed.error)
    assert message.startswith("config key 'trainDataset': acme/web (~60.0 GB in 2 jsonl files on the Hub, ~9.9 B "
                              "tokens) makes ~39.5 GB of token shards, which the Ray head packs"), message
    assert message.endswith("; allowed: a dataset of at most ~32.6 GB stored"), message
    assert not failed.resources, "refused before any resource is registered"


def test_an_unreachable_hub_is_a_warning_and_no_plan(monkeypatch, caplog):
    _, waits = unreachable_hub(monkeypatch)
    with caplog.at_level(logging.WARNING):
        plan = run_program("dev", {**QWEN_7B, "trainDataset": "acme/web"}).exports["jobDataPlan"]
    assert plan is None
    (warning,) = warnings_of(caplog)
    assert warning.startswith("trainDataset acme/web: its size could not be listed on the Hugging Face Hub (the "
                              "Hugging Face Hub at http://127.0.0.1:"), warning
    assert "not estimated (jobDataPlan is null)" in warning, warning
    assert waits == [], "asked once, no retries"


def test_an_s3_object_the_deployer_may_not_read_is_a_warning(monkeypatch):
    """HeadObject answered 403 (S3's answer to a HEAD without s3:GetObject): warned, naming the key and the reader."""
    from infra.aws import identity as aws_identity

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
    stubber = Stubber(client)
    stubber.add_client_error("head_object", service_error_code="403", http_status_code=403,
                             expected_params={"Bucket": "data", "Key": "corpus.jsonl"})

    class Session:
        def client(self, name):
            assert name == "s3", name
            return client

    monkeypatch.setattr(aws_identity, "session", lambda identity, region: Session())
    warned: list[str] = []
    cfg = config.parse(stack_settings("dev") | {**QWEN_7B, "trainDataset": "s3://data/corpus.jsonl"})
    with stubber:
        assert data_cost.read_size(cfg, identity=AwsIdentity(), region="us-east-1", warn=warned.append) is None
    assert warned == [("trainDataset s3://data/corpus.jsonl: its size could not be read as the environment's "
                       "credentials (403), so the data stage's time and its shards' size are not estimated "
                       "(jobDataPlan is null) nor checked against the nodes' disks")], warned
