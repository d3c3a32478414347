"""Environment variables the job's libraries parse when they are imported or start, with the parser each uses: a value
the parser refuses fails every rank (`import huggingface_hub` raises "invalid literal for int() with base 10: 'soon'"
for HF_HUB_ETAG_TIMEOUT=soon; `import torch` raises "Invalid log settings: loudest" for TORCH_LOGS=loudest;
init_process_group raises for TORCH_DISTRIBUTED_DEBUG=VERBOSE), and a switch the library reads as off for any word
but its own (HF_HUB_OFFLINE=maybe) silently does the opposite of what was meant. One table, each row citing the line
of the library that parses it; the local run refuses a bad value before Ray starts (variable_values) and the preview
applies the same table to trainEnv. Standard library only: no library is imported to judge its own variable.

tests/unit/test_parsed_variables.py reads the libraries' sources and holds this table complete for every
`int(os.environ...)`, `float(os.environ...)`, `_as_int(os.environ...)` and `_is_true(os.environ...)` it finds there,
and runs each library's own parse on refused and allowed values.
"""
from __future__ import annotations

import re
import sys

# What huggingface_hub's constants._is_true reads as true (ENV_VARS_TRUE_VALUES: 1, ON, YES, TRUE, any case); any other
# word is false, so the words a user means as false are 0, OFF, NO, FALSE. datasets/config.py reads its own switches
# against the same ENV_VARS_TRUE_VALUES.
SWITCH_WORDS = ("1", "0", "true", "false", "yes", "no", "on", "off")

# The kinds of parser, each: (whether a value passes, what it takes, said after "set").
_INT = "int"
_FLOAT = "float"
_SWITCH = "switch"
_DEBUG = "distributed_debug"
_LOGS = "torch_logs"


def _parses(kind):
    def accepts(value: str) -> bool:
        try:
            kind(value)  # the very parser the library applies: int() and float() of the standard library
        except ValueError:
            return False
        return True
    return accepts


# torch/csrc/distributed/c10d/debug.cpp (setDebugLevelFromEnvironment): the value upper-cased must be OFF, INFO or
# DETAIL, else "The value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL." (no whitespace is stripped).
DISTRIBUTED_DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")

# TORCH_LOGS, as torch/_logging/_internal.py (_parse_log_settings, at `import torch`) parses it: the whole text must
# match _gen_settings_regex; whitespace is dropped, the text split at ',', each item's '+' and '-' removed; the item
# must then be "all", a registered log name or artifact name (torch/_logging/_registrations.py, register_log and
# register_artifact), or a module importlib finds; "help" and "+help" raise with the help text. The registered names
# are torch 2.13's (tests/unit/test_parsed_variables.py holds them to torch._logging's registry, and the rule to
# torch's own parser).
_LOGS_GRAMMAR = re.compile(r"((\+|-)?[\w\.]+,\s*)*(\+|-)?[\w\.]+?")
TORCH_LOG_NAMES = frozenset((
    "aot", "async_compile", "autograd", "c10d", "cache", "ddp", "distributed", "dtensor", "dynamic", "dynamo", "export",
    "fake_tensor", "fsdp", "inductor", "native_dsl", "onnx", "pp", "torch"))
TORCH_LOG_ARTIFACTS = frozenset((
    "annotation", "aot_graphs", "aot_graphs_effects", "aot_joint_graph", "auto_chunker", "autotuning", "benchmarking",
    "bytecode", "caching", "compiled_autograd", "compiled_autograd_verbose", "compute_dependencies",
    "cudagraph_static_inputs", "cudagraphs", "custom_format_test_artifact", "ddp_graphs", "fusion", "graph",
    "graph_breaks", "graph_code", "graph_code_verbose", "graph_region_expansion", "graph_sizes", "guards",
    "hierarchical_compile", "incremental", "inductor_metrics", "ir_post_fusion", "ir_pre_fusion", "kernel_code",
    "loop_ordering", "loop_tiling", "node_runtime_estimation", "not_implemented", "onnx_diagnostics", "output_code",
    "overlap", "overlap_scheduling", "perf_hints", "post_grad_graphs", "pre_grad_graphs", "recompiles",
    "recompiles_verbose", "schedule", "side_effects", "sym_node", "trace_bytecode", "trace_call", "trace_shape_events",
    "trace_source", "verbose_guards"))
# A module name is taken when its top package is one the image holds (its training stack, or the standard library):
# whether a submodule exists is the image's to say, so `torch._dynamo.nosuch` may still pass here (a rare miss); a
# bare word that is neither registered nor such a package ("loudest") is refused.
IMAGE_PACKAGES = frozenset(("torch", "transformers", "datasets", "huggingface_hub", "peft", "ray", "accelerate",
                            "safetensors", "tokenizers", "torchao", "workload", "numpy", "triton"))


def torch_logs_accepts(value: str) -> bool:
    if value == "":
        return True
    if value in ("help", "+help") or not _LOGS_GRAMMAR.fullmatch(value):
        return False
    for item in re.sub(r"\s+", "", value).split(","):
        name = item.replace("+", "").replace("-", "")
        top = name.split(".")[0]
        if not (name == "all" or name in TORCH_LOG_NAMES or name in TORCH_LOG_ARTIFACTS
                or (top and (top in IMAGE_PACKAGES or top in sys.stdlib_module_names) and "" not in name.split("."))):
            return False
    return True


_KINDS = {
    _INT: (_parses(int), "a whole number"),
    _FLOAT: (_parses(float), "a number"),
    _SWITCH: (lambda v: v.lower() in SWITCH_WORDS, "1 or 0"),  # not stripped: _is_true(" 1") is false
    _DEBUG: (lambda v: v.upper() in DISTRIBUTED_DEBUG_LEVELS, f"one of {', '.join(DISTRIBUTED_DEBUG_LEVELS)}"),
    _LOGS: (torch_logs_accepts, "torch's log or artifact names or modules, comma separated, e.g. +dynamo,graph_breaks"),
}

_HUB = "huggingface_hub/constants.py"
# Each variable: (the parser's kind, the library's file that parses it, and when: what fails).
VARIABLES = {
    # huggingface_hub/constants.py, at import: _as_int(os.environ.get(...)) is int(), so a word raises ValueError.
    "HF_HUB_ETAG_TIMEOUT": (_INT, _HUB, "fails at import"),
    "HF_HUB_DOWNLOAD_TIMEOUT": (_INT, _HUB, "fails at import"),
    # huggingface_hub/constants.py, at import: _is_true(os.environ.get(...)); any other word is read as off.
    **{name: (_SWITCH, _HUB, "reads any other word as off") for name in (
        "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY", "DO_NOT_TRACK",
        "HF_HUB_DISABLE_UPDATE_CHECK", "HF_DEBUG", "HF_HUB_DISABLE_SYMLINKS", "HF_HUB_DISABLE_SYMLINKS_WARNING",
        "HF_HUB_DISABLE_EXPERIMENTAL_WARNING", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_XET_HIGH_PERFORMANCE",
        "HF_HUB_ENABLE_HF_TRANSFER", "HF_HUB_DISABLE_XET", "HF_HUB_DISABLE_SHARED_BLOBS", "HUGGINGFACE_CO_STAGING",
        "HF_HUB_DISABLE_PROGRESS_BARS")},
    # datasets/config.py, at import: float(os.environ.get("HF_DATASETS_IN_MEMORY_MAX_SIZE", 0)) raises on a word;
    # HF_DATASETS_OFFLINE and HF_DATASETS_DISABLE_PROGRESS_BARS are .upper() in ENV_VARS_TRUE_VALUES.
    "HF_DATASETS_IN_MEMORY_MAX_SIZE": (_FLOAT, "datasets/config.py", "fails at import"),
    "HF_DATASETS_OFFLINE": (_SWITCH, "datasets/config.py", "reads any other word as off"),
    "HF_DATASETS_DISABLE_PROGRESS_BARS": (_SWITCH, "datasets/config.py", "reads any other word as off"),
    # transformers/utils/hub.py: TRANSFORMERS_IS_CI .upper() in ENV_VARS_TRUE_VALUES.
    "TRANSFORMERS_IS_CI": (_SWITCH, "transformers/utils/hub.py", "reads any other word as off"),
    # torch/distributed/distributed_c10d.py (_is_barrier_after_init: int(os.getenv("TORCH_DIST_INIT_BARRIER", "0")),
    # in init_process_group on every rank.
    "TORCH_DIST_INIT_BARRIER": (_INT, "torch/distributed/distributed_c10d.py", "fails in init_process_group"),
    "TORCH_DISTRIBUTED_DEBUG": (_DEBUG, "torch/csrc/distributed/c10d/debug.cpp", "fails in init_process_group"),
    "TORCH_LOGS": (_LOGS, "torch/_logging/_internal.py", "fails at `import torch`"),
}


def problem(name: str, value: str) -> str | None:
    """Why the library that parses `name` refuses or misreads `value`, said to follow the variable (`NAME=value` or
    its length, as the caller shows it): the library's file, what it takes; None when it passes or is not listed."""
    if name not in VARIABLES or value == "":
        return None
    kind, source, effect = VARIABLES[name]
    accepts, takes = _KINDS[kind]
    if accepts(value):
        return None
    if kind == _SWITCH:
        return f" is neither on nor off to {source.split('/')[0]} ({source}), which {effect}: set {takes}"
    return f": {source} {effect} with it; set {takes}, or unset it"
