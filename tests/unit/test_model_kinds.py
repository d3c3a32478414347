"""The model gate's kind refusals (encoder-decoder, multimodal wrapper, encoder, no causal-LM class) decided from
config.json and transformers' source text before the imports (workload/model/model_kinds.py,
compatibility.raw_kind_problem): the tables read from source are transformers' own, every refusal made there is the
one the gate makes after its imports, in the same words, and where the source cannot tell, nothing is refused early."""
from __future__ import annotations

import copy

import pytest

from workload.model import compatibility, model_kinds, transformers_source

WHAT = "config key 'trainModelId': acme/m"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 256}
# config.json shapes besides the bare model_type: the sub-configs that make a wrapper, given or built by the class.
VARIANTS = ({}, {"vision_config": {}}, {"text_config": {}}, {"vision_config": {}, "text_config": {"model_type": "llama"}},
            {"audio_config": {}, "text_config": {"model_type": "qwen2"}}, {"is_encoder_decoder": False})


def test_the_tables_read_from_source_are_transformers_own():
    from transformers.models.auto import modeling_auto

    assert model_kinds.mapping(model_kinds.CAUSAL_TABLE) == dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert model_kinds.mapping(model_kinds.MASKED_TABLE) == dict(modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def test_every_early_refusal_is_the_gates_own_in_its_words():
    """Over every model_type transformers has a config class for: where config.json and the source decide, the
    transformers config the gate builds is refused by check_config with the same line; nothing accepted is refused."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    decided, kinds = 0, set()
    for model_type in CONFIG_MAPPING_NAMES:
        for extra in VARIANTS:
            early = compatibility.raw_kind_problem(copy.deepcopy({"model_type": model_type, **extra}), model_type)
            if early is None:
                continue
            try:
                config = AutoConfig.for_model(model_type, **copy.deepcopy(extra))
            except Exception:  # noqa: BLE001 - the class refuses these fields: check_raw refused them first anyway
                continue
            decided += 1
            kinds.add(early.split(" is ", 1)[1][:12])
            with pytest.raises(ValueError) as refused:
                compatibility.check_config(config, WHAT)
            assert str(refused.value) == f"{WHAT}: {early}; {compatibility.ALLOWED}", (model_type, extra)
    # the source reading works at all: hundreds decided, of every kind
    assert decided > 1000 and len(kinds) == 4, (decided, kinds)


@pytest.mark.parametrize(("model_type", "extra", "said"), [
    ("llava_next", {"vision_config": {"model_type": "clip_vision_model"}, "text_config": {"model_type": "mistral"}},
     "llava_next is a multimodal model (vision_config) around a mistral language model"),
    ("qwen3_vl", {"vision_config": {"depth": 2}}, "qwen3_vl is a multimodal model (vision_config) around a "
                                                  "qwen3_vl_text language model"),
    ("mt5", {}, "mt5 is an encoder-decoder (sequence-to-sequence) model"),
    ("deberta-v2", {}, "deberta-v2 is an encoder (a masked-language model such as BERT)"),
    ("vit", {}, "vit is not a causal LM (AutoModelForCausalLM has no class for it)"),
    ("llama", {"vision_config": {"hidden_size": 8}}, "llama is a multimodal model (vision_config), not"),
])
def test_check_raw_refuses_the_kind_before_the_imports(model_type, extra, said):
    with pytest.raises(ValueError) as refused:
        compatibility.check_raw({"model_type": model_type, **TINY, **extra}, WHAT)
    assert str(refused.value).startswith(f"{WHAT}: {said}"), str(refused.value)
    assert str(refused.value).endswith(compatibility.ALLOWED) and "\n" not in str(refused.value)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "phi3", "olmo2"])
def test_the_decoders_the_gate_takes_pass(model_type):
    assert compatibility.raw_kind_problem({"model_type": model_type, **TINY}, model_type) is None


CONFIG_SOURCE = '''
class AcmeTextConfig(PreTrainedConfig):
    model_type = "acme_text"

class AcmeConfig(PreTrainedConfig):
    model_type = "acme"
    sub_configs_defaults = {"vision_config": AcmeTextConfig, "text_config": AcmeTextConfig}
{extra}
'''


def _package(tmp_path, monkeypatch, extra: str = "", mappings: bool = True):
    models = tmp_path / "models"
    (models / "acme").mkdir(parents=True, exist_ok=True)
    (models / "acme" / "configuration_acme.py").write_text(CONFIG_SOURCE.replace("{extra}", extra))
    (models / "auto").mkdir(exist_ok=True)
    if mappings:
        (models / "auto" / "modeling_auto.py").write_text(
            'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("llama", "LlamaForCausalLM")])\n'
            'MODEL_FOR_MASKED_LM_MAPPING_NAMES = OrderedDict([("bert", "BertForMaskedLM")])\n')
    monkeypatch.setattr(transformers_source, "package", lambda: str(tmp_path))
    for module, name in ((transformers_source, "_text"), (transformers_source, "_tree"), (model_kinds, "mapping"),
                         (model_kinds, "config_class")):  # uncached, so each test reads its own files
        function = getattr(module, name)
        monkeypatch.setattr(module, name, getattr(function, "__wrapped__", function))


def test_a_class_read_from_its_source(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch)
    assert compatibility.raw_kind_problem({"model_type": "acme", "vision_config": {}}, "acme").startswith(
        "acme is a multimodal model (vision_config) around a acme_text language model")


def test_what_the_class_decides_in_code_is_left_to_the_gate(tmp_path, monkeypatch):
    # is_encoder_decoder set in __post_init__, or a vision_config the class may build that config.json lacks
    _package(tmp_path, monkeypatch, "    def __post_init__(self):\n        self.is_encoder_decoder = True\n")
    assert compatibility.raw_kind_problem({"model_type": "acme", "vision_config": {}}, "acme") is None
    _package(tmp_path, monkeypatch)
    assert compatibility.raw_kind_problem({"model_type": "acme"}, "acme") is None
    # text_config given with another model_type than the file's own class: the class's code decides which wins
    assert compatibility.raw_kind_problem({"model_type": "acme", "vision_config": {},
                                           "text_config": {"model_type": "llama"}}, "acme") is None


def test_without_the_tables_nothing_is_refused_early(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch, mappings=False)
    assert compatibility.raw_kind_problem({"model_type": "acme", "vision_config": {}}, "acme") is None
    monkeypatch.setattr(transformers_source, "package", lambda: None)
    assert compatibility.raw_kind_problem({"model_type": "bert"}, "bert") is None
