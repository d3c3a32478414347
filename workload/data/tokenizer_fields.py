"""The fields of tokenizer_config.json that AutoTokenizer.from_pretrained reads with a type, checked before transformers
is imported: one rule, one table, for a local --tokenizer directory (workload.run.preflight, naming --tokenizer) and a
Hub tokenizer at preview and in the job's driver (tokenizer_size.check_json_files, infra/preview/chat_template.py).

What transformers 5.x does with each (tokenization_utils_base.py, PreTrainedTokenizerBase._from_pretrained and
__init__), where a wrong type fails the load seconds into the imports, or on the cluster after the nodes bill:
- added_tokens_decoder: `for idx, token in ....items()`, `AddedToken(**token)` then `int(idx)`: an object whose keys
  int() reads and whose values are objects of AddedToken's arguments (tokenizers' AddedToken: `content` a string;
  single_word, lstrip, rstrip, normalized, special booleans; a key it does not know is ignored with a warning).
- chat_template: a string, or a list whose entries `template["name"]: template["template"]` are read (a mapping is
  neither: jinja2 then fails with "Can't compile non template nodes").
- model_max_length: compared with lengths (`len(ids) > self.model_max_length`): a number, or null (VERY_LARGE_INTEGER).
- padding_side, truncation_side: __init__ raises ValueError unless "right" or "left".
- the special tokens (SPECIAL_TOKENS_ATTRIBUTES): __init__ raises TypeError unless a str or an AddedToken (a JSON
  object becomes one only with "__type": "AddedToken", convert_added_tokens), or null.

Standard library only.
"""
from __future__ import annotations

import json
import os

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
SIDES = ("right", "left")
# What is read of a local tokenizer_config.json: as tokenizer_size.MAX_TOKENIZER_BYTES (which imports this module).
MAX_CONFIG_BYTES = 64 << 20
# The most of a bad key or value a refusal quotes.
SHOWN = 40


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text[:SHOWN] + ("..." if len(text) > SHOWN else "")


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _added_token_problem(value) -> str | None:
    if not isinstance(value, dict):
        return f"is {_kind(value)}"
    if "content" in value and not isinstance(value["content"], str):
        return f"has content {_kind(value['content'])}, not a string"
    for name in ADDED_TOKEN_FLAGS:  # other keys AddedToken ignores ("Ignored unknown kwarg option")
        if name in value and not isinstance(value[name], bool):
            return f"has {name} {_kind(value[name])}, not true or false"
    return None


def _integer_key(key: str) -> bool:
    try:
        int(key)  # transformers' own reading of the key
    except ValueError:
        return False
    return True


def problem(config: dict) -> str | None:
    """Why `config` (tokenizer_config.json's object) has a field transformers cannot read, naming the field and what
    it allows (after "its tokenizer_config.json "), or None."""
    decoder = config.get("added_tokens_decoder")
    if decoder is not None:
        if not isinstance(decoder, dict):
            return f"field added_tokens_decoder is {_kind(decoder)}; allowed: an object of token ids to tokens"
        for key, value in decoder.items():
            if not _integer_key(key):
                return (f"field added_tokens_decoder has the key {_shown(key)}, which is not a token id (transformers "
                        "reads each key with int()); allowed: integer strings such as \"151643\"")
            if (why := _added_token_problem(value)) is not None:
                return (f"field added_tokens_decoder's entry {_shown(key)} {why}; allowed: an object with a string "
                        "\"content\" and AddedToken's true/false flags")
    template = config.get("chat_template")
    if template is not None and not isinstance(template, str) and not (isinstance(template, list) and all(
            isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str)
            for entry in template)):
        return (f"field chat_template is {_kind(template)}" + (" that is not all {name, template} strings"
                                                               if isinstance(template, list) else "")
                + "; allowed: a string, or a list of {\"name\": ..., \"template\": ...} strings")
    length = config.get("model_max_length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, float))):
        return f"field model_max_length is {_kind(length)} ({_shown(length)}); allowed: a number, or null"
    for side in ("padding_side", "truncation_side"):
        if side in config and config[side] not in SIDES:
            return f"field {side} is {_shown(config[side])}; allowed: \"right\" or \"left\""
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if value is None or isinstance(value, str):
            continue
        if not (isinstance(value, dict) and value.get("__type") == "AddedToken"
                and _added_token_problem({k: v for k, v in value.items() if k != "__type"}) is None):
            return (f"field {name} is {_kind(value)}; allowed: a string, null, or an object with \"__type\": "
                    "\"AddedToken\" and a string \"content\"")
    return None


def directory_problem(directory: str) -> str | None:
    """problem() of a local tokenizer directory's tokenizer_config.json (after "{flag} {name}: "), or None: no such
    file, or one the other checks refuse in their own words (not JSON, too large, not a regular file)."""
    from workload import user_files

    try:
        config = json.loads(user_files.read_bytes(os.path.join(directory, TOKENIZER_CONFIG_FILE),
                                                  MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError, user_files.Refused):
        return None
    if not isinstance(config, dict):  # transformers reads it with .get (tokenization_utils_base from_pretrained)
        return (f"its {TOKENIZER_CONFIG_FILE} is a JSON {type(config).__name__}, not the JSON object of settings "
                "transformers reads; allowed: an object such as {\"tokenizer_class\": \"PreTrainedTokenizerFast\"}")
    if (why := problem(config)) is None:
        return None
    return f"its {TOKENIZER_CONFIG_FILE} {why}"
