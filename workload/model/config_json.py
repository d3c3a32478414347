"""config.json read as transformers reads it (PreTrainedConfig._dict_from_json_file): UTF-8 JSON, then its tagged
floats decoded. transformers 5 writes an infinite or NaN value (Falcon-H1's time_step_limit) as
{"__float__": "Infinity"} (PreTrainedConfig._encode_special_floats), which a plain json.load leaves a dict, so a model
the job exported could not be fed back as --model_id. Bounded first: a config.json from storage is untrusted input,
and the largest published ones are a few KiB. Then its nesting and the integers that size a model are bounded too,
before transformers sees them: 200,000 levels of `[` fit in 400 kB and end in a RecursionError, and a
num_hidden_layers of 10**12 has transformers' config build a list that long (it never answers). Every reader of a
config.json (the preview's, the job's, the export's) goes through loads, so one place holds the bounds.

Standard library only (the Pulumi program reads configs through it).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from workload.model import config_types, structure

# A MiB is room for any published config.json, and a bound on what json reads.
MAX_CONFIG_BYTES = 1 << 20
FLOAT_TAG = "__float__"  # transformers.configuration_utils._FLOAT_TAG_KEY
FLOAT_VALUES = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


# Published configs nest three or four levels (text_config.rope_scaling, quantization_config's lists).
MAX_CONFIG_DEPTH = 32
# The fields that size a model, and bounds well above any published model's (Llama-3.1-405B: 126 layers, hidden 16384,
# intermediate 53248, 128 heads; vocabularies of some 260k tokens (Gemma 3: 262144); Llama 4 Scout's 10M positions;
# DeepSeek-V3's 256 routed experts, Kimi K2's 384): a larger value is not a model, and transformers would try to build
# it. Checked in every object of the file (a multimodal config's text_config holds them too).
SIZE_FIELD_BOUNDS = {
    "num_hidden_layers": 1024, "hidden_size": 65536, "intermediate_size": 1 << 20, "vocab_size": 1 << 22,
    "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096, "num_local_experts": 1024,
    "num_experts": 1024, "n_routed_experts": 1024, "num_experts_per_tok": 1024, "moe_intermediate_size": 1 << 20,
    "max_position_embeddings": 1 << 24,
}


# What transformers' config takes in dtype / torch_dtype: a name it looks up as getattr(torch, name) (so "bf16" or
# "float8", typed by hand, fail its config build with "module 'torch' has no attribute"); the dtypes torch names.
DTYPE_FIELDS = ("dtype", "torch_dtype")
TORCH_DTYPES = frozenset({
    "float32", "float16", "bfloat16", "float64", "float", "half", "double", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "uint8", "int16", "int32", "int64", "bool"})


class Refused(ValueError):
    """Not a config.json any model has (its message follows "<file> is")."""


class TooLarge(Refused):
    """More bytes than any config.json has."""


def _shown(value: int) -> str:
    digits = len(str(abs(value)))
    return f"{value:,}" if digits <= 18 else f"an integer of {digits:,} digits"


# Fields a dense model may set to 0 (no experts); every other sizing field is at least 1.
MAY_BE_ZERO = {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok"}


def _check_size_field(field: str, number: Any, bound: int) -> None:
    """A sizing field absent, null or a list (some architectures give one per layer) is left to the model's own
    config class; a number must be a whole one within its bounds, as transformers' strict config fields require."""
    if number is None or isinstance(number, (list, dict)):
        return
    lowest = 0 if field in MAY_BE_ZERO else 1
    if isinstance(number, bool) or not isinstance(number, int):
        raise Refused(f"out of bounds: its {field} is a {type(number).__name__}; allowed: an integer from {lowest} to "
                      f"{bound}")
    if not lowest <= number <= bound:
        raise Refused(f"out of bounds: its {field} is {_shown(number)}; allowed: an integer from {lowest} to {bound} "
                      "(well above any published model's)")


def attention_shape_problem(config: dict) -> str | None:
    """Why the attention of a config object's shapes cannot run (after "not a model attention can run: "), or None.
    transformers builds such a model (the projections take any sizes), and its first forward fails inside attention or
    the rotary embedding, on every rank after the GPUs started billing: the heads split hidden_size evenly unless
    head_dim says otherwise (head_dim = hidden_size // num_attention_heads, so 1000 / 12 gives q_proj 996 outputs that
    reshape into no whole head), and each key/value head serves a whole group of query heads."""
    def whole(field: str) -> int | None:
        number = config.get(field)
        return number if isinstance(number, int) and not isinstance(number, bool) and number >= 1 else None

    # A field config.json omits is the family's config class default (structure.HEAD_DIM_DEFAULTS, KV_HEADS_DEFAULTS:
    # Qwen2's 32 key/value heads, Qwen3's head_dim 128).
    model_type = config.get("model_type")
    hidden, heads, groups = whole("hidden_size"), whole("num_attention_heads"), whole("num_key_value_heads")
    default = "num_key_value_heads" not in config and structure.KV_HEADS_DEFAULTS.get(model_type)
    if heads and (groups or default) and heads % (groups or default):
        return (f"its num_attention_heads {heads} is not a multiple of its num_key_value_heads {groups or default}"
                + (f" ({model_type}'s default where config.json omits it)" if default else "")
                + " (each key/value head serves a whole group of heads)")
    if "head_dim" not in config and model_type in structure.HEAD_DIM_DEFAULTS:
        return None
    if hidden and heads and config.get("head_dim") is None and hidden % heads:
        return (f"its hidden_size {hidden} is not a multiple of its num_attention_heads {heads}, and it sets no "
                "head_dim (each head is hidden_size / num_attention_heads wide)")
    return None


def dtype_problem(config: dict) -> str | None:
    """Why a config object's dtype or torch_dtype names no torch dtype (after "not a config transformers builds: "),
    or None; absent or null is the model's default."""
    for field in DTYPE_FIELDS:
        value = config.get(field)
        if isinstance(value, str) and value not in TORCH_DTYPES:
            return (f"its {field} is {value[:40]!r}, which names no torch dtype; allowed: bfloat16, float16 or float32 "
                    "(what save_pretrained writes)")
    return None


def rope_problem(config: dict) -> str | None:
    """Why a rotary scaling object (rope_scaling, or transformers 5's rope_parameters, per layer type too: one with a
    rope_type) scales by no factor transformers takes, or None. transformers' own validation only logs "factor field
    must be a float or int >= 1" and builds the model, whose positions then train scaled by it."""
    if "rope_type" not in config and "type" not in config or "factor" not in config:
        return None
    factor = config["factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        return f"its rotary scaling's factor is {factor!r}; allowed: a number of at least 1 (1: no scaling)"
    return None


# Numeric fields whose value out of range raises nowhere: transformers builds the model, and its first forward is NaN
# on every rank, after the GPUs started billing. Matched by name in every object of the file (text_config, transformers
# 5's rope_parameters, per layer type too), and in a list of them (a value per layer); absent or null is the default.
# - the base of the rotary frequencies: inv_freq = 1 / base ** (arange(0, dim, 2) / dim) (transformers
#   modeling_rope_utils._compute_default_rope_parameters, `base = rope_parameters_dict["rope_theta"]`): 0 gives inf
#   frequencies, so cos/sin of inf is NaN; a negative base to a fractional power is NaN.
# - a norm's epsilon: RMSNorm is x * rsqrt(mean(x**2) + eps) (transformers models/llama LlamaRMSNorm), LayerNorm
#   (x - mean) / sqrt(var + eps) (torch.nn.LayerNorm): at or below 0, a row of zeros (padding, an untrained row) or a
#   small one is inf or the rsqrt of a negative number, NaN.
# - initializer_range: the std of torch.nn.init.normal_ for every weight the checkpoint does not hold; torch refuses a
#   negative std, and NaN or inf fills the weights with it.
# - partial_rotary_factor: the rotary dimension is int(head_dim * partial_rotary_factor) (modeling_rope_utils):
#   0 rotates nothing, above 1 is wider than the head and the first forward fails in apply_rotary_pos_emb.
ABOVE_ZERO = "a finite number above 0"
NUMBER_FIELD_RULES = (
    (re.compile(r"(rope_theta|rotary_emb(edding)?_base|rope_local_base_freq)$"), lambda x: 0 < x < math.inf,
     ABOVE_ZERO),
    (re.compile(r"(norm|rms)_?eps(ilon)?$"), lambda x: 0 < x < math.inf, ABOVE_ZERO),
    (re.compile(r"initializer_range$"), lambda x: 0 <= x < math.inf, "a finite number of at least 0"),
    (re.compile(r"partial_rotary_factor$"), lambda x: 0 < x <= 1, "a number above 0 and at most 1"),
)


def _number(value: Any) -> Any:
    """A field's value as transformers reads it: a tagged float ({"__float__": "NaN"}) decoded."""
    if isinstance(value, dict) and set(value) == {FLOAT_TAG}:
        return FLOAT_VALUES.get(value[FLOAT_TAG], value)
    return value


def number_problem(config: dict) -> str | None:
    """Why a config object's numeric field (NUMBER_FIELD_RULES) trains to NaN or fails (after "not a config a model
    trains with: "), or None."""
    for field, raw in config.items():
        rule = next((rule for rule in NUMBER_FIELD_RULES if rule[0].search(str(field))), None)
        if rule is None or raw is None:
            continue
        _, within, allowed = rule
        for value in raw if isinstance(raw, list) else [raw]:
            value = _number(value)
            if value is None or isinstance(value, dict):  # a mapping per layer type: the walk reaches its objects
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"its {str(field)[:64]} is a {type(value).__name__}; allowed: {allowed}"
            if not within(value):
                shown = _shown(value) if isinstance(value, int) else value
                return f"its {str(field)[:64]} is {shown}; allowed: {allowed}"
    return None


def check_shape(config: Any) -> None:
    """Refused when `config` nests deeper than MAX_CONFIG_DEPTH or an object holds a SIZE_FIELD_BOUNDS field above its
    bound; walked without recursion."""
    pending = [(config, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_CONFIG_DEPTH:
            raise Refused(f"nested more than {MAX_CONFIG_DEPTH} levels deep; a model's config.json nests a few")
        if isinstance(value, dict):
            for field, bound in SIZE_FIELD_BOUNDS.items():
                _check_size_field(field, value.get(field), bound)
            if (why := attention_shape_problem(value)) is not None:
                raise Refused(f"not a model attention can run: {why}")
            if (why := dtype_problem(value) or rope_problem(value)) is not None:
                raise Refused(f"not a config transformers builds: {why}")
            if (why := number_problem(value)) is not None:
                raise Refused(f"not a config a model trains with: {why}")
            # A config object (the file's top, or a sub-config naming its model_type): each typed field of the kind
            # transformers' strict config class takes (config_types.py), a tagged float read as the float it is.
            if (depth == 1 or "model_type" in value) and (
                    why := config_types.type_problem({field: _number(item) for field, item in value.items()})):
                raise Refused(f"not a config transformers builds: {why}")
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)


def decode_floats(value: Any) -> Any:
    """transformers' PreTrainedConfig._decode_special_floats: {"__float__": "Infinity"} -> inf, anywhere."""
    if isinstance(value, dict):
        if set(value) == {FLOAT_TAG} and isinstance(value[FLOAT_TAG], str):
            return FLOAT_VALUES.get(value[FLOAT_TAG], value)
        return {key: decode_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_floats(item) for item in value]
    return value


def loads(data: bytes | str) -> Any:
    """A config.json's text as transformers reads it; TooLarge over MAX_CONFIG_BYTES, Refused nested too deep or with
    a sizing field out of bounds (check_shape), ValueError (JSONDecodeError, UnicodeDecodeError) when it is not UTF-8
    JSON."""
    if len(data) > MAX_CONFIG_BYTES:
        raise TooLarge(f"{len(data):,} bytes; a model's config.json is a few KiB (allowed: at most "
                       f"{MAX_CONFIG_BYTES:,})")
    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    try:
        config = json.loads(text)
    except RecursionError:  # json's scanner counts its depth against the interpreter's recursion limit
        raise Refused(f"nested more than {MAX_CONFIG_DEPTH} levels deep; a model's config.json nests a few") from None
    check_shape(config)
    return decode_floats(config)


def load(path: str) -> Any:
    """config.json at `path` (see loads): its size and kind checked (workload/user_files.py) before a byte is read."""
    import os

    from workload import user_files

    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise TooLarge(f"{size:,} bytes; a model's config.json is a few KiB (allowed: at most {MAX_CONFIG_BYTES:,})")
    try:  # a regular file (a FIFO would wait for a writer forever), without holes, read within its bound
        data = user_files.read_bytes(path, MAX_CONFIG_BYTES)
    except user_files.Refused as error:
        raise Refused(error.why.removeprefix("is ")) from None
    return loads(data)


def load_model_config(directory: str, what: str) -> Any:
    """A model directory's config.json (see load), or ValueError("{what}: ...") naming what is wrong: not readable,
    refused by its bounds, or not JSON. The job's build and the local run's early check read it through this."""
    import os

    path = os.path.join(directory, "config.json")
    try:
        return load(path)
    except OSError:
        raise ValueError(f"{what}: {directory} has no readable config.json; " + _what_it_is(directory)) from None
    except Refused as error:
        raise ValueError(f"{what}: {path} is {error}") from None
    except ValueError:
        raise ValueError(f"{what}: {path} is not JSON") from None


def _what_it_is(directory: str) -> str:
    """What a directory without config.json is, when it is something a user holds by mistake, and what to give."""
    import json
    import os

    from workload import user_files

    if os.path.isfile(os.path.join(directory, "adapter_config.json")):  # PEFT's save_pretrained of adapters
        try:
            data = user_files.read_bytes(os.path.join(directory, "adapter_config.json"), MAX_CONFIG_BYTES)
            base = json.loads(data).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError):
            base = None
        shown = f" ({base})" if isinstance(base, str) and len(base) <= 200 and base.isprintable() else ""
        return (f"it holds LoRA adapters (adapter_config.json), not a model: give their base model{shown}, or merge "
                "them into one with `python -m workload.export CHECKPOINT OUT --merge`")
    name = os.path.basename(os.path.normpath(directory))
    if name.startswith("models--") and os.path.isdir(os.path.join(directory, "snapshots")):  # huggingface_hub's cache
        return (f"it is a Hub cache entry: give the model's id ({name.removeprefix('models--').replace('--', '/', 1)}), "
                "or one of its snapshots/<revision>/ directories")
    return "a model directory holds config.json and *.safetensors (what save_pretrained writes)"
