"""A decoder's structure: the parameter shapes of its FSDP units (the root, then each decoder layer) and its decoder
layers' linear layers by name, what the memory plan, the FLOP count, the collectives and the adapters read.

Two sources, one form. Where the model is built (the model gate at preview for a config.json read from the Hub or S3,
and the job, which builds it anyway), `record(lm)` reads the structure off the meta-device model, every module
whatever its MLP or attention, and `attach` carries it in the config dict under STRUCTURE_FIELD, so the planners,
standard library only, count what transformers built. Where no model is built (the shipped configs at preview, which
must not import torch, and the random-weight architectures), `of(config)` derives it from the config by each family's
module shapes as transformers builds them: tests/runs/test_family_methods.py checks the derivation against the built model
of every family the gate accepts (parameter counts and linear layers equal). A family outside FAMILY_LAYOUTS with no
recorded structure is derived as Llama's.

Standard library only: the Pulumi program imports this.
"""
from __future__ import annotations

import math

# Where a recorded structure travels in a config dict: no config.json has this field, and the job strips it before
# transformers reads the config.
STRUCTURE_FIELD = "_structure"
# Norms of the hidden width per decoder layer, by model_type (transformers' modeling_<type>.py decoder layers):
# Gemma 2 and 3 and GLM-4 norm before and after both attention and MLP; OLMo 2 after each only; Cohere 2 once
# (attention and MLP in parallel); the others before each.
LAYER_NORMS = {"gemma2": 4, "gemma3_text": 4, "olmo2": 2, "glm4": 4, "cohere2": 1}
DEFAULT_LAYER_NORMS = 2
# LayerNorm with a bias (StarCoder2's nn.LayerNorm): two parameters a norm.
BIASED_NORMS = ("starcoder2",)
# q/k norms: one head wide (Qwen3, Gemma 3: q_norm and k_norm of head_dim), or over all heads (OLMo 2: q_norm of
# heads x head_dim, k_norm of key/value heads x head_dim).
HEAD_QK_NORMS = ("qwen3", "gemma3_text")
FULL_QK_NORMS = ("olmo2",)
# Families whose config class ties the lm_head to the embedding when config.json does not say (transformers'
# configuration_<type>.py default tie_word_embeddings=True); Llama, Mistral, Qwen2, Qwen3, Phi-3, OLMo 2, Granite and
# GLM-4 default to False. A config without a model_type is workload.config's Qwen2, which says.
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text", "starcoder2", "cohere2", "smollm3")
# A decoder layer's linear layers by family, as (name under the layer, its output width, its input width, biased),
# in widths h hidden, q query heads x head_dim, kv key/value heads x head_dim, i intermediate. Phi-3 fuses q, k, v
# and gate, up; GLM-4 fuses gate and up; StarCoder2's MLP is two matrices (c_fc, c_proj) around a GELU.
ATTENTION = (("self_attn.q_proj", "q", "h"), ("self_attn.k_proj", "kv", "h"), ("self_attn.v_proj", "kv", "h"),
             ("self_attn.o_proj", "h", "q"))
GATED_MLP = (("mlp.gate_proj", "i", "h"), ("mlp.up_proj", "i", "h"), ("mlp.down_proj", "h", "i"))
FAMILY_LAYOUTS = {
    "phi3": (("self_attn.qkv_proj", "q+2kv", "h"), ("self_attn.o_proj", "h", "q"),
             ("mlp.gate_up_proj", "2i", "h"), ("mlp.down_proj", "h", "i")),
    "glm4": ATTENTION + (("mlp.gate_up_proj", "2i", "h"), ("mlp.down_proj", "h", "i")),
    "starcoder2": ATTENTION + (("mlp.c_fc", "i", "h"), ("mlp.c_proj", "h", "i")),
}
# Config fields that make a model a mixture of experts, across the families transformers ships (Mixtral's
# num_local_experts, Qwen2/3-MoE's and OLMoE's num_experts, DeepSeek's n_routed_experts).
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# Hybrid layers (attention beside a state-space mixer) and recurrent ones: the job neither counts nor shards them.
SSM_FIELDS = ("mamba_d_state", "mamba_n_heads", "ssm_state_size", "mamba_d_ssm", "layers_block_type",
              "attn_layer_indices", "linear_attn_config")


# What a family's config class reads for head_dim and num_key_value_heads when config.json omits them (transformers
# 5.24, models/<family>/configuration_<family>.py class defaults): a constant for these families; hidden_size /
# num_attention_heads and num_attention_heads for the others (their classes' __post_init__, or the modeling_<family>.py
# attention's getattr(config, "head_dim", hidden_size // num_attention_heads)). A null in config.json is not the
# default: the classes resolve it only as NULL_HEAD_DIM_DERIVED and NULL_KV_HEADS_DERIVED say, and other nulls are
# left to the build (arithmetic_linear_shapes). tests/unit/test_config_defaults.py holds these equal to the classes.
HEAD_DIM_DEFAULTS = {"qwen3": 128, "glm4": 128, "gemma2": 256, "gemma3_text": 256}
KV_HEADS_DEFAULTS = {"mistral": 8, "qwen2": 32, "qwen3": 32, "glm4": 2, "starcoder2": 2, "gemma2": 4,
                     "gemma3_text": 4, "smollm3": 4}
# head_dim: null becomes hidden_size / heads (configuration_llama.py, configuration_mistral.py __post_init__);
# num_key_value_heads: null becomes the query heads where the class's field allows None (Mistral's, GLM-4's,
# StarCoder2's, Gemma 2's and 3's are `int`: the class refuses null).
NULL_HEAD_DIM_DERIVED = ("llama", "mistral")
NULL_KV_HEADS_DERIVED = ("llama", "qwen2", "qwen3", "phi3", "olmo2", "cohere2", "granite", "smollm3")


def _stated_or_default(config: dict, name: str, defaults: dict):
    return config[name] if name in config else defaults.get(config.get("model_type"))


def widths(config: dict) -> dict[str, int]:
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = _stated_or_default(config, "head_dim", HEAD_DIM_DEFAULTS) or hidden // heads
    kv_heads = _stated_or_default(config, "num_key_value_heads", KV_HEADS_DEFAULTS) or heads
    return {"h": hidden, "q": heads * head_dim, "head_dim": head_dim, "kv": kv_heads * head_dim,
            "i": config["intermediate_size"]}


def experts(config: dict) -> int:
    """Routed experts per layer of a mixture-of-experts config (Mixtral's num_local_experts, Qwen-MoE's num_experts);
    0 for a dense one."""
    return int(config.get("num_local_experts") or config.get("num_experts") or 0)


def _width(expression: str, sizes: dict[str, int]) -> int:
    """A width written as FAMILY_LAYOUTS writes it ("q+2kv", "2i") in numbers."""
    total = 0
    for part in expression.split("+"):
        name = part.lstrip("0123456789")
        total += int(part[:len(part) - len(name)] or 1) * sizes[name]
    return total


# Families whose attention or MLP projections are nn.Linear(..., bias=False) whatever config.json's attention_bias or
# mlp_bias says (transformers models/<family>/modeling_<family>.py: MistralAttention, Qwen2MLP, Gemma2MLP, ...); Llama,
# Granite and SmolLM3 take mlp_bias, and Qwen2's q/k/v_proj are always biased.
ATTENTION_WITHOUT_BIAS = ("mistral", "phi3")
MLP_WITHOUT_BIAS = ("mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "olmo2", "cohere2", "phi3", "glm4")


def _biased(model_type: str, config: dict, name: str) -> bool:
    if model_type == "starcoder2":
        return bool(config.get("use_bias", True))
    if name.startswith("self_attn."):
        if model_type in ("qwen2", "glm4") and name != "self_attn.o_proj":
            return model_type == "qwen2" or bool(config.get("attention_bias"))
        return model_type not in ("qwen2", "glm4", *ATTENTION_WITHOUT_BIAS) and bool(config.get("attention_bias"))
    return model_type not in MLP_WITHOUT_BIAS and bool(config.get("mlp_bias"))


def derived(config: dict) -> dict:
    """The structure of the model transformers builds from `config` (see the module docstring), without building it."""
    if STRUCTURE_FIELD in config:
        return config[STRUCTURE_FIELD]
    sizes = widths(config)
    model_type = config.get("model_type", "qwen2")
    layout = FAMILY_LAYOUTS.get(model_type, ATTENTION + GATED_MLP)
    count = experts(config)
    if count:  # the router and each layer's experts as transformers 5 fuses them: no nn.Linear in the MLP
        layout = ATTENTION
    linears = [[name, _width(out, sizes), _width(into, sizes)] for name, out, into in layout]
    layer = [[out, into] for _, out, into in linears]
    layer += [[out] for (name, out, _) in linears if _biased(model_type, config, name)]
    if count:
        width = config.get("moe_intermediate_size") or sizes["i"]
        layer += [[count, sizes["h"]], [count, 2 * width, sizes["h"]], [count, sizes["h"], width]]
    if model_type in HEAD_QK_NORMS:
        layer += [[sizes["head_dim"]]] * 2
    elif model_type in FULL_QK_NORMS:
        layer += [[sizes["q"]], [sizes["kv"]]]
    norm = [[sizes["h"]]] * (2 if model_type in BIASED_NORMS else 1)
    layer += norm * LAYER_NORMS.get(model_type, DEFAULT_LAYER_NORMS)
    embedding = [config["vocab_size"], sizes["h"]]
    root = [embedding, *norm] + ([] if tied_embeddings(config) else [embedding])
    return {"root": root, "layer": layer, "linears": linears}


def tied_embeddings(config: dict) -> bool:
    """The lm_head is the input embedding: as config.json says, else the family's default."""
    return bool(config.get("tie_word_embeddings", config.get("model_type") in TIED_BY_DEFAULT))


def record(lm) -> dict:
    """The structure of a built Hugging Face causal LM (on the meta device or not): the root's parameters (those of no
    decoder layer; a tied lm_head once), the first decoder layer's, and its nn.Linear layers by their names under the
    layer. PEFT's injected adapters are left out and its base_layer counted as the linear it wraps, so an adapted
    model records its base. ValueError when the decoder layers differ in their parameters' shapes (the plan counts one
    layer times the layers)."""
    from torch import nn

    def shapes(module) -> list[tuple[str, list[int]]]:
        return [(name.replace(".base_layer", ""), list(parameter.shape))
                for name, parameter in module.named_parameters() if ".lora_" not in name]

    layers = lm.model.layers
    first = shapes(layers[0])
    differing = [index for index, layer in enumerate(layers) if shapes(layer) != first]
    if differing:
        raise ValueError(f"its decoder layers differ in their parameters (layer {differing[0]} against layer 0)")
    in_layers = {id(parameter) for parameter in layers.parameters()}
    root = [list(parameter.shape) for name, parameter in lm.named_parameters() if id(parameter) not in in_layers]
    linears = []
    for name, module in layers[0].named_modules():
        base = getattr(module, "base_layer", None)
        linear = base if isinstance(base, nn.Linear) else module if isinstance(module, nn.Linear) else None
        if linear is None or ".lora_" in f".{name}" or name.endswith(".base_layer"):
            continue
        linears.append([name, linear.out_features, linear.in_features])
    return {"root": root, "layer": [shape for _, shape in first], "linears": linears}


def attach(config: dict, lm) -> dict:
    """`config` (a config.json as a dict) with the structure recorded from `lm`, the model built from it."""
    return {**config, STRUCTURE_FIELD: record(lm)}


def without_structure(config: dict) -> dict:
    """`config` as transformers reads it: the recorded structure left out."""
    return {key: value for key, value in config.items() if key != STRUCTURE_FIELD}


def layer_shapes(config: dict) -> list[tuple[int, ...]]:
    return [tuple(shape) for shape in derived(config)["layer"]]


def root_shapes(config: dict) -> list[tuple[int, ...]]:
    return [tuple(shape) for shape in derived(config)["root"]]


def linear_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """A decoder layer's nn.Linear layers, by their names under the layer (self_attn.q_proj, mlp.c_fc), as
    (out_features, in_features)."""
    return {name: (out, into) for name, out, into in derived(config)["linears"]}


# The families whose structure (parameters, and decoder layers' linear layers) `derived` gives exactly as transformers
# builds them from any config.json of theirs: the shipped configs' (workload/model/architectures) and the published
# ones under tests/fixtures/model_configs, which tests/unit/test_arithmetic_shapes.py builds on the meta device against
# the arithmetic, with the fields that change a width or a bias. Others are built (infra/preview/model_config.py's gate).
ARITHMETIC_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "glm4", "starcoder2", "gemma2", "gemma3_text",
                       "olmo2", "cohere2", "granite", "smollm3")
_WIDTH_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size", "num_hidden_layers")


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def arithmetic_linear_shapes(config) -> dict[str, tuple[int, int]] | None:
    """`linear_shapes` of a config.json read from storage (untrusted), from its widths alone, where that arithmetic is
    what transformers builds: a family of ARITHMETIC_FAMILIES, dense, positive integer widths, whole heads (head_dim
    given, the class's default, or dividing hidden_size; key/value heads dividing the query heads), no null the
    class does not resolve. None otherwise: the model is built on
    the meta device instead (compatibility.gate, seconds of torch and transformers imports)."""
    if not isinstance(config, dict) or config.get("model_type") not in ARITHMETIC_FAMILIES or STRUCTURE_FIELD in config:
        return None
    if any(config.get(name) not in (None, 0) for name in EXPERT_FIELDS):
        return None
    if not all(_positive(config.get(name)) for name in _WIDTH_FIELDS):
        return None
    model_type, heads = config["model_type"], config["num_attention_heads"]
    head_dim = _stated_or_default(config, "head_dim", HEAD_DIM_DEFAULTS)
    kv_heads = _stated_or_default(config, "num_key_value_heads", KV_HEADS_DEFAULTS)
    if head_dim is None and ("head_dim" in config and model_type not in NULL_HEAD_DIM_DERIVED
                             or config["hidden_size"] % heads):
        return None
    if kv_heads is None and "num_key_value_heads" in config and model_type not in NULL_KV_HEADS_DERIVED:
        return None
    if head_dim is not None and not _positive(head_dim):
        return None
    if kv_heads is not None and not (_positive(kv_heads) and heads % kv_heads == 0):
        return None
    return linear_shapes(config)


def linear_names(config: dict) -> tuple[str, ...]:
    """The leaf names of a decoder layer's linear layers (q_proj, c_fc, qkv_proj): what --lora_targets names and
    PEFT matches, sorted."""
    return tuple(sorted({name.rsplit(".", 1)[-1] for name in linear_shapes(config)}))


def parameter_count(config: dict) -> int:
    structure = derived(config)
    return (config["num_hidden_layers"] * sum(math.prod(shape) for shape in structure["layer"])
            + sum(math.prod(shape) for shape in structure["root"]))


def hybrid_layers(config: dict) -> str | None:
    """The config field that makes a model a hybrid of attention and state-space (Mamba) or recurrent layers, or
    None."""
    return next((name for name in SSM_FIELDS if config.get(name) is not None), None)
