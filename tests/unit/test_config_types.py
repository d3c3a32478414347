"""workload/model/config_types.py's table held to transformers' own config classes: every field it types is typed so by
every causal-LM config class that declares it (the table's kinds are their union), the table leaves out no field that
many classes type simply, and on a table of values a field is refused exactly where the model's own strict class
refuses the value's type (huggingface_hub's StrictDataclassFieldValidationError). And every reader of config.json
(workload/model/config_json.py) applies it."""
from __future__ import annotations

import types
import typing

import pytest

from workload.model import config_json
from workload.model.config_types import FIELD_TYPES, type_problem

SIMPLE = {bool: "bool", int: "int", float: "float", type(None): "None"}


def _kinds(annotation) -> set[str] | None:
    """The simple kinds of a field's annotation (bool, int, float, None), or None when it has any other."""
    if annotation in SIMPLE:
        return {SIMPLE[annotation]}
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        parts = [_kinds(part) for part in typing.get_args(annotation)]
        return None if any(part is None for part in parts) else set().union(*parts)
    return None


@pytest.fixture(scope="module")
def causal_lm_fields() -> dict[str, list[set[str] | None]]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    fields: dict[str, list[set[str] | None]] = {}
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        try:
            declared = getattr(CONFIG_MAPPING[model_type], "__dataclass_fields__", None)
        except KeyError:  # a causal LM whose config is another model type's
            continue
        for name, field in (declared or {}).items():
            fields.setdefault(name, []).append(_kinds(field.type))
    return fields


def test_each_typed_field_is_typed_so_by_every_class_that_declares_it(causal_lm_fields):
    for field, kinds in FIELD_TYPES.items():
        declared = causal_lm_fields.get(field)
        assert declared, f"{field}: no causal-LM config class of transformers declares it"
        assert None not in declared, f"{field}: a class types it with more than bool, int, float and None"
        union = set().union(*declared)
        assert union == set(kinds.split("|")), f"{field}: the table says {kinds}, transformers' classes {union}"


def _validated(field: str) -> bool:
    """Whether Qwen2Config (or Llama's, GPT-2's) refuses a list for `field` as of the wrong type."""
    from transformers import AutoConfig

    for model_type in ("qwen2", "llama", "gpt2"):
        config_class = type(AutoConfig.for_model(model_type))
        if field in config_class.__dataclass_fields__:
            try:
                config_class(**{field: [1]})
            except Exception as error:  # noqa: BLE001
                return f"'{field}' expected" in str(error)
            return False
    return True


def test_no_field_that_ten_classes_type_simply_is_left_out(causal_lm_fields):
    missing = sorted(name for name, declared in causal_lm_fields.items()
                     if len(declared) >= 10 and None not in declared and name not in FIELD_TYPES and _validated(name))
    assert not missing, f"fields typed simply by ten or more classes, not in FIELD_TYPES: {missing}"


VALUES = [True, False, 0, 3, 2.5, 1e-06, "false", "3", None, [1], {"a": 1}]
CLASSES = ["qwen2", "llama", "mistral", "gemma2", "gpt2", "phi3", "olmo2"]


@pytest.mark.parametrize("model_type", CLASSES)
def test_a_field_is_refused_exactly_where_the_models_class_refuses_its_type(model_type):
    from transformers import AutoConfig

    config_class = type(AutoConfig.for_model(model_type))
    declared = config_class.__dataclass_fields__
    for field in (name for name in FIELD_TYPES if name in declared):
        for value in VALUES:
            try:
                config_class(**{field: value})
                refused = False
            except Exception as error:  # noqa: BLE001 - a type error is the one compared; others (shapes) are not
                refused = f"'{field}' expected" in str(error)
                if not refused:
                    continue
            ours = type_problem({field: value}) is not None
            # The table is the union over every class: a value some class takes (null) is taken for all.
            if ours:
                assert refused, f"{model_type}.{field}={value!r}: refused here, taken by transformers"
            elif _kinds(declared[field].type) == set(FIELD_TYPES[field].split("|")):  # this class is the union
                assert not refused, f"{model_type}.{field}={value!r}: taken here, transformers refuses its type"


def test_every_reader_of_config_json_refuses_a_field_of_the_wrong_kind():
    with pytest.raises(config_json.Refused, match="its attention_bias is a string; allowed: true or false"):
        config_json.loads('{"model_type": "llama", "attention_bias": "no"}')
    with pytest.raises(config_json.Refused, match="its mlp_bias is an integer; allowed: true or false"):
        config_json.loads('{"model_type": "llava", "text_config": {"model_type": "llama", "mlp_bias": 0}}')
    # A tagged float (transformers' {"__float__": ...}) is the float it stands for; a dict elsewhere is not a config.
    assert config_json.loads('{"model_type": "llama", "router_aux_loss_coef": {"__float__": "Infinity"}, '
                             '"quantization_config": {"use_cache": "x"}}')["router_aux_loss_coef"] == float("inf")
