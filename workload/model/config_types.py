"""The types transformers' config classes give config.json's common fields, as a table a standard-library reader checks
(workload/model/config_json.py, which every reader of a config.json goes through: the preview's, the local run's,
the job's, the export's).

transformers 5's config classes are strict dataclasses (transformers/configuration_utils.py: `@strict(accept_kwargs=
True) class PreTrainedConfig`, each model's config `@strict`, e.g. models/qwen2/configuration_qwen2.py
`tie_word_embeddings: bool = False`), and huggingface_hub validates every declared field's type when the config is
built (huggingface_hub/dataclasses.py _validate_simple_type: `isinstance(value, expected_type)`, a bool refused where
an int is expected): so `"tie_word_embeddings": "false"` ends in StrictDataclassFieldValidationError, a traceback
after the seconds of imports, or in the job after the GPUs started billing. JSON holds no other kinds, and the check
here is the same isinstance: a JSON integer is an int, a number with a fraction or an exponent a float (json.loads),
so `"rms_norm_eps": 1` is refused as transformers refuses it ("expected float, got int").

The table: every field that at least 10 of transformers 5.24's causal-LM config classes
(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) declare, with a type made only of bool, int, float and None; its kinds are the union
over those classes (a value any of them takes is taken: a model's own class decides the rest). Left out: the fields
PreTrainedConfig declares and does not validate (chunk_size_feed_forward, is_encoder_decoder, output_hidden_states,
return_dict: a class built with a string there is built).
tests/unit/test_config_types.py holds it to transformers' own classes.

Standard library only.
"""
from __future__ import annotations

from typing import Any

FIELD_TYPES = {
    "add_cross_attention": "bool", "attention_bias": "bool", "mlp_bias": "bool",
    "is_decoder": "None|bool", "norm_topk_prob": "None|bool",
    "output_router_logits": "None|bool", 
    "scale_embedding": "None|bool", "tie_word_embeddings": "None|bool", "use_bias": "None|bool",
    "use_cache": "None|bool",
    "hidden_size": "int", "kv_lora_rank": "int", "max_position_embeddings": "int",
    "num_attention_heads": "int", "num_hidden_layers": "int", "qk_nope_head_dim": "int", "qk_rope_head_dim": "int",
    "type_vocab_size": "int", "vocab_size": "int",
    "bos_token_id": "None|int", "d_model": "None|int", "decoder_attention_heads": "None|int",
    "decoder_ffn_dim": "None|int", "decoder_layers": "None|int", "decoder_start_token_id": "None|int",
    "encoder_attention_heads": "None|int", "encoder_ffn_dim": "None|int", "encoder_layers": "None|int",
    "first_k_dense_replace": "None|int", "head_dim": "None|int", "moe_intermediate_size": "None|int",
    "n_group": "None|int", "n_routed_experts": "None|int", "n_shared_experts": "None|int", "num_experts": "None|int",
    "num_experts_per_tok": "None|int", "num_key_value_heads": "None|int", "num_local_experts": "None|int",
    "pad_token_id": "None|int", "pretraining_tp": "None|int", "q_lora_rank": "None|int",
    "sliding_window": "None|int", "topk_group": "None|int", "v_head_dim": "None|int",
    "attention_probs_dropout_prob": "float|int", "embd_pdrop": "float|int", "hidden_dropout_prob": "float|int",
    "activation_dropout": "None|float|int", "attention_dropout": "None|float|int",
    "classifier_dropout": "None|float|int", "decoder_layerdrop": "None|float|int", "dropout": "None|float|int",
    "encoder_layerdrop": "None|float|int", "final_logit_softcapping": "None|float|int",
    "resid_pdrop": "None|float|int", "routed_scaling_factor": "None|float|int",
    "init_std": "None|float", "initializer_range": "None|float", "layer_norm_eps": "None|float",
    "layer_norm_epsilon": "None|float", "rms_norm_eps": "None|float", "router_aux_loss_coef": "None|float",
}
_PYTHON_TYPES = {"bool": bool, "int": int, "float": float, "None": type(None)}
_JSON_NAMES = {bool: "a boolean", int: "an integer", float: "a number with a fraction", type(None): "null",
               str: "a string", list: "an array", dict: "an object"}
_ALLOWED_NAMES = {"bool": "true or false", "int": "an integer", "float": "a number with a fraction or an exponent "
                  "(0.02, 1e-06)", "None": "null"}


def _takes(kind: str, value: Any) -> bool:
    """huggingface_hub's isinstance for one of the kinds (an int is no bool, a bool no int)."""
    expected = _PYTHON_TYPES[kind]
    if expected is int and isinstance(value, bool):
        return False
    return isinstance(value, expected)


def type_problem(config: dict) -> str | None:
    """Why a config object's typed field (FIELD_TYPES) holds a kind of value transformers' config class refuses (after
    "not a config transformers builds: "), or None. Names the field and the kinds, never the value."""
    for field, kinds in FIELD_TYPES.items():
        if field not in config:
            continue
        value = config[field]
        if not any(_takes(kind, value) for kind in kinds.split("|")):
            allowed = " or ".join(_ALLOWED_NAMES[kind] for kind in reversed(kinds.split("|")))
            return (f"its {field} is {_JSON_NAMES.get(type(value), type(value).__name__)}; allowed: {allowed} (the "
                    "type transformers' config class declares)")
    return None
