"""--push_to_hub: the exported model uploaded with huggingface_hub to a stand-in Hub (tests/support/fake_hub.py, answering the
endpoints create_repo and upload_folder call as the Hub does), private by default, and then loaded back from that Hub
by from_pretrained, as a user of the pushed model would; a failed upload fails the job after its summary."""
from __future__ import annotations

import pytest
import torch

from tests.support.fake_hub import FakeHub
from workload import train
from workload.checkpoint import hub
from workload.config import TrainConfig

TOKEN = "hf_fake_write_token_for_tests"


@pytest.fixture
def fake_hub(monkeypatch):
    with FakeHub(TOKEN) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        # huggingface_hub reads HF_ENDPOINT at import: its constants are set again for this Hub.
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


@pytest.fixture(scope="module")
def exported_model(tmp_path_factory):
    """A tiny model directory as the job exports one (config, safetensors, generation config, tokenizer)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tests.support.docs_shell import REPO
    from workload.config import TINY

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("run") / "model_000004"
    Qwen2ForCausalLM(Qwen2Config(**TINY)).save_pretrained(directory)
    AutoTokenizer.from_pretrained(REPO / "data" / "tokenizer").save_pretrained(directory)
    return directory


def test_the_pushed_model_is_the_export_and_from_pretrained_loads_it_from_the_hub(fake_hub, exported_model, tmp_path,
                                                                                   monkeypatch):
    url = hub.push(str(exported_model), "team/tiny-sft", "run-1")
    assert url == f"{fake_hub.url}/team/tiny-sft", url
    assert "team/tiny-sft" in fake_hub.private, "a new repo is private unless asked otherwise"
    exported = {path.name: path.read_bytes() for path in exported_model.iterdir()}
    assert fake_hub.repos["team/tiny-sft"] == exported, "the Hub has the exported directory's files, byte for byte"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    loaded = AutoModelForCausalLM.from_pretrained("team/tiny-sft", cache_dir=tmp_path / "cache")
    local = AutoModelForCausalLM.from_pretrained(exported_model)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), local.state_dict().values()))
    assert AutoTokenizer.from_pretrained("team/tiny-sft", cache_dir=tmp_path / "cache")("the cat").input_ids
    # The weights came from the Hub: at main, or at the commit the Hub's model info names for it.
    assert any(method == "GET" and path.startswith("/team/tiny-sft/resolve/") and path.endswith("/model.safetensors")
               for method, path, *_ in fake_hub.requests), fake_hub.requests

    # Again (a resumed run's new export): the same repo, exist_ok, a new commit.
    assert hub.push(str(exported_model), "team/tiny-sft", "run-1") == url


def test_a_failed_upload_fails_the_job_after_its_summary_naming_the_flag(fake_hub, exported_model, monkeypatch,
                                                                         capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_not_the_right_one")
    cfg = TrainConfig(model_config="tiny", storage_path=str(exported_model.parent.parent), push_to_hub="team/x")
    summary = {"model": str(exported_model), "diverged_at_step": None}
    failed = train.push_model(cfg, summary)
    assert failed and "401" in failed and summary["hub"] is None, failed
    assert "hf_not_the_right_one" not in failed, "the token is never shown"
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert train.push_model(cfg, summary) is None and summary["hub"] == f"{fake_hub.url}/team/x"
    assert capsys.readouterr().out.strip() == f"pushed {exported_model} to {fake_hub.url}/team/x"


def test_push_to_hub_needs_an_export_and_an_owner():
    for flags, words in (({"push_to_hub": "me/m"}, "needs --storage_path"),
                         ({"push_to_hub": "m", "storage_path": "/tmp/r"}, "owner/name")):
        with pytest.raises(ValueError, match=words):
            TrainConfig(**flags)
