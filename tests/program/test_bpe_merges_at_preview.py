"""A tokenizer whose BPE merges name a token outside its vocabulary (issue 44): tokenizers cannot build it, so the
data stage would fail after the nodes bill. Refused at preview naming trainTokenizer and the merge's index (never the
token) from the one bounded read of tokenizer.json (the fake Hub, tests/support/fake_hub.py), and by the local run
before its imports, naming --tokenizer."""
from __future__ import annotations

import json

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.cli_process import HEAVY_MODULES, run_cli
from tests.support.fake_hub import FakeHub
from workload import cli

JOB = {"trainEnabled": True, "trainDataset": "acme/corpus", "trainStoragePath": "s3://company-data/runs",
       "trainModelConfig": "tiny", "trainSeqLen": 256}
HIDDEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"


def bpe_tokenizer_json(merges: list) -> bytes:
    vocab = {token: index for index, token in enumerate(["a", "b", "c", "ab", "abc", "bc"])}
    return json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": merges, "continuing_subword_prefix": None},
                       "added_tokens": []}).encode()


@pytest.fixture
def hub(monkeypatch):
    repos = {"acme/broken-merges": {"tokenizer.json": bpe_tokenizer_json(["a b", "ab c", f"b {HIDDEN}"])},
             "acme/legacy-merges": {"tokenizer.json": bpe_tokenizer_json(["a b", "ab c", "b c"])}}
    with FakeHub(repos=repos) as server:
        server.datasets["acme/corpus"] = {"files": {"train.jsonl": b'{"text": "a document"}\n' * 10}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_merge_outside_the_vocabulary_is_refused_at_preview_by_its_index(hub):
    message = program_refusal({**JOB, "trainTokenizer": "acme/broken-merges"})
    assert "config key 'trainTokenizer'" in message and "model.merges[2] whose second token" in message, message
    assert HIDDEN not in message, message


def test_merges_inside_the_vocabulary_pass_the_rule(hub):
    from workload.data import tokenizer_size

    assert tokenizer_size.size_on_hub("acme/legacy-merges", False) == 6


def test_the_local_run_refuses_it_before_the_imports(tmp_path):
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes(bpe_tokenizer_json([["a", "b"], ["abc", "a"]]))
    code, stderr, loaded, _ = run_cli("workload.local", ["--tokenizer", str(directory), "--dataset",
                                                         "data/corpus.txt", "--storage_path", str(tmp_path / "runs")])
    assert code == cli.USAGE, f"exit {cli.USAGE}, got {code}: {stderr[-600:]}"
    assert f"--tokenizer {directory}" in stderr and "model.merges[1] whose first token" not in stderr \
        and "model.merges[1] whose concatenation" in stderr, stderr[-600:]
    assert "Traceback" not in stderr and loaded == [], f"refused before {HEAVY_MODULES} load: {loaded} {stderr[-600:]}"
