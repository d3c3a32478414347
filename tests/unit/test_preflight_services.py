"""The credentials a run needs at its end, and a local model's weights, checked before Ray starts
(workload/run/preflight.py): exit 3 naming the variable (never its value) for W&B's key and the Hub's token, exit 2
for a model directory without *.safetensors. Where each library looks for its key is what the checks mirror:
wandb reads WANDB_API_KEY, else ~/.netrc's api.wandb.ai, and needs none with WANDB_MODE=offline
(https://docs.wandb.ai/guides/track/environment-variables); huggingface_hub reads HF_TOKEN, else $HF_TOKEN_PATH or
$HF_HOME/token (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables)."""
from __future__ import annotations

import json
import time

import pytest

from workload import cli
from workload.config import TrainConfig
from workload.run import local, preflight

TINY = dict(model_config="tiny", seq_len=32, steps=2)


@pytest.fixture
def bare_environment(monkeypatch, tmp_path):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path


def test_wandb_without_a_key_is_exit_3_before_anything_starts(bare_environment, monkeypatch, capsys):
    started = time.monotonic()
    assert cli.run(local.main, ["--report_to", "wandb", "--steps", "5", "--run_name", "w"]) == cli.ENVIRONMENT
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: --report_to wandb: no W&B API key: set WANDB_API_KEY") and len(err) == 2, err
    assert time.monotonic() - started < 1
    for setting in ({"WANDB_API_KEY": "k"}, {"WANDB_MODE": "offline"}):
        with monkeypatch.context() as patched:
            for name, value in setting.items():
                patched.setenv(name, value)
            preflight.check_credentials(TrainConfig(**TINY, report_to="wandb"))
    (bare_environment / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password secret-key\n")
    preflight.check_credentials(TrainConfig(**TINY, report_to="wandb"))


def test_push_to_hub_without_a_token_is_exit_3_naming_the_variable(bare_environment, monkeypatch, capsys):
    cfg = TrainConfig(**TINY, push_to_hub="me/model", storage_path=str(bare_environment / "runs"))
    with pytest.raises(cli.EnvironmentProblem, match="--push_to_hub me/model: no Hugging Face token: set HF_TOKEN"):
        preflight.check_credentials(cfg)
    (bare_environment / "hf").mkdir()
    (bare_environment / "hf" / "token").write_text("hf_stored\n")
    preflight.check_credentials(cfg)  # `hf auth login`'s file
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    preflight.check_credentials(cfg)


def test_a_model_directory_without_weights_is_refused_before_ray(tmp_path, capsys):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"holds no \*\.safetensors weights"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))
    (directory / "model.safetensors").write_bytes(b"")  # a file that is no safetensors file
    with pytest.raises(ValueError, match=r"model\.safetensors holds 0 bytes"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))
    (directory / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"{}")  # one of no tensors
    preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))


def test_a_server_the_run_will_talk_to_that_does_not_answer_is_exit_3_naming_it(bare_environment, monkeypatch):
    """workload.run.services.check_services_reachable: W&B's server (WANDB_BASE_URL) unless WANDB_MODE keeps the run
    local, and the Hub (HF_ENDPOINT) for --push_to_hub, one bounded GET each, as MLflow's /health
    (tests/runs/test_tracking.py); any HTTP answer is a server that answers, a closed port is exit 3."""
    import socket

    from tests.support.fake_hub import FakeHub
    from workload.run import services

    with socket.socket() as probe:  # a port nothing listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    key, token = "abcdef0123456789abcdef0123456789abcdef01", "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210"
    monkeypatch.setenv("WANDB_API_KEY", key)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("WANDB_BASE_URL", closed)
    monkeypatch.setenv("HF_ENDPOINT", closed)
    with pytest.raises(cli.EnvironmentProblem, match=f"--report_to wandb: W&B's server WANDB_BASE_URL names, {closed}, "
                                                     "does not answer") as refused:
        services.check_services_reachable(TrainConfig(**TINY, report_to="wandb,tensorboard"))
    assert "WANDB_MODE=offline" in refused.value.hint and key not in str(refused.value) + refused.value.hint
    with pytest.raises(cli.EnvironmentProblem, match=f"--push_to_hub lab/tuned-r9: the Hugging Face Hub HF_ENDPOINT "
                                                     f"names, {closed}, does not answer") as refused:
        services.check_services_reachable(TrainConfig(**TINY, push_to_hub="lab/tuned-r9", storage_path="runs"))
    assert token not in str(refused.value) + refused.value.hint
    for mode in ("offline", "dryrun"):  # wandb talks to no server: nothing asked
        monkeypatch.setenv("WANDB_MODE", mode)
        services.check_services_reachable(TrainConfig(**TINY, report_to="wandb"))
    monkeypatch.delenv("WANDB_MODE")
    with FakeHub() as hub:  # a server that answers, whatever it answers for the path
        monkeypatch.setenv("WANDB_BASE_URL", hub.url)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        services.check_services_reachable(TrainConfig(**TINY, report_to="wandb", push_to_hub="lab/tuned-r9", storage_path="runs"))


def test_wandb_switched_off_by_wandb_mode_is_refused_as_a_flag_that_does_nothing(bare_environment, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "Disabled")
    with pytest.raises(cli.UsageError, match="--report_to wandb records nothing with WANDB_MODE=disabled"):
        preflight.check_credentials(TrainConfig(**TINY, report_to="tensorboard,wandb"))
    preflight.check_credentials(TrainConfig(**TINY, report_to="tensorboard"))
