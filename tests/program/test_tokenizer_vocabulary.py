"""A tokenizer larger than the model's vocabulary (issue 44): refused at preview naming trainTokenizer and
trainModelId (or trainModelConfig) with both sizes, from the shipped table or one bounded read of tokenizer.json from
the Hub (the fake, tests/support/fake_hub.py, serving it from LFS behind a redirect as the Hub does), and by the job's
driver before Ray and before transformers, naming --tokenizer and --model_id/--model_config."""
from __future__ import annotations

import json
import logging
import time

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.cli_process import HEAVY_MODULES, run_cli
from tests.support.fake_hub import FakeHub, unreachable_hub
from tests.support.pulumi_mocks import Secret, run_program
from workload import cli
from workload.data import tokenizer_size

TOKEN = "hf_granted_tokenizer_0123"
# A dataset's token shards live under trainStoragePath (infra/config/train_keys.py _check_data_storage).
JOB = {"trainEnabled": True, "trainDataset": "acme/corpus", "trainStoragePath": "s3://company-data/runs"}


def tokenizer_json(tokens: int, added: int = 0) -> bytes:
    vocab = {f"t{i}": i for i in range(tokens - added)}
    extra = [{"id": tokens - added + i, "content": f"<extra_{i}>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i in range(added)]  # as tokenizers saves them
    return json.dumps({"model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
                       "added_tokens": extra}).encode()


SMALL_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
               "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
               "vocab_size": 1000, "max_position_embeddings": 2048, "tie_word_embeddings": False}


@pytest.fixture
def hub(monkeypatch):
    repos = {"acme/wide-tokenizer": {"tokenizer.json": tokenizer_json(600, added=10)},
             "acme/gated-tokenizer": {"tokenizer.json": tokenizer_json(100)},
             "acme/small-llama": {"config.json": json.dumps(SMALL_LLAMA).encode(), "model.safetensors": b"\0",
                                  "tokenizer.json": tokenizer_json(1024, added=24)},
             "acme/slow-only": {"tokenizer.model": b"\0"}}
    with FakeHub(repos=repos, gated={"acme/gated-tokenizer": {TOKEN}}) as server:
        server.datasets["acme/corpus"] = {"files": {"train.jsonl": b'{"text": "a document"}\n' * 10}}
        server.lfs = {"acme/wide-tokenizer": {"tokenizer.json"}, "acme/small-llama": {"tokenizer.json"}}
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def test_a_wider_tokenizer_is_refused_without_a_download_from_the_shipped_table(hub):
    started = time.perf_counter()
    message = program_refusal({**JOB, "trainModelId": "meta-llama/Llama-3.1-8B", "trainTokenizer": "Qwen/Qwen2.5-7B"})
    for words in ("config keys 'trainTokenizer', 'trainModelId'", "151,665 tokens", "128,256",
                  "trainModelId meta-llama/Llama-3.1-8B"):
        assert words in message, f"the refusal says {words!r}: {message}"
    assert time.perf_counter() - started < 10, "the whole program under mocks, the rule itself in milliseconds"
    asked = [path for _, path, _ in hub.requests if "tokenizer" in path]
    # Sized from the table: only the access check (one ranged byte of tokenizer_config.json, infra/preview/hub_access.py)
    # asks the Hub about the tokenizer, whose files the data stage downloads all the same.
    assert asked == ["/Qwen/Qwen2.5-7B/resolve/main/tokenizer_config.json"], f"sized from the table: {asked}"


def test_a_hub_tokenizer_is_read_once_bounded_through_its_lfs_redirect(hub):
    message = program_refusal({**JOB, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainTokenizer": "acme/wide-tokenizer"})
    assert "config keys 'trainTokenizer', 'trainModelConfig'" in message and "600 tokens" in message \
        and "vocabulary of 512" in message, message
    listed = [path for method, path, _ in hub.requests if path.startswith("/api/models/acme/wide-tokenizer")]
    assert len(listed) == 1, f"its file list once (whether it holds a tokenizer at all): {listed}"
    asked = [path for method, path, _ in hub.requests
             if ("tokenizer" in path and not path.startswith("/api/")) or path.startswith("/cdn/")]
    assert asked[0] == "/acme/wide-tokenizer/resolve/main/tokenizer.json" and asked[1].startswith("/cdn/"), asked
    assert len(asked) == 2, f"one request, followed to the CDN once: {asked}"


def test_a_models_own_tokenizer_with_added_tokens_past_vocab_size_is_refused_naming_the_model(hub):
    message = program_refusal({**JOB, "trainModelId": "acme/small-llama"})
    assert "config key 'trainModelId'" in message and "1,024 tokens" in message and "1,000" in message, message


def test_a_hub_models_own_tokenizer_is_sized_before_the_model_gate_imports_torch(hub, monkeypatch):
    # Audit 44g D07: refused correctly but after the gate's seconds of torch and transformers imports. The size
    # rule needs config.json's vocab_size alone, so it answers first; the gate must not run for it.
    from workload.model import compatibility

    hub.repos["acme/narrow-vocab"] = {"config.json": json.dumps({**SMALL_LLAMA, "vocab_size": 2000}).encode(),
                                      "model.safetensors": b"\0", "tokenizer.json": tokenizer_json(2048, added=48)}
    monkeypatch.setattr(compatibility, "gate", lambda *args: pytest.fail("the gate ran before the tokenizer's size"))
    message = program_refusal({**JOB, "trainModelId": "acme/narrow-vocab"})
    assert "config key 'trainModelId'" in message and "2,048 tokens" in message and "2,000" in message, message


def test_a_gated_tokenizer_needs_the_secret_envs_token(hub):
    message = program_refusal({**JOB, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainTokenizer": "acme/gated-tokenizer"})
    assert "'trainTokenizer'" in message and "gated" in message, message
    run = run_program("dev", {**JOB, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainTokenizer": "acme/gated-tokenizer",
                              "trainSecretEnv": Secret([f"HF_TOKEN={TOKEN}"])})
    assert run.error is None, run.error
    assert hub.requests[-1][2] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("tokenizer", ["acme/slow-only", "unreachable"])
def test_a_size_not_readable_here_is_a_warning(hub, monkeypatch, caplog, tokenizer):
    if tokenizer == "unreachable":
        unreachable_hub(monkeypatch)
        tokenizer = "acme/wide-tokenizer"
    with caplog.at_level(logging.WARNING):
        run = run_program("dev", {**JOB, "trainModelConfig": "tiny", "trainSeqLen": 256, "trainTokenizer": tokenizer})
    assert run.error is None, run.error
    warned = [r.getMessage() for r in caplog.records if "vocabulary is checked by the job" in r.getMessage()]
    assert warned and "trainTokenizer" in warned[0], [r.getMessage() for r in caplog.records]


def test_a_huge_tokenizer_json_is_refused_without_reading_it_whole(hub, monkeypatch):
    monkeypatch.setattr(tokenizer_size, "MAX_TOKENIZER_BYTES", 1000)
    with pytest.raises(ValueError, match="at most 1,000") as refused:
        tokenizer_size.size_on_hub("acme/wide-tokenizer", False)
    assert "acme/wide-tokenizer's tokenizer.json on the Hub" in str(refused.value)


def test_the_job_refuses_it_before_ray_naming_both_flags(tmp_path):
    directory = tmp_path / "wide-tokenizer"
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes(tokenizer_json(600, added=10))
    argv = ["--model_config", "tiny", "--seq_len", "256", "--dataset", "data/corpus.txt", "--tokenizer", str(directory)]
    code, stderr, loaded, _ = run_cli("workload.train", argv)
    assert code == cli.USAGE, f"exit {cli.USAGE}, got {code}: {stderr[-600:]}"
    assert "--tokenizer" in stderr and "--model_config tiny" in stderr and "600 tokens" in stderr \
        and "vocabulary of 512" in stderr, stderr[-600:]
    assert loaded == [], f"refused before {HEAVY_MODULES} load, loaded {loaded}"

    from workload.config import TrainConfig
    from workload.run import preflight

    cfg = TrainConfig(model_config="tiny", dataset="data/corpus.txt", tokenizer=str(directory))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="600 tokens"):
        preflight.check_tokenizer_vocabulary(cfg, cfg.architecture["vocab_size"])
    assert time.perf_counter() - started < 1


def test_the_job_reads_a_hub_tokenizer_once(hub):
    from workload.config import TrainConfig
    from workload.run import preflight

    cfg = TrainConfig(model_config="tiny", dataset="data/corpus.txt", tokenizer="acme/wide-tokenizer")
    with pytest.raises(ValueError, match="--tokenizer acme/wide-tokenizer: the tokenizer has 600 tokens"):
        preflight.check_tokenizer_vocabulary(cfg, 512)
    assert preflight.tokenizer_tokens(TrainConfig(model_config="tiny", dataset="data/corpus.txt",
                                                  tokenizer="acme/slow-only")) is None
