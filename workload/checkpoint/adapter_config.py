"""A lora/qlora checkpoint's adapter_config.json, read as untrusted input before torch, transformers or PEFT are
imported: `workload.export` builds PEFT's LoraConfig from it (r, lora_alpha, target_modules) and, with --merge, loads
the base it names. So its values pass the flags' own rule (workload.model.adapters.check_settings: --lora_rank from 1 to
1024, --lora_alpha, --lora_dropout, --lora_targets) and its base the rule of every source a checkpoint names
(untrusted_values.source_problem: no credentials, no token, no control character), in milliseconds, not after the
seconds of imports; a refusal is one CheckpointRefused line naming CHECKPOINT, the file and the key, quoting no
value that may be a secret and no Python exception.

The keys are those PEFT's LoraConfig writes (peft/tuners/lora/config.py: r, lora_alpha, lora_dropout,
target_modules, base_model_name_or_path) and that the job's export writes (adapter_export.save_adapter_directory).

Standard library only.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

from workload.checkpoint.file_checks import MAX_JSON_BYTES, CheckpointRefused, read_regular

ADAPTER_CONFIG = "adapter_config.json"  # peft.utils.constants.CONFIG_NAME
# The keys the export reads, each with the flag whose rule it follows (a key absent where PEFT has a default:
# lora_dropout 0.0).
REQUIRED_KEYS = ("r", "lora_alpha", "target_modules")
FLAG_KEYS = {"--lora_rank": "r", "--lora_alpha": "lora_alpha", "--lora_dropout": "lora_dropout",
             "--lora_targets": "target_modules"}


def check_adapter_config(checkpoint: str, directory: str) -> dict[str, Any]:
    """adapter_config.json of `directory` (the local copy of CHECKPOINT) as a dict, refused (CheckpointRefused naming
    CHECKPOINT, the file and the key) when it is not JSON, not an object, lacks a key the export reads, holds a value
    the job's flags refuse, or names a base that is no plain source."""
    from workload import cli
    from workload.checkpoint.untrusted_values import source_problem
    from workload.model import adapters

    where = f"CHECKPOINT {checkpoint}: its file {ADAPTER_CONFIG}"
    try:
        config = json.loads(read_regular(os.path.join(directory, ADAPTER_CONFIG), MAX_JSON_BYTES))
    except CheckpointRefused:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CheckpointRefused(f"{where} is not JSON (UTF-8); PEFT's save_pretrained writes a JSON object") from None
    if not isinstance(config, dict):
        raise CheckpointRefused(f"{where} holds a JSON {_json_kind(config)}, not an object (PEFT's LoraConfig as "
                                "save_pretrained writes it)")
    if missing := [key for key in REQUIRED_KEYS if key not in config]:
        raise CheckpointRefused(f"{where} has no {', '.join(missing)}; the job's export writes "
                                f"{', '.join(REQUIRED_KEYS)}")
    targets = config["target_modules"]
    if not (isinstance(targets, list) and targets and all(isinstance(name, str) for name in targets)):
        raise CheckpointRefused(f"{where}: target_modules is {cli.shown(targets)}; allowed: a list of a decoder "
                                "layer's linear layers' names, such as [\"q_proj\", \"v_proj\"]")
    try:
        adapters.check_settings("lora", config["r"], config["lora_alpha"], config.get("lora_dropout", 0.0),
                                ",".join(targets))
    except ValueError as error:  # "--lora_rank must be ..., got X": the rule's words, the file's key, the value shown
        flag, _, rule = str(error).partition(" ")  # as cli.shown shows it (a megabyte or a token only by length)
        key = FLAG_KEYS.get(flag, flag)
        value = targets if key == "target_modules" else config.get(key, 0.0)
        raise CheckpointRefused(f"{where}: {key} is {cli.shown(value)}; the job's {flag} "
                                f"{re.split(r'[,;] got ', rule, maxsplit=1)[0]}") from None
    base = config.get("base_model_name_or_path")
    if base is not None and base != "" and (problem := source_problem(base)) is not None:
        raise CheckpointRefused(f"{where}: base_model_name_or_path {problem}")
    return config


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
