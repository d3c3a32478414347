"""Whether loading a model or a tokenizer directory would need code that transformers does not ship (a repository's
own Python, named by auto_map), decided from its JSON files and transformers' own source text, without importing
transformers (seconds, with torch): the job never runs such code (trust_remote_code is never passed), so transformers
refuses it after the imports, and the checks before them refuse it here in well under a second, in one line.

transformers' rule (5.x, as 4.4x): a config.json is loaded by transformers' own class when its model_type is a key of
CONFIG_MAPPING_NAMES (models/auto/auto_mappings.py, configuration_auto.py); otherwise, auto_map or not, AutoConfig
raises (its auto_map needs trust_remote_code=True; without one the model_type is unrecognized). A tokenizer directory
whose tokenizer_config.json has an auto_map "AutoTokenizer" entry is loaded by transformers' own class when its
tokenizer_class (or that name with "Fast") is one transformers has (models/auto/tokenization_auto.py,
tokenizer_class_from_name: TOKENIZER_MAPPING_NAMES's classes, or a name the transformers module exports) or the
directory's config.json is of a model_type it knows (`type(config) in TOKENIZER_MAPPING`); otherwise AutoTokenizer
asks for trust_remote_code=True ("contains custom code which must be executed").

The names are looked up in transformers' source files as text: a name counted as known that transformers does not
have only leaves the refusal to transformers after the imports, and one it has is always found (each is written
quoted in those files, or as `class Name(` in a models/*/tokenization_*.py). Where transformers is not installed, or
its files are not where 5.x keeps them, nothing is refused here.

Standard library only.
"""
from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
from typing import Any

from workload import cli
from workload.model import transformers_source

# The files of transformers that hold its model_types and its tokenizer classes' names (5.x; 4.x kept the
# model_types in configuration_auto.py).
MODEL_TYPE_SOURCES = ("models/auto/auto_mappings.py", "models/auto/configuration_auto.py")
TOKENIZER_CLASS_SOURCES = ("models/auto/tokenization_auto.py", "__init__.py")
TOKENIZER_CONFIG_FILE, CONFIG_FILE = "tokenizer_config.json", "config.json"
NO_CUSTOM_CODE = "the job does not run a repository's own code (trust_remote_code is off)"


def _quoted_in(name: str, sources: tuple[str, ...]) -> bool | None:
    """Whether `name` is written quoted in one of transformers' `sources`; None when none of them could be read."""
    texts = [text for text in (transformers_source.text(relative) for relative in sources) if text]
    if not texts:
        return None
    return any(f'"{name}"' in text or f"'{name}'" in text for text in texts)


def transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def known_model_type(model_type: str) -> bool | None:
    """Whether transformers has a config class of its own for `model_type` (None: cannot tell here)."""
    if (quoted := _quoted_in(model_type, MODEL_TYPE_SOURCES)) is None:
        return None
    folder = model_type.replace("-", "_")
    return quoted or os.path.isdir(os.path.join(transformers_source.package(), "models", folder))


def unknown_model_type(model_type: str, raw: dict) -> str:
    """The refusal's words for a config.json whose model_type transformers does not know (after the flag)."""
    custom = " (its config.json's auto_map points at custom code, which the job does not run)" if raw.get(
        "auto_map") else ""
    return f"model_type {cli.shown(model_type)} is not one transformers {transformers_version()} knows{custom}"


def known_tokenizer_class(name: str) -> bool | None:
    """Whether transformers has a tokenizer class `name` (or `name` without or with "Fast"): None: cannot tell."""
    base = name.removesuffix("Fast")
    names = (base, base + "Fast")
    package = transformers_source.package()
    if (quoted := any(_quoted_in(each, TOKENIZER_CLASS_SOURCES) for each in names)) or package is None:
        return True if quoted else None
    if not transformers_source.text(TOKENIZER_CLASS_SOURCES[0]):
        return None
    for path in glob.glob(os.path.join(package, "models", "*", "tokenization_*.py")):
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError):
            return None
        if any(f"class {each}(" in text or f"{each} = " in text for each in names):
            return True
    return False


def _json_file(directory: str, name: str) -> Any:
    """A small JSON file of `directory` (workload.run.input_files bounded it first), or None when absent or not JSON:
    transformers' own load names a file it cannot read."""
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError, RecursionError):
        return None


def _class_reference(auto_map: Any) -> str | None:
    """The class an auto_map names for AutoTokenizer: [slow, fast] under "AutoTokenizer" (or the list alone, an
    older format), as tokenization_auto.py reads it."""
    entry = auto_map if isinstance(auto_map, (list, tuple)) else (
        auto_map.get("AutoTokenizer") if isinstance(auto_map, dict) else None)
    entry = entry if isinstance(entry, (list, tuple)) else [entry]
    return next((each for each in reversed(entry) if isinstance(each, str) and each), None)


def tokenizer_problem(directory: str) -> str | None:
    """Why AutoTokenizer would need custom code to load the tokenizer in `directory` (see the module), or None."""
    config = _json_file(directory, TOKENIZER_CONFIG_FILE)
    if not isinstance(config, dict) or (reference := _class_reference(config.get("auto_map"))) is None:
        return None
    model = _json_file(directory, CONFIG_FILE)
    model_type = model.get("model_type") if isinstance(model, dict) else None
    if isinstance(model_type, str) and model_type and known_model_type(model_type) is not False:
        return None  # transformers' own tokenizer class for the model_type is used; the auto_map is not
    tokenizer_class = config.get("tokenizer_class")
    if isinstance(tokenizer_class, str) and tokenizer_class and known_tokenizer_class(tokenizer_class) is not False:
        return None
    named = (f"its tokenizer_class {cli.shown(tokenizer_class)} is not a class transformers {transformers_version()} "
             "has" if tokenizer_class else "it names no tokenizer_class")
    return (f"its {TOKENIZER_CONFIG_FILE}'s auto_map names custom code ({cli.shown(reference)}) and {named}; "
            f"{NO_CUSTOM_CODE}")
