"""A model or tokenizer the project ships a config or a size for is still downloaded by the job: when its Hub repo is
gated (every meta-llama repo; https://huggingface.co/docs/hub/models-gated) and trainSecretEnv has no HF_TOKEN with
access, the preview refuses it naming the key and trainSecretEnv, after one small request (infra/preview/hub_access.py),
while the shipped config still sizes it. The Hub is the local fake (tests/support/fake_hub.py), which answers a gated
repo's files 401 without a token and 403 to a token not granted, as the Hub does."""
from __future__ import annotations

import json
import logging

import pulumi
import pytest

from infra.preview import model_config
from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub, unreachable_hub
from tests.support.pulumi_mocks import Secret, run_program
from workload.model import architectures, model_source

GRANTED = "hf_granted_to_the_team_000000000000"
NOT_GRANTED = "hf_not_granted_yet_1111111111111111"
JOB = {"trainEnabled": True}
DATA = {"trainDataset": "acme/chats", "trainStoragePath": "s3://company-data/runs"}


def _repo(model_id: str) -> dict[str, bytes]:
    return {"config.json": json.dumps(architectures.published(model_id)).encode(), "model.safetensors": b"\0",
            "tokenizer_config.json": b"{}"}


@pytest.fixture
def hub(monkeypatch):
    gated = ("meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3-8B-Instruct")
    repos = {name: _repo(name if architectures.published(name) else "meta-llama/Llama-3.1-8B") for name in gated}
    with FakeHub(repos=repos, gated={name: {GRANTED} for name in gated}) as server:
        server.datasets["acme/chats"] = {"files": {"train.jsonl": b'{"text": "a line of text"}\n' * 20}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-70B"])
def test_a_shipped_gated_model_without_a_token_is_refused_naming_the_key_and_the_secret(hub, model_id):
    message = program_refusal({**JOB, "trainModelId": model_id, "trainMethod": "lora"})
    for words in ("config key 'trainModelId'", model_id, "gated", "trainSecretEnv", "HF_TOKEN"):
        assert words in message, f"the refusal names {words!r}: {message}"
    files = [path for _, path, _ in hub.requests if "/resolve/" in path]
    assert files == [f"/{model_id}/resolve/main/config.json"], f"one request, no weights: {files}"


def test_a_token_not_granted_is_refused_and_never_quoted(hub):
    message = program_refusal({**JOB, "trainModelId": "meta-llama/Llama-3.2-1B",
                               "trainSecretEnv": Secret([f"HF_TOKEN={NOT_GRANTED}"])})
    assert "'trainModelId'" in message and "has not been granted access" in message, message
    assert NOT_GRANTED not in message and NOT_GRANTED[3:20] not in message, "the token is never quoted"
    assert hub.requests[-1][2] == f"Bearer {NOT_GRANTED}", "the Hub was asked with trainSecretEnv's token"


def test_a_granted_token_passes_and_the_shipped_config_sizes_the_model(hub):
    run = run_program("dev", {**JOB, "trainModelId": "meta-llama/Llama-3.2-1B",
                              "trainSecretEnv": Secret([f"HF_TOKEN={GRANTED}"])})
    assert run.error is None and run.exports.get("jobMemoryPlan"), "accepted, with the plan of the shipped config"
    asked = [(path, auth) for _, path, auth in hub.requests if "/resolve/" in path]
    assert asked == [("/meta-llama/Llama-3.2-1B/resolve/main/config.json", f"Bearer {GRANTED}")], asked


def test_a_shipped_gated_tokenizer_without_a_token_is_refused_naming_trainTokenizer(hub):
    # Llama 3's 128,256 ids fit Qwen3's 151,936 rows: only the access refuses it.
    message = program_refusal({**JOB, **DATA, "trainModelId": "Qwen/Qwen3-4B", "trainMethod": "lora",
                               "trainTokenizer": "meta-llama/Meta-Llama-3-8B-Instruct"})
    for words in ("config key 'trainTokenizer'", "meta-llama/Meta-Llama-3-8B-Instruct", "gated", "trainSecretEnv"):
        assert words in message, f"the refusal names {words!r}: {message}"


def test_a_hub_that_does_not_answer_is_a_warning_and_the_shipped_config_still_sizes(monkeypatch):
    _, waits = unreachable_hub(monkeypatch)
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: seen.append(message))
    run = run_program("dev", {**JOB, "trainModelId": "meta-llama/Llama-3.2-1B"})
    assert run.exports.get("jobMemoryPlan"), "sized from the shipped config"
    warned = [line for line in seen if "may download it could not be asked" in line]
    assert len(warned) == 1 and "trainModelId meta-llama/Llama-3.2-1B" in warned[0], seen
    assert waits == [], "one request, no retries"


def test_tools_job_submit_decides_offline(monkeypatch, caplog):
    monkeypatch.setattr(model_source, "read_file", lambda *a, **k: pytest.fail("asked the Hub"))
    with caplog.at_level(logging.WARNING):
        found = model_config.resolve("meta-llama/Llama-3.2-1B", offline=True)
    assert isinstance(found, model_config.Known) and found.warning == "", found
