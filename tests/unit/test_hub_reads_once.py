"""Within model_source.reads_once() a Hub file is asked for once: a later read of it gets the first answer (its bytes,
or the same error), unless the first was cut at a smaller bound than the file; outside the block every read asks. And
the rule of a tokenizer's JSON files (tokenizer_size.json_object_problem) that every reader applies."""
from __future__ import annotations

import pytest
from huggingface_hub.errors import EntryNotFoundError

from tests.support.fake_hub import FakeHub
from workload.data import tokenizer_size
from workload.model import model_source


@pytest.fixture
def hub(monkeypatch):
    with FakeHub(repos={"lab/tok": {"tokenizer_config.json": b'{"eos_token": "</s>"}' + b" " * 100}}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _asked(hub, name: str) -> int:
    return sum(1 for method, path, _ in hub.requests if method == "GET" and path.endswith(f"/resolve/main/{name}"))


def test_a_file_is_asked_for_once_within_the_block(hub):
    with model_source.reads_once():
        first = model_source.read_file("lab/tok", "tokenizer_config.json", False, 1 << 20)
        again = model_source.read_file("lab/tok", "tokenizer_config.json", False, 64)  # a smaller bound: cut
        for _ in range(2):
            with pytest.raises(EntryNotFoundError):
                model_source.read_file("lab/tok", "special_tokens_map.json", False, 1 << 20)
    assert again == first[:65] and _asked(hub, "tokenizer_config.json") == 1
    assert _asked(hub, "special_tokens_map.json") == 1, "the error is the first answer's too"
    model_source.read_file("lab/tok", "tokenizer_config.json", False, 1 << 20)
    assert _asked(hub, "tokenizer_config.json") == 2, "outside the block each read asks"


def test_a_file_cut_at_a_smaller_bound_is_read_again_for_a_larger_one(hub):
    with model_source.reads_once():
        cut = model_source.read_file("lab/tok", "tokenizer_config.json", False, 8)
        whole = model_source.read_file("lab/tok", "tokenizer_config.json", False, 1 << 20)
    assert len(cut) == 9 and len(whole) == 121 and _asked(hub, "tokenizer_config.json") == 2


@pytest.mark.parametrize("data, why", [
    (b'{"eos_token": "</s>"', "not UTF-8 JSON"),
    (b"\xff\xfe{}", "not UTF-8 JSON"),
    (b'["</s>"]', "a JSON list, not an object"),
    (b'"</s>"', "a JSON str, not an object"),
    # transformers' open(encoding="utf-8") keeps a byte order mark, which json.load refuses
    (b'\xef\xbb\xbf{"eos_token": "</s>"}', "UTF-8 JSON behind a byte order mark, which json.load refuses "
                                          "(Unexpected UTF-8 BOM)"),
    (b'{"eos_token": "</s>"}', None),
])
def test_json_object_problem(data, why):
    assert tokenizer_size.json_object_problem(data) == why
