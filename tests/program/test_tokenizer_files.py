"""A Hub tokenizer given only as the slow BPE files (vocab.json and merges.txt, no tokenizer.json) is sized from
vocab.json with tokenizer_config.json's added_tokens_decoder, as transformers' len() counts it
(workload.data.tokenizer_size.size_of_vocab), and refused at preview when larger than config.json's vocab_size; a Hub
repo holding no tokenizer file at all (AutoTokenizer.from_pretrained raises "Can't load tokenizer for ..." in the data
stage, transformers' tokenization_utils_base.py) is refused naming trainTokenizer, or trainModelId for the model's
own, from the repo's file list (HfApi.model_info's siblings: tests/support/fake_hub.py _model_info)."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.program.test_tokenizer_vocabulary import SMALL_LLAMA
from tests.support.fake_hub import FakeHub
from tests.support.pulumi_mocks import run_program
from tests.support.sentencepiece_files import sentencepiece_model
from workload.data import tokenizer_size

JOB = {"trainEnabled": True, "trainDataset": "lab/texts", "trainStoragePath": "s3://company-data/runs"}
CONFIG = json.dumps({**SMALL_LLAMA, "vocab_size": 800}).encode()


def slow_files(tokens: int, added: int = 0) -> dict[str, bytes]:
    vocab = {f"w{i}": i for i in range(tokens)}
    decoder = {str(tokens + i): {"content": f"<ctl_{i}>", "special": True} for i in range(added)}
    return {"vocab.json": json.dumps(vocab).encode(), "merges.txt": b"#version: 0.2\nw 1\n",
            "tokenizer_config.json": json.dumps({"added_tokens_decoder": decoder}).encode()}


@pytest.fixture
def hub(monkeypatch):
    repos = {"lab/bpe-wide": {"config.json": CONFIG, "model.safetensors": b"\0", **slow_files(790, added=20)},
             "lab/bpe-fits": {"config.json": CONFIG, "model.safetensors": b"\0", **slow_files(780, added=20)},
             "lab/bare": {"config.json": CONFIG, "model.safetensors": b"\0"},
             "lab/bpe-tokenizer": slow_files(900),
             # BERT's layout: vocab.txt, one token a line (tokenizer_size.size_of_wordpiece)
             "lab/wordpiece": {"vocab.txt": "\n".join(f"w{i}" for i in range(850)).encode() + b"\n",
                               "tokenizer_config.json": b'{"tokenizer_class": "BertTokenizer"}'},
             "lab/no-tokenizer": {"config.json": CONFIG, "model.safetensors": b"\0"},
             # Llama 2's and Mistral's layout without tokenizer.json: a sentencepiece model (sentencepiece_size)
             "lab/sp-tokenizer": {"tokenizer.model": sentencepiece_model([f"p{i}" for i in range(805)]),
                                  "tokenizer_config.json": b'{"tokenizer_class": "LlamaTokenizer"}'},
             "lab/sp-model": {"config.json": CONFIG, "model.safetensors": b"\0",
                              "spiece.model": sentencepiece_model([f"p{i}" for i in range(790)]),
                              "tokenizer_config.json": json.dumps({"added_tokens_decoder": {
                                  str(790 + i): {"content": f"<extra_id_{i}>"} for i in range(20)}}).encode()},
             "lab/sp-fits": {"tokenizer.model": sentencepiece_model([f"p{i}" for i in range(800)])}}
    with FakeHub(repos=repos) as server:
        server.datasets["lab/texts"] = {"files": {"train.jsonl": b'{"text": "a line"}\n' * 10}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_models_slow_bpe_tokenizer_past_vocab_size_is_refused_naming_the_model(hub):
    message = program_refusal({**JOB, "trainModelId": "lab/bpe-wide"})
    assert message.startswith("config key 'trainModelId'") and "810 tokens" in message and "800" in message, message
    listed = [path for _, path, _ in hub.requests if path.startswith("/api/models/lab/bpe-wide")]
    assert len(listed) == 1, f"the model's file list is fetched once and reused for its tokenizer: {listed}"


def test_a_slow_bpe_tokenizer_repo_past_vocab_size_is_refused_naming_trainTokenizer(hub):
    message = program_refusal({**JOB, "trainModelId": "lab/bpe-fits", "trainTokenizer": "lab/bpe-tokenizer"})
    assert "'trainTokenizer'" in message and "900 tokens" in message, message


def test_a_wordpiece_tokenizer_repo_past_vocab_size_is_refused_naming_trainTokenizer(hub):
    message = program_refusal({**JOB, "trainModelId": "lab/bpe-fits", "trainTokenizer": "lab/wordpiece"})
    assert "'trainTokenizer'" in message and "850 tokens" in message, message


@pytest.mark.parametrize("settings, key, tokens", [
    ({"trainModelId": "lab/bpe-fits", "trainTokenizer": "lab/sp-tokenizer"}, "trainTokenizer", "805 tokens"),
    ({"trainModelId": "lab/sp-model"}, "trainModelId", "810 tokens"),
])
def test_a_sentencepiece_tokenizer_past_vocab_size_is_refused_naming_the_key(hub, settings, key, tokens):
    message = program_refusal({**JOB, **settings})
    assert f"'{key}'" in message and tokens in message and "800" in message, message


def test_a_sentencepiece_tokenizer_that_fits_is_accepted(hub):
    run = run_program("dev", {**JOB, "trainModelId": "lab/bpe-fits", "trainTokenizer": "lab/sp-fits"})
    assert run.error is None, run.error


def test_a_slow_bpe_tokenizer_that_fits_is_accepted(hub):
    run = run_program("dev", {**JOB, "trainModelId": "lab/bpe-fits"})
    assert run.error is None, run.error


@pytest.mark.parametrize("settings, key", [
    ({"trainModelId": "lab/bpe-fits", "trainTokenizer": "lab/no-tokenizer"}, "trainTokenizer"),
    ({"trainModelId": "lab/bare"}, "trainModelId"),
])
def test_a_repo_without_tokenizer_files_is_refused_naming_the_key(hub, settings, key):
    message = program_refusal({**JOB, **settings})
    assert message.startswith(f"config key '{key}': "), message
    assert "holds no tokenizer" in message, message


def test_without_a_dataset_the_models_tokenizer_is_not_needed(hub):
    run = run_program("dev", {"trainEnabled": True, "trainModelId": "lab/bare",
                              "trainStoragePath": "s3://company-data/runs"})
    assert run.error is None, run.error


def test_vocab_sizes_count_added_tokens_once_and_the_highest_id():
    files = slow_files(5, added=2)
    assert tokenizer_size.size_of_vocab(files["vocab.json"], files["tokenizer_config.json"]) == 7
    again = json.dumps({"added_tokens_decoder": {"3": {"content": "w3"}}}).encode()
    assert tokenizer_size.size_of_vocab(files["vocab.json"], again) == 5, "an added token already in vocab.json"
    assert tokenizer_size.size_of_vocab(json.dumps({"a": 0, "b": 40}).encode()) == 41
    with pytest.raises(ValueError, match="vocab.json"):
        tokenizer_size.size_of_vocab(b"[1, 2]")
    assert not tokenizer_size.has_tokenizer(["config.json", "model.safetensors", "sub/tokenizer.json"])
    assert tokenizer_size.has_tokenizer(["config.json", "tokenizer.model"])
