"""A Hub tokenizer's own chat template against a Hub dataset's first records, at preview
(infra/preview/template_records.py): a template whose raise_exception refuses every record checked is refused naming
trainDataset and the tokenizer's key in the template's own words, where the job's first apply_chat_template would
fail on every worker; one that renders any of them, a named trainChatTemplate, and a refusal that depends on a
special token the tokenizer has, pass. And a Hub tokenizer_config.json field of the wrong type
(workload/data/tokenizer_fields.py) is refused naming the key and the field. The Hub is the local fake
(tests/support/fake_hub.py); the tokenizer is the repo's data/chat-tokenizer."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import REPO, run_program

DATA = REPO / "data"
CHAT_TOKENIZER = {name: (DATA / "chat-tokenizer" / name).read_bytes() for name in ("tokenizer.json",
                                                                                   "tokenizer_config.json")}
SETTINGS = json.loads(CHAT_TOKENIZER["tokenizer_config.json"])
# Refuses a conversation that does not open with a user turn (as Mistral's templates refuse a bad role order).
USER_FIRST = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must open with a user turn') }}"
              "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
              "{% endfor %}")
# Refuses only when the tokenizer's end-of-turn token is not ChatML's: the tokenizer's own tokens decide.
TOKEN_GUARD = ("{% if eos_token != '<|im_end|>' %}{{ raise_exception('needs ChatML tokens') }}{% endif %}"
               "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}")
JOB = {"trainEnabled": True, "trainModelId": "Qwen/Qwen3-0.6B", "trainStoragePath": "s3://company-data/runs",
       "trainDataFormat": "chat"}


def _repo(**settings) -> dict:
    return {**CHAT_TOKENIZER, "tokenizer_config.json": json.dumps({**SETTINGS, **settings}).encode()}


@pytest.fixture
def hub(monkeypatch):
    repos = {"lab/user-first": _repo(chat_template=USER_FIRST), "lab/token-guard": _repo(chat_template=TOKEN_GUARD),
             "lab/bad-length": _repo(model_max_length="8192 tokens")}
    with FakeHub(repos=repos) as server:
        lines = (DATA / "conversations.jsonl").read_bytes().splitlines(keepends=True)[:12]
        server.datasets["lab/system-first"] = {"files": {"data/train.jsonl": b"".join(lines)}}
        # the same records, the fifth without its system turn: one the template renders
        record = json.loads(lines[4])
        record["messages"] = [turn for turn in record["messages"] if turn["role"] != "system"]
        mixed = [*lines[:4], (json.dumps(record) + "\n").encode(), *lines[5:]]
        server.datasets["lab/mixed"] = {"files": {"data/train.jsonl": b"".join(mixed)}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_template_that_refuses_every_record_checked_is_refused_in_its_own_words(hub):
    message = program_refusal({**JOB, "trainTokenizer": "lab/user-first", "trainDataset": "lab/system-first"})
    for words in ("config key 'trainDataset'", "lab/system-first/data/train.jsonl line 1", "trainTokenizer lab/user-first",
                  "Conversations must open with a user turn", "trainChatTemplate"):
        assert words in message, f"the refusal names {words!r}: {message}"
    assert len(message) < 500, message


@pytest.mark.parametrize("overrides", [
    {"trainTokenizer": "lab/user-first", "trainDataset": "lab/mixed"},  # one record of the first few renders
    {"trainTokenizer": "lab/user-first", "trainDataset": "lab/system-first", "trainChatTemplate": "qwen2.5"},
    {"trainTokenizer": "lab/token-guard", "trainDataset": "lab/system-first"},  # the tokenizer's eos is ChatML's
], ids=["a record renders", "a named template", "the tokenizer's own tokens"])
def test_what_the_job_would_render_passes(hub, overrides):
    run = run_program("dev", {**JOB, **overrides})
    assert run.error is None, run.error


def test_a_hub_tokenizer_config_field_of_the_wrong_type_is_refused_naming_the_key_and_field(hub):
    message = program_refusal({**JOB, "trainTokenizer": "lab/bad-length", "trainDataset": "lab/system-first"})
    for words in ("config key 'trainTokenizer'", "lab/bad-length", "tokenizer_config.json", "model_max_length",
                  "allowed: a number"):
        assert words in message, f"the refusal names {words!r}: {message}"
