"""A checkpoint's generation_config.json, checked before torch and transformers are imported: `workload.export` loads
it with GenerationConfig.from_pretrained and writes it into OUT, where every generate() reads it. A value
transformers refuses came out after the seconds of imports, in transformers' words, naming neither the file nor
CHECKPOINT ("`max_new_tokens` must be greater than 0, but is -4."); one that transformers refuses only at generate()
would be exported, and fail whoever samples from the model.

The rules are transformers 5.24's own, read from its code, and nothing more (tests/unit/test_generation_config.py holds
them equal to the real GenerationConfig and generate() on a table of values):
- at load, GenerationConfig.validate's raises (transformers/generation/configuration_utils.py, called by __init__):
  early_stopping a boolean or "never"; max_new_tokens above 0; assistant_ensemble_weight in (0, 1); a known
  cache_implementation (ALL_CACHE_IMPLEMENTATIONS and "paged"); no compile_config (a JSON object is no CompileConfig);
  num_return_sequences above 1 only with sampling or at most num_beams beams; no forced token all suppressed; none of
  generate()'s own arguments (logits_processor, streamer, ...) as a key;
- at generate(), the logits processors' raises, under the conditions GenerationMixin._get_logits_processor builds
  them (transformers/generation/utils.py; generation/logits_process.py): with do_sample, temperature a float above 0
  unless 1.0 (TemperatureLogitsWarper), top_k a whole number above 0 unless 0 (TopKLogitsWarper), top_p at least 0
  when below 1 (TopPLogitsWarper: at or above 1 it is not applied), min_p in [0, 1] (MinPLogitsWarper), typical_p
  above 0 when below 1 (TypicalLogitsWarper); repetition_penalty a float above 0 unless 1.0, sampling or not
  (RepetitionPenaltyLogitsProcessor).
A value of the wrong kind where transformers compares it with a number (a string "5") is refused too: the comparison
raises TypeError there.

Standard library only.
"""
from __future__ import annotations

import json
import os
from typing import Any

GENERATION_CONFIG = "generation_config.json"  # transformers.utils.GENERATION_CONFIG_NAME
# transformers/generation/configuration_utils.py ALL_CACHE_IMPLEMENTATIONS (static, offloaded_static, the deprecated
# static ones, dynamic, offloaded, quantized), and "paged", which validate() adds.
CACHE_IMPLEMENTATIONS = ("static", "offloaded_static", "sliding_window", "hybrid", "hybrid_chunked",
                         "offloaded_hybrid", "offloaded_hybrid_chunked", "dynamic", "offloaded", "quantized", "paged")
# generate()'s arguments that validate() refuses inside a generation config.
GENERATE_ARGUMENTS = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus",
                      "assistant_model", "streamer", "negative_prompt_ids", "negative_prompt_attention_mask")


def _refuses(value: Any, test: Any) -> bool:
    """`test(value)` as transformers evaluates it: a value it cannot compare (a string with a number) raises TypeError
    there, a refusal here."""
    try:
        return bool(test(value))
    except TypeError:
        return True


def _problem(config: dict[str, Any]) -> str | None:
    """Why GenerationConfig(**config) raises in validate() (the words after "generation_config.json: "), or None."""
    get = config.get
    if get("early_stopping") not in (None, True, False, "never"):
        return "early_stopping must be true, false or \"never\""
    if get("max_new_tokens") is not None and _refuses(get("max_new_tokens"), lambda tokens: tokens <= 0):
        return "max_new_tokens must be a number above 0"
    weight = get("assistant_ensemble_weight")
    if weight is not None and _refuses(weight, lambda weight: not 0.0 < weight < 1.0):
        return "assistant_ensemble_weight must be a number above 0 and below 1"
    if get("cache_implementation") is not None and get("cache_implementation") not in CACHE_IMPLEMENTATIONS:
        return f"cache_implementation must be one of {', '.join(CACHE_IMPLEMENTATIONS)}"
    if get("compile_config") is not None:
        return "compile_config must be null (a JSON object is no CompileConfig; pass one to generate())"
    if get("watermarking_config") is not None and not isinstance(get("watermarking_config"), dict):
        return "watermarking_config must be an object or null"
    sequences, beams = get("num_return_sequences"), get("num_beams")
    if sequences is not None and _refuses(sequences, lambda sequences: sequences > 1 and (
            (not get("do_sample")) if beams is None or beams == 1 else sequences > beams)):
        return ("num_return_sequences must be a whole number, above 1 only with do_sample true or num_beams above 1, "
                "and at most num_beams")
    if (why := _forced_and_suppressed(config)) is not None:
        return why
    if present := [key for key in GENERATE_ARGUMENTS if key in config]:
        return f"{present[0]} is an argument of generate(), not of a generation config"
    return None


def _forced_and_suppressed(config: dict[str, Any]) -> str | None:
    suppressed = config.get("suppress_tokens")
    if suppressed is None:
        return None
    for key in ("forced_bos_token_id", "forced_eos_token_id"):
        forced = config.get(key)
        if forced is None:
            continue
        forced = {forced} if isinstance(forced, int) else set(forced)  # TypeError (not iterable): refused as there
        if forced and forced.issubset(set(suppressed)):
            return f"every token of {key} is also in suppress_tokens (generation would sample from NaN)"
    return None


def _processor_problem(config: dict[str, Any]) -> str | None:
    """Why generate() raises building the logits processors for `config`, under _get_logits_processor's conditions
    (each processor's own check, logits_process.py), or None."""
    get = config.get
    penalty = get("repetition_penalty")
    if penalty is not None and penalty != 1.0 and not (isinstance(penalty, float) and penalty > 0):
        return "repetition_penalty must be a number with a fraction above 0 (1.0: none)"
    if not get("do_sample"):
        return None
    temperature, top_k, top_p, min_p, typical_p = (get(key) for key in ("temperature", "top_k", "top_p", "min_p",
                                                                         "typical_p"))
    if temperature is not None and temperature != 1.0 and not (isinstance(temperature, float) and temperature > 0):
        return "temperature must be a number with a fraction above 0 with do_sample (1.0: unchanged)"
    if top_k is not None and top_k != 0 and not (isinstance(top_k, int) and top_k > 0):
        return "top_k must be a whole number above 0 with do_sample (0: off)"
    # TopPLogitsWarper and TypicalLogitsWarper take float(value) first.
    if top_p is not None and _refuses(top_p, lambda top_p: top_p < 1.0 and float(top_p) < 0):
        return "top_p must be a number of at least 0 with do_sample (1.0 or more: off)"
    if min_p is not None and _refuses(min_p, lambda min_p: not 0 <= min_p <= 1.0):
        return "min_p must be a number from 0 to 1 with do_sample"
    if typical_p is not None and _refuses(typical_p, lambda mass: mass < 1.0 and not float(mass) > 0):
        return "typical_p must be a number above 0 with do_sample (1.0 or more: off)"
    return None


def check_generation_config(checkpoint: str, directory: str) -> None:
    """generation_config.json of `directory` (the local copy of CHECKPOINT), when there is one: a JSON object whose
    values transformers takes; CheckpointRefused naming CHECKPOINT, the file and the key otherwise (never the value)."""
    from workload.checkpoint.file_checks import MAX_JSON_BYTES, CheckpointRefused, read_regular

    path = os.path.join(directory, GENERATION_CONFIG)
    if not os.path.lexists(path):
        return
    where = f"CHECKPOINT {checkpoint}: its file {GENERATION_CONFIG}"
    try:
        config = json.loads(read_regular(path, MAX_JSON_BYTES))
    except CheckpointRefused:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CheckpointRefused(f"{where} is not JSON (UTF-8); save_pretrained writes a JSON object") from None
    if not isinstance(config, dict):
        raise CheckpointRefused(f"{where} holds no JSON object; save_pretrained writes one")
    if (why := generation_problem(config)) is not None:
        raise CheckpointRefused(f"{where}: {why} (what transformers' GenerationConfig and generate() take)")


def generation_problem(config: dict[str, Any]) -> str | None:
    """Why transformers refuses the generation config `config` (a JSON object's values), at load or at generate(), or
    None: the rules in this module's docstring."""
    try:
        return _problem(config) or _processor_problem(config)
    except TypeError:  # a comparison of kinds transformers cannot compare either (a list with a number)
        return "a value is of a kind transformers cannot compare with a number"
