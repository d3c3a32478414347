"""The config arithmetic's widths (workload.model.structure.widths, standard library only) read a head_dim or a
num_key_value_heads that config.json omits, states or sets to null as the family's transformers config class reads
it (AutoConfig.for_model: Qwen3's head_dim 128, Mistral's 8 key/value heads, ...), for every family the arithmetic
covers; a null the class refuses or leaves unresolved is left to the build (arithmetic_linear_shapes gives None)."""
from __future__ import annotations

import pytest

from workload.model import structure

# Widths of no published model, so that a default cannot pass by matching a stated value: 24 query heads of 80
# (1920), which 8, 4 and 2 key/value heads divide, and 32 (the Qwen2/3 default) does not.
BASE = {"hidden_size": 1920, "num_attention_heads": 24, "intermediate_size": 5120, "vocab_size": 3000,
        "num_hidden_layers": 1}
# 32 query heads, which every class's default key/value heads divide.
WHOLE = dict(BASE, num_attention_heads=32, hidden_size=2560)
CASES = {
    "omitted": {},
    "stated": {"head_dim": 72, "num_key_value_heads": 6},
    "null head_dim": {"head_dim": None},
    "null num_key_value_heads": {"num_key_value_heads": None},
    "both null": {"head_dim": None, "num_key_value_heads": None},
}


def _class_widths(model_type: str, fields: dict) -> dict | None:
    """q, kv and head_dim as the family's config class and its attention (modeling_<family>.py's getattr(config,
    "head_dim", hidden_size // num_attention_heads)) read them, or None where the class refuses or leaves a None."""
    from huggingface_hub.errors import StrictDataclassFieldValidationError
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(model_type, **fields)
    except (TypeError, ValueError, StrictDataclassFieldValidationError):  # a field typed `int` given null
        return None
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", config.hidden_size // heads)
    kv_heads = config.num_key_value_heads
    if head_dim is None or kv_heads is None or heads % kv_heads:
        return None
    return {"q": heads * head_dim, "kv": kv_heads * head_dim, "head_dim": head_dim}


@pytest.mark.parametrize("base", [BASE, WHOLE], ids=["24 heads", "32 heads"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("model_type", structure.ARITHMETIC_FAMILIES)
def test_a_width_config_json_omits_is_read_as_the_config_class_reads_it(model_type, case, base):
    fields = dict(base, model_type=model_type, **CASES[case])
    expected = _class_widths(model_type, {key: value for key, value in fields.items() if key != "model_type"})
    arithmetic = structure.arithmetic_linear_shapes(fields)
    assert (arithmetic is None) == (expected is None), (
        f"{model_type} {case}: the class builds {expected}; the arithmetic gives {arithmetic}")
    if expected is None:
        return
    widths = structure.widths(fields)
    assert {key: widths[key] for key in expected} == expected, f"{model_type} {case}"
    assert arithmetic["self_attn.o_proj"] == (fields["hidden_size"], expected["q"]), f"{model_type} {case}: o_proj"


def test_every_default_in_the_tables_is_a_family_the_arithmetic_covers():
    assert set(structure.HEAD_DIM_DEFAULTS) | set(structure.KV_HEADS_DEFAULTS) <= set(structure.ARITHMETIC_FAMILIES)
