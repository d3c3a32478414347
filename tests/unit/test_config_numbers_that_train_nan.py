"""A config.json's numbers that build a model whose first forward is NaN (a rotary base at or below 0, a norm's epsilon
at or below 0, NaN or infinite, a negative initializer_range, a partial rotary factor outside (0, 1]): refused by the
one reader every config.json goes through (workload.model.config_json.loads), so the local run names --model_id and
workload.export names the checkpoint's config.json, before torch is imported. The preview's side is
tests/program/test_model_config.py."""
from __future__ import annotations

import json

import pytest

from workload import cli
from workload.checkpoint import export
from workload.config import TrainConfig
from workload.model import architectures, config_json
from workload.run import preflight

LLAMA_1B = architectures.published("meta-llama/Llama-3.2-1B")
INF = {"__float__": "Infinity"}  # transformers 5's own encoding of a float JSON cannot write


@pytest.mark.parametrize("fields, words", [
    ({"rope_theta": -500000.0}, "its rope_theta is -500000.0; allowed: a finite number above 0"),
    ({"rope_theta": INF}, "its rope_theta is inf"),
    ({"rope_theta": "500000"}, "its rope_theta is a str"),
    ({"rms_norm_eps": 0}, "its rms_norm_eps is 0; allowed: a finite number above 0"),
    ({"rms_norm_eps": {"__float__": "-Infinity"}}, "its rms_norm_eps is -inf"),
    ({"initializer_range": -0.02}, "its initializer_range is -0.02; allowed: a finite number of at least 0"),
    ({"partial_rotary_factor": 0.0}, "its partial_rotary_factor is 0.0; allowed: a number above 0 and at most 1"),
    # transformers 5 keeps the base inside rope_parameters, per layer type for Gemma 3's local/global layers
    ({"rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 0},
                          "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}}, "its rope_theta is 0"),
    ({"layer_rope_theta": [10000.0, -1]}, "its layer_rope_theta is -1"),
])
def test_a_number_that_trains_to_nan_is_refused_wherever_it_sits(fields, words):
    with pytest.raises(config_json.Refused) as refused:
        config_json.loads(json.dumps({**LLAMA_1B, **fields}))
    assert str(refused.value).startswith("not a config a model trains with: ") and words in str(refused.value), \
        refused.value


@pytest.mark.parametrize("config", [
    {"model_type": "gpt2", "layer_norm_epsilon": float("nan")},  # json.dumps writes NaN, and json.loads reads it
    {"model_type": "llava", "text_config": {**LLAMA_1B, "rms_norm_eps": -1e-5}},
    {"model_type": "olmo", "norm_eps": 0.0},
])
def test_every_norms_epsilon_in_every_object_is_one_rule(config):
    with pytest.raises(config_json.Refused, match="eps"):
        config_json.loads(json.dumps(config))


def test_published_values_and_infinities_that_mean_something_are_left_alone():
    # Falcon-H1's time_step_limit is (0.0, inf) by design; null is the class's default; a tiny epsilon is an epsilon.
    config = {**LLAMA_1B, "time_step_limit": [0.0, INF], "rope_theta": None, "rms_norm_eps": 1e-12,
              "initializer_range": 0.0, "partial_rotary_factor": 1, "rope_scaling": None}
    # (initializer_range 0.0, not 0: LlamaConfig is strict, and refuses an int where it declares a float: config_types.py)
    assert config_json.loads(json.dumps(config))["time_step_limit"] == [0.0, float("inf")]


def test_the_local_run_refuses_such_a_directory_naming_model_id(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**LLAMA_1B, "rms_norm_eps": float("inf")}))
    (directory / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"^--model_id .*config.json is not a config a model trains with: its "
                                         r"rms_norm_eps is inf; allowed: a finite number above 0$"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))


def test_export_refuses_such_a_checkpoint_naming_its_config_before_the_imports(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(export, "quiet_imports", lambda: (_ for _ in ()).throw(AssertionError("imported first")))
    checkpoint = tmp_path / "run" / "checkpoint_000004"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text(json.dumps({**LLAMA_1B, "rope_theta": -10000.0}))
    (checkpoint / ".metadata").write_bytes(b"")
    assert cli.run(export.main, [str(checkpoint), str(tmp_path / "model")]) == cli.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: checkpoint file {checkpoint / 'config.json'} is not a config a model trains with: its "
                   "rope_theta is -10000.0; allowed: a finite number above 0"], err
    assert not (tmp_path / "model").exists()
