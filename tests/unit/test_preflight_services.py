"""The credentials a run needs at its end, and a local model's weights, checked before Ray starts
(workload/run/preflight.py): exit 3 naming the variable (never its value) for W&B's key and the Hub's token, exit 2
for a model directory without *.safetensors. Where each library looks for its key is what the checks mirror:
wandb reads WANDB_API_KEY, else ~/.netrc's api.wandb.ai, and needs none with WANDB_MODE=offline
(https://docs.wandb.ai/guides/track/environment-variables); huggingface_hub reads HF_TOKEN, else $HF_TOKEN_PATH or
$HF_HOME/token (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables)."""
from __future__ import annotations

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
    (directory / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds no \*\.safetensors weights"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))
    (directory / "model.safetensors").write_bytes(b"")
    preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))
