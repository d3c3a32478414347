"""config.json read as transformers reads it (PreTrainedConfig._dict_from_json_file): UTF-8 JSON, then its tagged
floats decoded. transformers 5 writes an infinite or NaN value (Falcon-H1's time_step_limit) as
{"__float__": "Infinity"} (PreTrainedConfig._encode_special_floats), which a plain json.load leaves a dict, so a model
the job exported could not be fed back as --model_id. Bounded first: a config.json from storage is untrusted input,
and the largest published ones are a few KiB.

Standard library only (the Pulumi program reads configs through it).
"""
from __future__ import annotations

import json
from typing import Any

# A MiB is room for any published config.json, and a bound on what json reads.
MAX_CONFIG_BYTES = 1 << 20
FLOAT_TAG = "__float__"  # transformers.configuration_utils._FLOAT_TAG_KEY
FLOAT_VALUES = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


class TooLarge(ValueError):
    """More bytes than any config.json has."""


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
    """A config.json's text as transformers reads it; TooLarge over MAX_CONFIG_BYTES, ValueError (JSONDecodeError,
    UnicodeDecodeError) when it is not UTF-8 JSON."""
    if len(data) > MAX_CONFIG_BYTES:
        raise TooLarge(f"{len(data):,} bytes; a model's config.json is a few KiB (allowed: at most "
                       f"{MAX_CONFIG_BYTES:,})")
    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    return decode_floats(json.loads(text))


def load(path: str) -> Any:
    """config.json at `path` (see loads): its size checked before a byte is read."""
    import os

    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise TooLarge(f"{size:,} bytes; a model's config.json is a few KiB (allowed: at most {MAX_CONFIG_BYTES:,})")
    with open(path, "rb") as file:
        return loads(file.read(MAX_CONFIG_BYTES + 1))
