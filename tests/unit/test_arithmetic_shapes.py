"""A decoder's linear layers and embeddings from config.json's arithmetic (workload.model.structure, standard library
only: what the preview's qlora check reads before the model gate) against the model transformers builds on the meta
device, for every config the project ships and variants of their families; and where the arithmetic is not used."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workload.model import architectures, compatibility, structure

SHIPPED = architectures.shipped_ids()
# Published configs of the other families the arithmetic covers (their SOURCES.md says where each came from).
FIXTURES = {path.stem: json.loads(path.read_text()) for path in sorted(
    (Path(__file__).resolve().parents[1] / "fixtures" / "model_configs").glob("*.json"))}
FAMILY_CONFIGS = {**{model_id: architectures.published(model_id) for model_id in SHIPPED},
                  **{name: config for name, config in FIXTURES.items()
                     if config.get("model_type") in structure.ARITHMETIC_FAMILIES}}
# A projection's bias as each family builds it: some take attention_bias / mlp_bias, others never have one.
BIASES = ({"attention_bias": True}, {"mlp_bias": True})
# Each family's fields that change a projection's width: head_dim apart from hidden_size / heads, one key/value head
# (the preview audit's acme/odd-kv: k_proj and v_proj 100 rows), biases.
VARIANTS = [
    ("Qwen/Qwen2.5-1.5B", {"hidden_size": 1600, "num_attention_heads": 16, "num_key_value_heads": 1,
                           "intermediate_size": 4352}),
    ("Qwen/Qwen3-0.6B", {"head_dim": 96, "num_key_value_heads": 2}),
    ("meta-llama/Llama-3.2-1B", {"head_dim": 48, "attention_bias": True, "mlp_bias": True}),
    ("meta-llama/Llama-3.2-1B", {"num_key_value_heads": None}),
    ("mistralai/Mistral-7B-v0.3", {"head_dim": 160, "num_key_value_heads": 4}),
]


def built(config: dict) -> dict:
    """The structure of the model the gate builds on the meta device, one layer deep (every layer is the same)."""
    one_layer = dict(config, num_hidden_layers=1)
    return structure.record(compatibility.build(compatibility.check_config_dict(one_layer, "test"), "test"))


@pytest.mark.parametrize("config", [*FAMILY_CONFIGS.values()]
                         + [dict(architectures.published(model_id), **fields) for model_id, fields in VARIANTS]
                         + [dict(config, **bias) for config in FAMILY_CONFIGS.values() for bias in BIASES],
                         ids=list(FAMILY_CONFIGS) + [f"{model_id}+{','.join(fields)}" for model_id, fields in VARIANTS]
                         + [f"{name}+{','.join(bias)}" for name in FAMILY_CONFIGS for bias in BIASES])
def test_the_arithmetic_gives_the_shapes_transformers_builds(config):
    assert config["model_type"] in structure.ARITHMETIC_FAMILIES
    model = built(config)
    arithmetic = structure.arithmetic_linear_shapes(config)
    assert arithmetic == {name: (out, into) for name, out, into in model["linears"]}, (
        f"{config['model_type']}: the q/k/v/o and gate/up/down projections as built, not {arithmetic}")
    derived = structure.derived(config)
    assert [list(shape) for shape in derived["root"]] == model["root"], "the embeddings (and an untied head) as built"
    assert sorted(map(list, derived["layer"])) == sorted(model["layer"]), "a decoder layer's parameters as built"


# One published config a family with head_dim and num_key_value_heads omitted, so that the family's config class
# supplies them (Qwen3's head_dim 128, Mistral's 8 key/value heads, ...: structure.HEAD_DIM_DEFAULTS,
# KV_HEADS_DEFAULTS), over 32 query heads of 80 (which every class's default key/value heads divide).
OMITTED = {config["model_type"]: dict({key: value for key, value in config.items()
                                       if key not in ("head_dim", "num_key_value_heads")},
                                      num_attention_heads=32, hidden_size=2560)
           for config in FAMILY_CONFIGS.values()}


@pytest.mark.parametrize("config", OMITTED.values(), ids=OMITTED)
def test_widths_config_json_omits_are_the_built_models(config):
    model = built(config)
    assert structure.arithmetic_linear_shapes(config) == {name: (out, into) for name, out, into in model["linears"]}
    assert sorted(map(list, structure.derived(config)["layer"])) == sorted(model["layer"])


def test_the_configs_built_here_cover_every_family_the_arithmetic_is_used_for():
    families = {config["model_type"] for config in FAMILY_CONFIGS.values()}
    assert families == set(structure.ARITHMETIC_FAMILIES), families


@pytest.mark.parametrize("change", [
    {"model_type": "gpt_neox"},  # a family outside the arithmetic's: built
    {"num_experts": 8},  # a mixture of experts: the gate refuses it after building
    {"num_key_value_heads": 3},  # 12 query heads over 3 key/value heads divide; 5 do not
    {"num_key_value_heads": 5},
    {"hidden_size": 1537},  # heads of no whole width
    {"head_dim": 0},
    {"intermediate_size": "8960"},
    {"vocab_size": True},
    {structure.STRUCTURE_FIELD: {"root": [], "layer": [], "linears": []}},
])
def test_a_config_the_arithmetic_does_not_cover_is_left_to_the_build(change):
    config = dict(architectures.published("Qwen/Qwen2.5-1.5B"), **change)
    expected = change == {"num_key_value_heads": 3}
    assert (structure.arithmetic_linear_shapes(config) is not None) == expected, change
