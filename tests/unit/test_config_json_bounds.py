"""config.json is untrusted input, bounded in the one place every reader parses it (workload.model.config_json.loads):
its bytes, its nesting, and the integers that size a model. The preview's refusal names trainModelId, the job's
--model_id; neither reaches transformers with such a file."""
from __future__ import annotations

import json

import pytest

from workload.config import TrainConfig
from workload.model import architectures, config_json
from workload.run import preflight

LLAMA_1B = architectures.published("meta-llama/Llama-3.2-1B") or {"model_type": "llama", "hidden_size": 2048}
# Llama 3.2's config.json sets head_dim (64); without it, each head is hidden_size / num_attention_heads wide.
NO_HEAD_DIM = {field: value for field, value in LLAMA_1B.items() if field != "head_dim"}


@pytest.mark.parametrize("text, words", [
    ('{"a": ' * 90_000 + "0" + "}" * 90_000, "nested more than"),  # past the interpreter's recursion limit
    ("[" * (config_json.MAX_CONFIG_DEPTH + 1) + "]" * (config_json.MAX_CONFIG_DEPTH + 1), "nested more than"),
    (json.dumps({**LLAMA_1B, "vocab_size": 1 << 30}), "its vocab_size is 1,073,741,824"),
    (json.dumps({**LLAMA_1B, "intermediate_size": 5 * 10 ** 40}), "integer of 41 digits"),
    (json.dumps({"model_type": "llava", "text_config": {**LLAMA_1B, "num_hidden_layers": 70_000}}),
     "its num_hidden_layers is 70,000"),
    (json.dumps({**LLAMA_1B, "num_hidden_layers": -3}), "its num_hidden_layers is -3; allowed: an integer from 1"),
    (json.dumps({**LLAMA_1B, "intermediate_size": 0}), "its intermediate_size is 0"),
    (json.dumps({**LLAMA_1B, "max_position_embeddings": "8192"}), "its max_position_embeddings is a str"),
    (json.dumps({**LLAMA_1B, "num_key_value_heads": 2.5}), "its num_key_value_heads is a float"),
    (json.dumps({**LLAMA_1B, "num_attention_heads": 10, "num_key_value_heads": 4}), "not a multiple of"),
    # Heads that do not split hidden_size evenly (no head_dim), or query heads no key/value head count divides:
    # transformers builds either, and the first forward fails (attention_shape_problem).
    (json.dumps({**NO_HEAD_DIM, "hidden_size": 1000, "num_attention_heads": 12, "num_key_value_heads": 4}),
     "its hidden_size 1000 is not a multiple of its num_attention_heads 12, and it sets no head_dim"),
    (json.dumps({"model_type": "llava", "text_config": {**NO_HEAD_DIM, "hidden_size": 2050}}),
     "its hidden_size 2050 is not a multiple of its num_attention_heads 32"),
    (json.dumps({**LLAMA_1B, "num_attention_heads": 24, "num_key_value_heads": 9}),
     "its num_attention_heads 24 is not a multiple of its num_key_value_heads 9"),
])
def test_a_config_out_of_shape_is_refused_before_anything_builds_it(text, words):
    with pytest.raises(config_json.Refused) as refused:
        config_json.loads(text.encode())
    assert words in str(refused.value) and len(str(refused.value)) < 200, refused.value


def test_the_bounds_leave_every_shipped_config_and_booleans_alone():
    assert config_json.loads(json.dumps({**LLAMA_1B, "tie_word_embeddings": True}))["hidden_size"] == \
        LLAMA_1B["hidden_size"]
    for field, bound in config_json.SIZE_FIELD_BOUNDS.items():
        assert config_json.loads(json.dumps({field: bound}))[field] == bound, "the bound itself is allowed"
    dense = {**LLAMA_1B, "num_experts": 0, "num_key_value_heads": None, "intermediate_size": [64, 128]}
    assert config_json.loads(json.dumps(dense))["num_experts"] == 0, "no experts, a null, a list per layer: left alone"


def test_the_job_refuses_such_a_model_directory_naming_model_id(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**LLAMA_1B, "max_position_embeddings": 1 << 40}))
    (directory / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--model_id .*out of bounds: its max_position_embeddings"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))


def test_the_attention_rule_leaves_an_explicit_head_dim_and_every_published_config_alone():
    from pathlib import Path

    assert config_json.loads(json.dumps({**NO_HEAD_DIM, "hidden_size": 1000, "num_attention_heads": 12,
                                         "num_key_value_heads": 4, "head_dim": 64}))["head_dim"] == 64
    fixtures = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "model_configs").glob("*.json"))
    paths = [*fixtures, *(architectures.file_for(model_id) for model_id in architectures.shipped_ids())]
    assert len(paths) > 10, paths
    for path in paths:
        assert config_json.loads(path.read_bytes()), f"{path.name}: a published model passes"


def test_the_job_refuses_heads_that_do_not_split_its_width_naming_model_id(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**NO_HEAD_DIM, "hidden_size": 2040, "num_attention_heads": 16}))
    (directory / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--model_id .*not a model attention can run: its hidden_size 2040 is not a "
                                         r"multiple of its num_attention_heads 16"):
        preflight.check_local_files(TrainConfig(model_id=str(directory), seq_len=32))


def test_the_attention_rule_reads_an_omitted_width_as_the_family_class_default():
    """A head_dim or num_key_value_heads config.json omits is the config class's default (transformers'
    configuration_qwen2.py: 32 key/value heads; configuration_glm4.py: head_dim 128), as the build reads it."""
    omitted = {key: value for key, value in NO_HEAD_DIM.items() if key != "num_key_value_heads"}
    with pytest.raises(config_json.Refused) as refused:
        config_json.loads(json.dumps({**omitted, "model_type": "qwen2", "num_attention_heads": 16}).encode())
    assert "num_attention_heads 16 is not a multiple of its num_key_value_heads 32 (qwen2's default" in str(
        refused.value), refused.value
    assert config_json.loads(json.dumps({**omitted, "model_type": "llama", "num_attention_heads": 16}).encode())
    # GLM-4's head_dim is 128 whatever hidden_size / heads would be; stated, the heads must split hidden_size.
    assert config_json.loads(json.dumps({**omitted, "model_type": "glm4", "hidden_size": 1100,
                                         "num_attention_heads": 16}).encode())
    with pytest.raises(config_json.Refused, match="its hidden_size 1100 is not a multiple of its num_attention_heads"):
        config_json.loads(json.dumps({**omitted, "model_type": "glm4", "hidden_size": 1100, "num_attention_heads": 16,
                                      "head_dim": None, "num_key_value_heads": 2}).encode())
