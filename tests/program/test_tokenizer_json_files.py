"""A Hub tokenizer whose JSON files AutoTokenizer json.loads are not JSON objects (a tokenizer_config.json cut off
mid-upload, a special_tokens_map.json that is a list): refused at preview naming trainTokenizer (or trainModelId) and
the file, by the one rule every reader of those files applies (workload/data/tokenizer_size.py check_json_files,
json_object_problem), where the job's data stage would fail in AutoTokenizer.from_pretrained with JSONDecodeError after
the nodes bill; and each file the preview's checks share is asked of the Hub once (model_source.reads_once)."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import REPO, run_program

DATA = REPO / "data"
CHAT_FILES = {name: (DATA / "chat-tokenizer" / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}
CHAT_CONFIG = json.loads(CHAT_FILES["tokenizer_config.json"])
CHAT_CONFIG["chat_template"] = (DATA / "chat-tokenizer" / "chat_template.jinja").read_text()
JOB = {"trainEnabled": True, "trainModelId": "Qwen/Qwen3-0.6B", "trainStoragePath": "s3://company-data/runs",
       "trainDataset": "lab/texts"}


def _tokenizer(config: bytes, **others: bytes) -> dict[str, bytes]:
    return {"tokenizer.json": CHAT_FILES["tokenizer.json"], "tokenizer_config.json": config, **others}


@pytest.fixture
def hub(monkeypatch):
    whole = json.dumps(CHAT_CONFIG).encode()
    repos = {"lab/half-config": _tokenizer(whole[:len(whole) // 2]),
             "lab/list-config": _tokenizer(b'["eos_token", "<|im_end|>"]'),
             "lab/legacy-map": _tokenizer(json.dumps({k: v for k, v in CHAT_CONFIG.items()
                                                      if k != "added_tokens_decoder"}).encode(),
                                          **{"special_tokens_map.json": b'[{"eos_token": "<|im_end|>"}]'}),
             "lab/good": _tokenizer(whole, **{"special_tokens_map.json": b'{"eos_token": "<|im_end|>"}'})}
    with FakeHub(repos=repos) as server:
        server.datasets["lab/texts"] = {"files": {"train.jsonl": b'{"text": "a line of text"}\n' * 20}}
        lines = (DATA / "conversations.jsonl").read_bytes().splitlines(keepends=True)[:20]
        server.datasets["lab/dialogues"] = {"files": {"train.jsonl": b"".join(lines)}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


@pytest.mark.parametrize("tokenizer, file, words", [
    ("lab/half-config", "tokenizer_config.json", "is not UTF-8 JSON"),
    ("lab/list-config", "tokenizer_config.json", "is a JSON list, not an object"),
    ("lab/legacy-map", "special_tokens_map.json", "is a JSON list, not an object"),
])
@pytest.mark.parametrize("data_format", ["text", "chat"])
def test_a_tokenizer_json_file_that_is_no_object_is_refused_naming_the_key_and_the_file(hub, tokenizer, file, words,
                                                                                          data_format):
    overrides = {**JOB, "trainTokenizer": tokenizer}
    if data_format == "chat":
        overrides.update(trainDataFormat="chat", trainDataset="lab/dialogues")
    message = program_refusal(overrides)
    assert message.startswith("config key 'trainTokenizer':"), message
    assert f"{tokenizer}'s {file} on the Hub {words}" in message and "allowed: a JSON object" in message, message


def test_a_good_tokenizer_passes_and_each_file_is_asked_for_once(hub):
    run = run_program("dev", {**JOB, "trainTokenizer": "lab/good", "trainDataFormat": "chat",
                              "trainDataset": "lab/dialogues"})
    assert run.error is None, run.error
    asked = [path for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path
             and path.startswith("/lab/good/")]
    assert sorted(asked) == sorted(set(asked)), f"a file asked for twice: {asked}"
    assert "/lab/good/resolve/main/tokenizer_config.json" in asked, asked  # read by the chat check and the size
