"""A local --model_id directory whose safetensors headers disagree with its config.json (a vocabulary resized in
one and not the other, a layer's width, an untied lm_head): refused from the headers and the config's arithmetic
(workload/model/header_shapes.py) before torch and transformers are imported, in the words of the job's loader
(workload.model.weights.stored_problem), where the arithmetic is what transformers builds (structure.
ARITHMETIC_FAMILIES); other families and tensors are left to the built model's check (weights.check_files)."""
from __future__ import annotations

import json
import struct

import pytest

from tests.support.cli_process import run_cli
from workload.model import header_shapes

SMALL = {"hidden_size": 32, "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 300}


def _file(path, shapes: dict) -> None:
    """A safetensors file of BF16 zeros in `shapes` (huggingface/safetensors "Format": u64 header length, JSON)."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    data = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(data)) + data + bytes(offset))


def _directory(tmp_path, config: dict, change: dict | None = None, shards: bool = False):
    """A model directory whose files hold what the arithmetic expects, with `change`'s tensors in other shapes."""
    directory = tmp_path / "model"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    shapes = {**header_shapes.expected_shapes(config), **(change or {})}
    if not shards:
        _file(directory / "model.safetensors", shapes)
        return directory
    names = list(shapes)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file_name, held in halves.items():
        _file(directory / file_name, {name: shapes[name] for name in held})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        name: file_name for file_name, held in halves.items() for name in held}}))
    return directory


@pytest.mark.parametrize("config, change, shards, words", [
    ({"model_type": "qwen2", "tie_word_embeddings": True}, {"model.embed_tokens.weight": (150, 32)}, False,
     "model.embed_tokens.weight in model.safetensors has shape [150, 32]; the model's config.json gives [300, 32]"),
    ({"model_type": "mistral"}, {"lm_head.weight": (301, 32)}, True,
     "lm_head.weight in model-00002-of-00002.safetensors has shape [301, 32]; the model's config.json gives [300, 32]"),
    ({"model_type": "llama"}, {"model.layers.1.self_attn.k_proj.weight": (32, 32)}, True,
     "model.layers.1.self_attn.k_proj.weight in model-0000"),
    # Phi-3 fuses q, k and v: (4 + 2 x 2) heads of 8 = 64 rows
    ({"model_type": "phi3"}, {"model.layers.0.self_attn.qkv_proj.weight": (96, 32)}, False,
     "model.layers.0.self_attn.qkv_proj.weight in model.safetensors has shape [96, 32]; the model's config.json "
     "gives [64, 32]"),
    ({"model_type": "gemma2", "head_dim": 16}, {"model.layers.0.self_attn.o_proj.weight": (32, 32)}, False,
     "the model's config.json gives [32, 64]"),
], ids=["qwen2 embedding", "mistral lm_head, sharded", "llama layer 1, sharded", "phi3 fused qkv", "gemma2 head_dim"])
def test_a_header_shape_the_config_does_not_give_is_refused(tmp_path, config, change, shards, words):
    directory = _directory(tmp_path, {**SMALL, **config}, change, shards)
    with pytest.raises(ValueError, match="^--model_id m: ") as refused:
        header_shapes.check_directory({**SMALL, **config}, str(directory), "--model_id m")
    assert words in str(refused.value) and "\n" not in str(refused.value), refused.value


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2"}, {"model_type": "starcoder2"}, {"model_type": "glm4", "tie_word_embeddings": False},
])
def test_files_as_the_config_gives_pass(tmp_path, config):
    header_shapes.check_directory({**SMALL, **config}, str(_directory(tmp_path, {**SMALL, **config})), "--model_id m")


@pytest.mark.parametrize("config", [
    {"model_type": "gpt_neox"},  # a family the arithmetic does not cover: the built model's check says
    {"model_type": "qwen2", "num_experts": 4},  # a mixture of experts
    {"model_type": "qwen2", "num_attention_heads": 5},  # heads that do not split the width: the gate says
])
def test_what_the_arithmetic_does_not_cover_is_left_to_the_built_model(tmp_path, config):
    assert header_shapes.expected_shapes({**SMALL, **config}) is None
    directory = tmp_path / "model"
    directory.mkdir()
    _file(directory / "model.safetensors", {"model.embed_tokens.weight": (7, 7)})
    header_shapes.check_directory({**SMALL, **config}, str(directory), "--model_id m")


@pytest.mark.parametrize("config, built, old", [
    # k_proj as the class builds it when config.json omits a width, and as hidden_size / heads and the query heads
    # would give it (transformers' configuration_qwen3.py head_dim 128, configuration_gemma2.py 256,
    # configuration_mistral.py num_key_value_heads 8)
    ({"model_type": "qwen3", "head_dim": None}, (2 * 128, 32), (2 * 8, 32)),
    ({"model_type": "gemma2", "head_dim": None}, (2 * 256, 32), (2 * 8, 32)),
    ({"model_type": "mistral", "num_attention_heads": 16, "num_key_value_heads": None}, (8 * 2, 32), (16 * 2, 32)),
])
def test_layers_whose_widths_rest_on_a_class_default_are_compared_at_that_default(tmp_path, config, built, old):
    config = {key: value for key, value in {**SMALL, **config}.items() if value is not None}
    name = "model.layers.0.self_attn.k_proj.weight"
    assert header_shapes.expected_shapes(config)[name] == built
    header_shapes.check_directory(config, str(_directory(tmp_path, config)), "--model_id m")
    with pytest.raises(ValueError, match=rf"k_proj.weight in model.safetensors has shape \[{old[0]}, 32\]; "
                                         rf"the model's config.json gives \[{built[0]}, 32\]"):
        header_shapes.check_directory(config, str(_directory(tmp_path / "b", config, {name: old})), "--model_id m")


def test_the_arithmetic_names_and_shapes_are_the_built_models(tmp_path):
    """The names and shapes compared are the meta-built model's own (what weights.check_files compares)."""
    from workload.model import compatibility

    for family in ("llama", "qwen3", "phi3", "starcoder2", "olmo2", "gemma2"):
        config = {**SMALL, "model_type": family, "tie_word_embeddings": False, "head_dim": 8, "vocab_size": 32064}
        built = compatibility.build(compatibility.check_config_dict(config, "--model_id m"), "--model_id m")
        parameters = {name: tuple(parameter.shape) for name, parameter in built.named_parameters()}
        expected = header_shapes.expected_shapes(config)
        assert {name: parameters.get(name) for name in expected} == expected, family


def test_the_local_run_refuses_it_before_torch_is_imported(tmp_path):
    config = {**SMALL, "model_type": "llama", "vocab_size": 512}
    directory = _directory(tmp_path, config, {"model.embed_tokens.weight": (256, 32)})
    code, stderr, loaded, _ = run_cli("workload.local", ["--model_id", str(directory), "--steps", "2",
                                                         "--storage_path", str(tmp_path / "runs")])
    assert (code, loaded) == (2, []), stderr
    assert "model.embed_tokens.weight in model.safetensors has shape [256, 32]; the model's config.json gives " \
           "[512, 32]" in stderr and "Traceback" not in stderr, stderr
