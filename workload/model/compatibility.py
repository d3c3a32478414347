"""Whether the job can train a model, decided from its config.json alone, before any weights exist: the model gate.

`build(config, what)` is how the job builds a --model_id's architecture (workload.model.build.build_model), and
`gate(config_dict, what)` is the same call on a config.json read at preview (infra/preview/model_config.py): whatever
the preview accepts is what the job then builds, by the same code. In order, a model is refused with one line naming
`what` (--model_id or trainModelId) and what it is, unless:
- transformers knows its model_type natively (custom code from the Hub, auto_map, is never run);
- it is a decoder-only causal LM: not an encoder-decoder (t5, bart), not a multimodal wrapper around a language model
  (text_config with vision or audio, e.g. gemma3, llava), not an encoder (bert, roberta: AutoModelForCausalLM builds
  them as a decoder head over an encoder, which no published checkpoint of theirs was trained as), and its
  config.json's architectures, when given, name a causal LM (not a reward model's or classifier's head: head_problem)
  and not only another model_type's (MixtralForCausalLM over model_type llama, a hand-edited file: family_problem);
- it is not a hybrid of attention and state-space (Mamba) or recurrent layers (Falcon-H1, Jamba, Bamba): their
  mixers are neither counted by the memory plan nor sharded as the job shards a decoder layer;
- it is dense: a mixture-of-experts model (Mixtral, Qwen3-MoE, ...) is built by transformers with every layer's
  experts fused into one tensor (experts.gate_up_proj), while its published files keep one tensor per expert
  (experts.0.w1.weight) that transformers converts while loading; workload.model.weights reads each tensor by its
  name, rank by rank, and the memory plan counts one MLP per layer, so it is refused rather than planned as dense;
- its layers are where sharding looks for them (CausalLMWithLoss.layers: lm.model.layers, one per
  num_hidden_layers), and its lm_head is where the chunked loss reads it;
- its config.json's pad/bos/eos ids are below its vocab_size (token_id_problem, before transformers loads), and
  transformers builds its config and its model at all: any exception of theirs (a strict dataclass's validator, a
  torch assert) is one refusal naming `what` with the library's first line, never a traceback;
- every buffer is either in the files (persistent) or computed when the model is built (a rotary embedding's inv_freq,
  Gemma's embed_scale), so the sharded load can restore it.

check_raw says all it can from config.json alone before transformers is imported (seconds, with torch): the
token ids, the per-layer lists, the mixers, the activation (workload.model.activations) and the kind of model
(raw_kind_problem: encoder-decoder, multimodal wrapper, encoder, no causal-LM class, read from transformers' source
by workload.model.model_kinds), each in the words check_config or build say after the imports.

The model is built with its parameters on the meta device (no memory, a fraction of a second even for 70B) and its
buffers computed on the CPU: `parameters_on_meta`. torch and transformers are imported inside the functions, so the
Pulumi program imports this module at no cost until a model needs the gate.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from workload.model import activations, model_kinds, remote_code, structure

EXPERT_FIELDS = structure.EXPERT_FIELDS
# Sub-configs that make a config a multimodal wrapper (transformers' PretrainedConfig.sub_configs names).
MULTIMODAL_FIELDS = ("vision_config", "audio_config", "vision_tower", "speech_config")
# A causal LM's class names in config.json's architectures (LlamaForCausalLM, GPT2LMHeadModel), besides those
# AutoModelForCausalLM maps a model_type to (Gemma3ForConditionalGeneration); the heads a reward model or classifier has.
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
HEAD_SUFFIXES = ("ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")
ALLOWED = ("allowed: a dense decoder-only causal LM that transformers ships, such as Llama, Mistral, Qwen2.5, Qwen3, "
           "Gemma 2, Gemma 3 (text), Phi-3 or OLMo 2")


def _refuse(what: str, problem: str) -> ValueError:
    return ValueError(f"{what}: {problem}; {ALLOWED}")


def check_raw(raw: Any, what: str) -> None:
    """The gate's checks of config.json that need no transformers (the local run makes them before its imports)."""
    if not isinstance(raw, dict):
        raise _refuse(what, "its config.json is not a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise _refuse(what, "its config.json has no model_type, so transformers cannot tell what it is")
    # A model_type transformers has no class of (custom code named by auto_map, or none): from its source text,
    # before the seconds of importing it (workload/model/remote_code.py); check_config_dict says it again after.
    if remote_code.known_model_type(model_type) is False:
        raise _refuse(what, remote_code.unknown_model_type(model_type, raw))
    if raw.get("quantization_config") is not None:  # GPTQ, AWQ, FP8, bitsandbytes: qweight/scales, not the weights
        raise _refuse(what, "its config.json has a quantization_config: its weights are stored quantized, which the "
                            "job neither loads nor trains; give the model's unquantized (bf16/fp32) repository "
                            "(--method qlora quantizes it itself)")
    if (why := token_id_problem(raw) or per_layer_problem(raw) or mixer_problem(model_type, raw.get)
            or activations.activation_problem(raw, model_type) or raw_kind_problem(raw, model_type)) is not None:
        raise _refuse(what, why)


def kind_problem(model_type: str, encoder_decoder: bool, wrapped: list[str], inner: str | None,
                 causal: Any, masked: Any) -> str | None:
    """Why a model of `model_type` is not a decoder-only, text-only causal LM, or None: the words both check_config
    (from the transformers config) and raw_kind_problem (from config.json and transformers' source) say."""
    if encoder_decoder:
        return f"{model_type} is an encoder-decoder (sequence-to-sequence) model, not a decoder-only causal LM"
    if wrapped:
        around = f" around a {inner} language model" if inner else ""
        return (f"{model_type} is a multimodal model ({', '.join(wrapped)}){around}, not a text-only causal LM; "
                "train a text-only checkpoint of the family")
    if model_type in masked:
        return f"{model_type} is an encoder (a masked-language model such as BERT), not a decoder-only causal LM"
    if model_type not in causal:
        return f"{model_type} is not a causal LM (AutoModelForCausalLM has no class for it)"
    return None


def raw_kind_problem(raw: dict, model_type: str) -> str | None:
    """kind_problem from config.json's own fields and transformers' source text (workload.model.model_kinds), before
    the seconds of importing it: is_encoder_decoder as config.json sets it, else as the config class defaults it; the
    MULTIMODAL_FIELDS config.json gives, around the text sub-config's model_type (config.json's, or the class's own
    default, sub_configs_defaults); the masked-LM and causal-LM tables of modeling_auto.py. None where any of it
    cannot be read here, or the class's code may build or rename a sub-config (the gate's check_config decides after
    its imports). tests/unit/test_model_kinds.py holds every early refusal equal to check_config's, for every
    model_type transformers has."""
    causal, masked = model_kinds.mapping(model_kinds.CAUSAL_TABLE), model_kinds.mapping(model_kinds.MASKED_TABLE)
    declared = model_kinds.config_class(model_type)
    if causal is None or masked is None or declared is None:
        return None
    stated = raw.get("is_encoder_decoder", declared.is_encoder_decoder)
    if not isinstance(stated, bool) and stated is not None:
        return None
    wrapped = [name for name in MULTIMODAL_FIELDS if raw.get(name) is not None]
    if any(name in declared.names and name not in wrapped for name in MULTIMODAL_FIELDS):
        return None  # a sub-config the class may build by itself: its __post_init__ decides, not its text
    text, inner = raw.get("text_config"), None
    if "text_config" in declared.sub_configs:  # the class builds text_config: its default, or from the dict
        given = text.get("model_type") if isinstance(text, dict) else None
        if (text is not None and not isinstance(text, dict)) or (
                declared.text_fixed and given not in (None, declared.text_model_type)):
            return None  # a class of the file given another model_type: its code decides which wins
        inner = given if isinstance(given, str) else declared.text_model_type if (
            declared.text_fixed or text is None) else None
        if not isinstance(inner, str):
            return None
    elif "text_config" in declared.names:
        return None  # handled in the class's code, not declared
    return kind_problem(model_type, bool(stated), wrapped, inner, causal, masked)


def mixer_problem(model_type: str, field: Any) -> str | None:
    """Why a config's layers are not the dense attention + MLP layers the job shards, loads and plans, from its fields
    (`field(name)`: config.json's own, before transformers' seconds of imports, or the transformers config's), or
    None: a hybrid with state-space (Mamba) or recurrent mixers, or a mixture of experts (see the module docstring)."""
    hybrid = next((name for name in structure.SSM_FIELDS if field(name) is not None), None)
    if hybrid:
        return (f"{model_type} is a hybrid of attention and state-space (Mamba) or recurrent layers ({hybrid}), whose "
                "mixers the job's sharding, loader and memory plan do not handle")
    experts = next((name for name in EXPERT_FIELDS if field(name)), None)
    if experts:
        return (f"{model_type} is a mixture-of-experts model ({experts} {str(field(experts))[:40]}): transformers "
                "fuses each layer's experts into one tensor while its published files hold one per expert, which the "
                "job's sharded loader does not convert, and the memory plan counts dense layers only")
    return None


# The ids config.json gives the embedding's rows for: nn.Embedding asserts padding_idx < num_embeddings as the model
# is built ("Padding_idx must be within num_embeddings"), and a bos/eos id past the rows indexes past the embedding
# at the first generated or packed token.
TOKEN_ID_FIELDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def token_id_problem(raw: dict) -> str | None:
    """Why config.json's pad/bos/eos ids do not fit its vocab_size (an eos_token_id may be a list), or None."""
    vocab_size = raw.get("vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
        return None
    for field in TOKEN_ID_FIELDS:
        value = raw.get(field)
        for token_id in value if isinstance(value, list) else [value]:
            if isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= vocab_size:
                return (f"its config.json's {field} {token_id} is not below its vocab_size {vocab_size}, so the "
                        "embedding has no row for it (transformers refuses to build such a model)")
    return None


# Per-layer lists every transformers config validates against num_hidden_layers (PreTrainedConfig.validate_layer_type).
PER_LAYER_FIELDS = ("layer_types", "mlp_layer_types")


def per_layer_problem(raw: dict) -> str | None:
    """Why a per-layer list of config.json does not give one entry per layer, or None: transformers refuses to make
    the config (the check, without its seconds of imports)."""
    layers = raw.get("num_hidden_layers")
    for field in PER_LAYER_FIELDS:
        value = raw.get(field)
        if isinstance(value, list) and isinstance(layers, int) and not isinstance(layers, bool) and len(value) != layers:
            return (f"its config.json's {field} has {len(value)} entries for its num_hidden_layers {layers}, and "
                    "transformers refuses a config without one per layer")
    return None


def _first_line(error: BaseException) -> str:
    """A library's exception as one bounded line, no traceback: its type and its message's lines joined
    (huggingface_hub's StrictDataclassClassValidationError puts the validator on its first line, the cause on the
    second)."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return f"{type(error).__name__}: {message[:300]}" if message else type(error).__name__


def check_config_dict(raw: Any, what: str):
    """config.json (a dict read from storage, untrusted) as the transformers config the job would build, after the
    checks that need no model (see the module docstring)."""
    check_raw(raw, what)
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = raw["model_type"]
    if model_type not in CONFIG_MAPPING_NAMES:
        raise _refuse(what, remote_code.unknown_model_type(model_type, raw))
    fields = {key: value for key, value in structure.without_structure(raw).items() if key != "model_type"}
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except Exception as error:  # noqa: BLE001 - any library's refusal of a value (a strict dataclass's validator too)
        raise _refuse(what, f"its config.json does not make a {model_type} config ({_first_line(error)})") from None
    check_config(config, what)
    return config


def check_config(config, what: str) -> None:
    """The checks of a transformers config that need no model: a decoder-only, dense, text-only causal LM."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = config.model_type
    wrapped = [name for name in MULTIMODAL_FIELDS if getattr(config, name, None) is not None]
    inner = getattr(getattr(config, "text_config", None), "model_type", None)
    if (why := kind_problem(model_type, bool(getattr(config, "is_encoder_decoder", False)), wrapped, inner,
                            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES)) is not None:
        raise _refuse(what, why)
    if (why := head_problem(config, set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()))) is not None:
        raise _refuse(what, why)
    if (why := family_problem(config, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)) is not None:
        raise _refuse(what, why)
    if (why := mixer_problem(model_type, lambda name: getattr(config, name, None))) is not None:
        raise _refuse(what, why)


def head_problem(config, causal_classes: set[str]) -> str | None:
    """Why config.json's `architectures` (the classes save_pretrained wrote it from) are not a causal LM: a reward
    model or classifier (TRL's reward trainer saves Qwen2ForSequenceClassification with num_labels 1) has a score head
    of num_labels outputs and no lm_head, so AutoModelForCausalLM would build an lm_head the files do not hold. None
    when they are one (or are not given: the model_type then decides)."""
    names = getattr(config, "architectures", None)
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(name, str) for name in names):
        return None
    if any(name in causal_classes or name.endswith(CAUSAL_SUFFIXES) for name in names):
        return None
    labels = getattr(config, "num_labels", None)
    kind = (f"a reward model's or classifier's head (a score head of num_labels {labels}, no lm_head)"
            if any(name.endswith(HEAD_SUFFIXES) for name in names) else "a model without the lm_head the job trains")
    return (f"its config.json's architectures is {', '.join(names)[:200]}: {kind}, not a causal LM; give the base "
            "model it was fine-tuned from (a *ForCausalLM checkpoint)")


def family_problem(config, causal_classes: dict[str, Any]) -> str | None:
    """Why config.json's `architectures` and its model_type disagree, or None: architectures naming only causal LMs
    of other model types (MixtralForCausalLM over model_type llama, a hand-edited file) that AutoModelForCausalLM,
    which goes by model_type, would silently not build. A class transformers does not list is left alone."""
    names = getattr(config, "architectures", None)
    own = causal_classes.get(config.model_type)
    others = {name for model_type, name in causal_classes.items() if model_type != config.model_type}
    if not isinstance(names, (list, tuple)) or not names or not isinstance(own, str) or own in names:
        return None
    if not all(isinstance(name, str) and name in others for name in names):
        return None
    return (f"its config.json's architectures is {', '.join(names)[:200]}, while its model_type "
            f"{config.model_type} builds {own}: one of the two was edited; give the config.json save_pretrained "
            "wrote")


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered while active is moved to the meta device as it is registered (the way accelerate's
    init_empty_weights(include_buffers=False) does it: big_modeling.init_on_device), so a module's own initialisation
    of it costs nothing; buffers stay where their module computes them, on the CPU, with their values."""
    from torch import nn

    register = nn.Module.register_parameter

    def on_meta(module, name, parameter):
        register(module, name, parameter)
        # One already on meta stays the same object: tying the lm_head to the embedding registers the embedding's.
        if parameter is not None and not parameter.is_meta:
            registered = module._parameters[name]
            attributes = {**registered.__dict__, "requires_grad": registered.requires_grad}
            module._parameters[name] = type(registered)(registered.to("meta"), **attributes)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def build(config, what: str):
    """The Hugging Face model of `config` (a transformers config) as the job trains it: fp32, parameters on the meta
    device, buffers computed; refused (ValueError naming `what`) unless the job can shard, load and train it."""
    import torch
    from transformers import AutoModelForCausalLM

    check_config(config, what)
    with parameters_on_meta():
        try:
            lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        except Exception as error:  # noqa: BLE001 - any library's refusal while building: a value the model's code
            # looks up or divides by (hidden_act, rope_scaling's rope_type, a head count), torch's asserts (an
            # nn.Embedding's padding_idx past its rows): the job's build fails the same way on every rank
            raise _refuse(what, f"its config.json does not build a {config.model_type} model "
                                f"({_first_line(error)})") from None
    check_model(lm, what)
    return lm


def check_model(lm, what: str) -> None:
    """The built model's layout against what sharding, loading and the loss rely on."""
    from torch import nn

    kind = type(lm).__name__
    layers = getattr(getattr(lm, "model", None), "layers", None)
    expected = getattr(lm.config, "num_hidden_layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) != expected:
        raise _refuse(what, f"{kind} does not keep its {expected} decoder layers at model.layers, where the job "
                            "shards them one by one")
    head = getattr(lm, "lm_head", None)
    if not isinstance(getattr(head, "weight", None), nn.Parameter):
        raise _refuse(what, f"{kind} has no lm_head weight, which the job's loss multiplies the hidden states by")
    if any(module is not lm and "Experts" in type(module).__name__ for module in lm.modules()):
        raise _refuse(what, f"{kind} has mixture-of-experts layers, which the job's loader and memory plan do not "
                            "handle")
    try:
        structure.record(lm)
    except ValueError as error:
        raise _refuse(what, f"{kind}: {error}, which the job's plan counts as one layer times the layers") from None
    persistent = set(lm.state_dict())
    computed = [name for name, buffer in lm.named_buffers() if name not in persistent and buffer.is_meta]
    if computed:
        raise _refuse(what, f"{kind} has buffers that are neither in its weights nor computed when it is built "
                            f"({', '.join(computed)})")


def gate(raw: Any, what: str) -> dict:
    """The gate at preview: `raw` (a config.json as a dict) builds, on the meta device, into a model the job trains;
    ValueError naming `what` (config key 'trainModelId': <id>) otherwise. Returns `raw` with the built model's
    structure attached (workload.model.structure), which the preview's plan then counts."""
    return structure.attach(raw, build(check_config_dict(raw, what), what))
