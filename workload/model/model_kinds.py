"""What kind of model a config.json's model_type is (a causal LM, an encoder, an encoder-decoder, a multimodal
wrapper), read from transformers' source text without importing it (seconds, with torch), so that the model gate's
refusals that depend on config.json alone come before the imports, in the gate's own words
(workload.model.compatibility.kind_problem, which the gate's check_config also says after the imports).

Read with ast, as workload.model.activations reads ACT2CLS:
- models/auto/modeling_auto.py: MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and MODEL_FOR_MASKED_LM_MAPPING_NAMES, each an
  `OrderedDict([(model_type, class name), ...])` literal (AutoModelForCausalLM goes by model_type: a type that is no
  key raises "Unrecognized configuration class"); tests/unit/test_model_kinds.py holds both equal to the imported
  mappings.
- models/<type>/configuration_<type>.py: the config class whose `model_type = "<type>"`; its class-level
  `is_encoder_decoder` default (T5Config's `is_encoder_decoder: bool = True`; PreTrainedConfig's is False) and its
  `sub_configs_defaults` (the vision_config / audio_config / text_config it builds when config.json gives none, e.g.
  Qwen2VLConfig's Qwen2VLTextConfig, model_type qwen2_vl_text, or LlavaConfig's SubConfigSpec(model_type="llama")).
Where a class inherits from another config class, or a file or literal is not found, `ConfigClass` is None and
nothing is decided here (the gate decides after its imports).

Standard library only.
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from workload.model import transformers_source

MAPPINGS_SOURCE = "models/auto/modeling_auto.py"
CAUSAL_TABLE, MASKED_TABLE = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"
BASE_CONFIG = "PreTrainedConfig"


@functools.lru_cache(maxsize=4)
def mapping(name: str) -> dict[str, str] | None:
    """An `OrderedDict([("type", "Class"), ...])` table of modeling_auto.py by name; None where not found."""
    tree = transformers_source.tree(MAPPINGS_SOURCE)
    for node in tree.body if tree is not None else ():
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Call) and node.value.args
                and isinstance(node.value.args[0], ast.List)):
            pairs = [element.elts for element in node.value.args[0].elts if isinstance(element, ast.Tuple)]
            table = {key.value: value.value for key, value in pairs
                     if isinstance(key, ast.Constant) and isinstance(value, ast.Constant)}
            return table or None
    return None


@dataclass(frozen=True)
class ConfigClass:
    """What a model_type's config class builds when config.json does not say."""

    is_encoder_decoder: bool
    sub_configs: tuple[str, ...]
    text_model_type: str | None
    text_fixed: bool
    """text_config's default is a class of the file (Qwen2VLTextConfig), which a dict without model_type builds."""
    names: frozenset[str]
    """Every name the class's body writes (strings, attributes, fields, keywords): a sub-config it may build."""


def _constant_model_type(body: list[ast.stmt]) -> str | None:
    for node in body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model_type" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def _field(body: list[ast.stmt], name: str) -> ast.expr | None:
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _sub_config_type(value: ast.expr, classes: dict[str, ast.ClassDef]) -> str | None:
    """The model_type a sub_configs_defaults entry builds: a class of the same file, or SubConfigSpec(model_type=...)
    / SubConfigSpec(config_class=<a class of the file>)."""
    if isinstance(value, ast.Name):
        return _constant_model_type(classes[value.id].body) if value.id in classes else None
    if isinstance(value, ast.Call):
        keywords = {keyword.arg: keyword.value for keyword in value.keywords}
        if isinstance(given := keywords.get("model_type"), ast.Constant) and isinstance(given.value, str):
            return given.value
        if isinstance(given := keywords.get("config_class"), ast.Name):
            return _sub_config_type(given, classes)
    return None


@functools.lru_cache(maxsize=256)
def config_class(model_type: str) -> ConfigClass | None:
    """The config class of `model_type` as its source declares it (see the module docstring); None: cannot tell."""
    folder = model_type.replace("-", "_")
    tree = transformers_source.tree(f"models/{folder}/configuration_{folder}.py")
    if tree is None:
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    found = next((node for node in classes.values() if _constant_model_type(node.body) == model_type), None)
    if found is None or [getattr(base, "id", None) for base in found.bases] != [BASE_CONFIG]:
        return None
    names = frozenset(_names(found))
    encoder_decoder = _field(found.body, "is_encoder_decoder")
    if (encoder_decoder is not None and not isinstance(encoder_decoder, ast.Constant)) or (
            encoder_decoder is None and "is_encoder_decoder" in names):
        return None  # set in __post_init__ or passed on to the base class: not decided from the text
    defaults = _field(found.body, "sub_configs_defaults")
    if defaults is not None and not isinstance(defaults, ast.Dict):
        return None
    entries = {key.value: value for key, value in zip(defaults.keys, defaults.values)
               if isinstance(key, ast.Constant)} if defaults is not None else {}
    text = entries.get("text_config")
    text_type = _sub_config_type(text, classes) if text is not None else None
    if text is not None and text_type is None:
        return None
    return ConfigClass(bool(encoder_decoder.value) if encoder_decoder is not None else False,
                       tuple(sorted(entries)), text_type, isinstance(text, ast.Name), names)


def _names(node: ast.AST):
    for each in ast.walk(node):
        if isinstance(each, ast.Constant) and isinstance(each.value, str):
            yield each.value
        elif isinstance(each, ast.Attribute):
            yield each.attr
        elif isinstance(each, ast.Name):
            yield each.id
        elif isinstance(each, ast.keyword) and each.arg:
            yield each.arg
