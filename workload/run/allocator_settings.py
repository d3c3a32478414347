"""PYTORCH_CUDA_ALLOC_CONF (and PYTORCH_ALLOC_CONF, the name torch reads first since 2.9) as torch's caching allocator
parses it: `key:value` options joined by ',', and the value torch refuses for each. torch parses it at the first CUDA
allocation of every rank and raises there (a RuntimeError or ValueError out of TORCH_CHECK), after the GPUs bill; here
the same rules say so before. Standard library only: the preview reads it for trainEnv.

The rules, from torch's parser: c10/core/AllocatorConfig.cpp (lexArgs: ',' ':' '[' ']' are tokens and spaces are
dropped; parseMaxSplitSize and parseMaxNonSplitRoundingSize: at least kLargeBuffer, 20 MiB;
parseGarbageCollectionThreshold: "set it in (0.0, 1.0)"; parseRoundUpPower2Divisions: a power of 2, or
[interval:divisions,...] with intervals a power of 2 or '>' and divisions a power of 2 or 0; expandable_segments:
"Expected a single True/False argument") and c10/cuda/CUDAAllocatorConfig.cpp (backend native or cudaMallocAsync;
pinned_num_register_threads a power of 2 up to pinned_max_register_threads, 128; pinned_reserve_segment_size_mb above 0;
"Unrecognized key ... in CUDA allocator config" for any other key). torch 2.13's own parser
(torch._C._accelerator_setAllocatorSettings) agrees on the common keys: tests/unit/test_env_values_at_start.py.
"""
from __future__ import annotations

import re

NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
_BOOLEAN = ("True", "False")  # exactly: torch compares the strings, so true, 1 and yes are refused
_MIN_SPLIT_MB = 20  # kLargeBuffer / kMB
_MAX_REGISTER_THREADS = 128
_NUMBER = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")


def _power_of_two(text: str, zero: bool = False) -> bool:
    return text.isdigit() and (int(text) & (int(text) - 1) == 0) and (zero or int(text) > 0)


def _fraction(text: str) -> bool:
    return bool(_NUMBER.fullmatch(text)) and 0.0 < float(text) < 1.0


# Each option: whether a value is accepted, and the words for what it takes.
OPTIONS = {
    "expandable_segments": (lambda v: v in _BOOLEAN, "True or False"),
    "release_lock_on_cudamalloc": (lambda v: v in _BOOLEAN, "True or False"),
    "pinned_use_cuda_host_register": (lambda v: v in _BOOLEAN, "True or False"),
    "pinned_use_background_threads": (lambda v: v in _BOOLEAN, "True or False"),
    "graph_capture_record_stream_reuse": (lambda v: v in _BOOLEAN, "True or False"),
    "garbage_collection_threshold": (_fraction, "a number between 0.0 and 1.0, both excluded"),
    "max_split_size_mb": (lambda v: v.isdigit() and int(v) >= _MIN_SPLIT_MB,
                          f"a whole number of at least {_MIN_SPLIT_MB}"),
    "max_non_split_rounding_mb": (lambda v: v.isdigit() and int(v) >= _MIN_SPLIT_MB,
                                  f"a whole number of at least {_MIN_SPLIT_MB}"),
    "roundup_power2_divisions": (_power_of_two, "a power of 2, or [interval:divisions,...,>:divisions]"),
    "backend": (lambda v: v in ("native", "cudaMallocAsync"), "native or cudaMallocAsync"),
    "pinned_num_register_threads": (lambda v: _power_of_two(v) and int(v) <= _MAX_REGISTER_THREADS,
                                    f"a power of 2 up to {_MAX_REGISTER_THREADS}"),
    "pinned_reserve_segment_size_mb": (lambda v: v.isdigit() and int(v) > 0, "a whole number above 0"),
}
SHOWN_CHARS = 32


def _shown(text: str) -> str:
    return repr(text) if len(text) <= SHOWN_CHARS and text.isprintable() else f"a word of {len(text)} characters"


def problem(value: str) -> str | None:
    """What torch's allocator refuses in `value` ('expandable_segments takes True or False, got ...'), or None."""
    tokens = [token for token in re.split(r"([,:\[\]])", value.replace(" ", "")) if token]
    index = 0
    while index < len(tokens):
        option = tokens[index]
        if option not in OPTIONS:
            return f"{_shown(option)} is not one of torch's allocator options ({', '.join(OPTIONS)})"
        accepts, words = OPTIONS[option]
        if tokens[index + 1:index + 2] != [":"] or index + 2 >= len(tokens):
            return f"{option} has no value: write {option}:VALUE, options joined by ','"
        if option == "roundup_power2_divisions" and tokens[index + 2] == "[":
            end = tokens.index("]", index) if "]" in tokens[index:] else len(tokens)
            pairs = "".join(tokens[index + 3:end]).split(",")
            if end == len(tokens) or not all(
                    (interval == ">" or _power_of_two(interval)) and _power_of_two(divisions, zero=True)
                    for interval, _, divisions in (pair.partition(":") for pair in pairs)):
                return (f"roundup_power2_divisions takes {words}, each interval a power of 2 (or '>') and each "
                        "divisions a power of 2 or 0")
            index = end + 1
        else:
            if not accepts(tokens[index + 2]):
                return f"{option} takes {words}, got {_shown(tokens[index + 2])}"
            index += 3
        if index < len(tokens) and tokens[index] != ",":
            return f"options are joined by ',' (option:value,option:value), got {_shown(tokens[index])} after {option}"
        index += 1
    return None
