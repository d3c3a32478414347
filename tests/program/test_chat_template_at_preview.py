"""Chat and prompt-completion data need a chat template: a Hub tokenizer without one (no "chat_template" in its
tokenizer_config.json, no chat_template.jinja in its repo) and no trainChatTemplate is refused at preview, naming
trainTokenizer (or trainModelId), trainChatTemplate and its allowed names (infra/preview/chat_template.py), where the
job would fail in transformers' apply_chat_template ("tokenizer.chat_template is not set") after the GPUs bill. The
Hub is the local fake (tests/support/fake_hub.py); the tokenizers are the repo's samples under data/."""
from __future__ import annotations

import json

import pulumi
import pytest

from infra.preview import chat_template
from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub, unreachable_hub
from tests.support.pulumi_mocks import REPO, run_program
from workload.config import CHAT_TEMPLATES

DATA = REPO / "data"
PLAIN = {name: (DATA / "tokenizer" / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}
JINJA_ONLY = {name: (DATA / "chat-tokenizer" / name).read_bytes()
              for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")}
IN_CONFIG = {**PLAIN, "tokenizer_config.json": json.dumps({
    **json.loads(PLAIN["tokenizer_config.json"]),
    "chat_template": (DATA / "chat-tokenizer" / "chat_template.jinja").read_text()}).encode()}
JOB = {"trainEnabled": True, "trainModelId": "Qwen/Qwen3-0.6B", "trainStoragePath": "s3://company-data/runs"}
CHAT = {**JOB, "trainDataFormat": "chat", "trainDataset": "lab/dialogues"}


@pytest.fixture
def hub(monkeypatch):
    repos = {"lab/plain-tokenizer": dict(PLAIN), "lab/jinja-tokenizer": dict(JINJA_ONLY),
             "lab/config-tokenizer": dict(IN_CONFIG)}
    with FakeHub(repos=repos) as server:
        lines = (DATA / "conversations.jsonl").read_bytes().splitlines(keepends=True)[:20]
        server.datasets["lab/dialogues"] = {"files": {"train.jsonl": b"".join(lines)}}
        pairs = (DATA / "instructions.jsonl").read_bytes().splitlines(keepends=True)[:20]
        server.datasets["lab/pairs"] = {"files": {"train.jsonl": b"".join(pairs)}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("overrides", [
    {**CHAT, "trainTokenizer": "lab/plain-tokenizer"},
    {**JOB, "trainDataFormat": "prompt-completion", "trainDataset": "lab/pairs", "trainTokenizer": "lab/plain-tokenizer"},
], ids=["chat", "prompt-completion"])
def test_a_hub_tokenizer_without_a_template_is_refused_naming_the_keys_and_the_templates(hub, overrides):
    message = program_refusal(overrides)
    for words in ("config key 'trainTokenizer'", "lab/plain-tokenizer", "no chat template", "trainChatTemplate",
                  f"trainDataFormat {overrides['trainDataFormat']}", *CHAT_TEMPLATES):
        assert words in message, f"the refusal names {words!r}: {message}"


def test_a_named_template_makes_the_same_tokenizer_pass(hub):
    run = run_program("dev", {**CHAT, "trainTokenizer": "lab/plain-tokenizer", "trainChatTemplate": "qwen2.5"})
    assert run.error is None, run.error


@pytest.mark.parametrize("tokenizer, listed", [("lab/jinja-tokenizer", True), ("lab/config-tokenizer", False)])
def test_a_template_in_either_place_transformers_loads_it_from_passes(hub, tokenizer, listed):
    assert chat_template.on_hub(tokenizer, "trainTokenizer", None) is True
    asked_listing = any(path == f"/api/models/{tokenizer}" for _, path, _ in hub.requests)
    assert asked_listing is listed, f"the file list is asked only when tokenizer_config.json has none: {hub.requests}"
    run = run_program("dev", {**CHAT, "trainTokenizer": tokenizer})
    assert run.error is None, run.error


def test_a_template_under_additional_chat_templates_counts(hub):
    assert chat_template.on_hub("lab/plain-tokenizer", "trainModelId", None) is False
    hub.repos["lab/plain-tokenizer"]["additional_chat_templates/tool_use.jinja"] = b"{{ messages }}"
    assert chat_template.on_hub("lab/plain-tokenizer", "trainModelId", None) is True


def test_no_answer_is_a_warning_not_a_refusal(monkeypatch):
    _, waits = unreachable_hub(monkeypatch)
    found = chat_template.on_hub("lab/plain-tokenizer", "trainTokenizer", None)
    assert isinstance(found, str) and "could not be read from the Hub" in found and waits == [], found
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: seen.append(message))
    run = run_program("dev", {**CHAT, "trainTokenizer": "lab/plain-tokenizer"})
    assert run.error is None, run.error
    assert [line for line in seen if line.startswith("trainTokenizer lab/plain-tokenizer: whether its tokenizer has a "
                                                     "chat template is not known")], seen
