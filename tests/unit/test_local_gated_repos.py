"""The local run with a gated Hub repo (https://huggingface.co/docs/hub/models-gated) and no HF_TOKEN with access: exit 3
naming HF_TOKEN and the flag that names the repo (--model_id, or --tokenizer), before torch, transformers or Ray, for
a model the project ships a config for as for any other (workload/run/local.py check_model_source,
workload/run/services.py check_hub_model). The Hub is the local fake (tests/support/fake_hub.py), which answers a
gated repo's files 401 GatedRepo without a token and 403 to a token not granted, as the Hub does."""
from __future__ import annotations

import json

import pytest

from tests.support.fake_hub import FakeHub
from workload import cli
from workload.model import architectures
from workload.run import local

GATED = ("meta-llama/Llama-3.2-1B", "meta-llama/Meta-Llama-3-8B-Instruct")


@pytest.fixture
def gated_hub(monkeypatch, tmp_path):
    for name in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from huggingface_hub import constants

    # huggingface_hub read HF_HOME at import: its cache lookup (try_to_load_from_cache) is pointed at the empty one.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    config = json.dumps(architectures.published("meta-llama/Llama-3.2-1B")).encode()
    repos = {name: {"config.json": config, "tokenizer_config.json": b"{}", "model.safetensors": b"\0"} for name in GATED}
    with FakeHub(repos=repos, gated={name: {"hf_someone_granted_0000000000"} for name in GATED}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _run(argv: list[str], tmp_path, capsys) -> tuple[int, str]:
    code = cli.run(local.main, [*argv, "--dataset", "data/corpus.txt", "--steps", "1",
                                "--storage_path", str(tmp_path / "runs")])
    return code, capsys.readouterr().err


def test_a_shipped_gated_model_without_a_token_is_exit_3_naming_hf_token(gated_hub, tmp_path, capsys):
    code, err = _run(["--model_id", "meta-llama/Llama-3.2-1B", "--tokenizer", "data/tokenizer"], tmp_path, capsys)
    assert code == cli.ENVIRONMENT, err
    assert err.startswith("error: --model_id meta-llama/Llama-3.2-1B: ") and "gated" in err and "HF_TOKEN" in err, err
    assert "Traceback" not in err


def test_a_gated_tokenizer_is_named_by_its_own_flag_and_a_token_not_granted_is_never_quoted(
        gated_hub, tmp_path, capsys, monkeypatch):
    token = "hf_not_granted_2222222222222222"
    monkeypatch.setenv("HF_TOKEN", token)
    code, err = _run(["--model_id", "Qwen/Qwen3-0.6B", "--tokenizer", "meta-llama/Meta-Llama-3-8B-Instruct"],
                     tmp_path, capsys)
    assert code == cli.ENVIRONMENT, err
    assert err.startswith("error: --tokenizer meta-llama/Meta-Llama-3-8B-Instruct: ") and "HF_TOKEN" in err, err
    assert token not in err and ("GET", "/meta-llama/Meta-Llama-3-8B-Instruct/resolve/main/tokenizer_config.json",
                                 f"Bearer {token}") in gated_hub.requests
