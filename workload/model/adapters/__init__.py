"""Fine-tuning methods besides full: LoRA and QLoRA adapters on the frozen base (issue 32). May import workload's base
and workload.model; nothing under workload.run. This module holds the methods' names and the check of their flags,
standard library only, so the Pulumi program reads it at preview; the job's code is in lora.py (PEFT's adapters on
the frozen base) and nf4.py (the QLoRA base, torchao), which only the job imports.
"""
from __future__ import annotations

METHODS = ("full", "lora", "qlora")
"""Names accepted by --method (trainMethod): every weight trained, or low-rank adapters on a frozen bf16 (lora) or
NF4 (qlora) base."""
# Every linear layer of a decoder block, by the names Llama, Qwen2/3, Mistral, Gemma and OLMo 2 give them. "all-linear"
# is PEFT's name for the same choice (peft.tuners.tuners_utils: every nn.Linear but the output head).
LINEAR_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ALL_LINEAR = "all-linear"


def targets(value: str) -> tuple[str, ...]:
    """--lora_targets as module names: all-linear, or a comma list of LINEAR_TARGETS; ValueError naming the flag."""
    if value.strip() == ALL_LINEAR:
        return LINEAR_TARGETS
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    if not names or set(names) - set(LINEAR_TARGETS):
        raise ValueError(f"--lora_targets must be {ALL_LINEAR} or a comma list of {', '.join(LINEAR_TARGETS)}; "
                         f"got {value!r}")
    return names


def check(method: str, rank: int, alpha: float, dropout: float, target_list: str) -> None:
    """The method flags together; ValueError naming the flag and the allowed values."""
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= 1024:
        raise ValueError(f"--lora_rank must be an integer from 1 to 1024, got {rank!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha <= 4096):
        raise ValueError(f"--lora_alpha must be a positive number up to 4096, got {alpha!r}")
    if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
        raise ValueError(f"--lora_dropout must be at least 0 and below 1, got {dropout!r}")
    targets(target_list)


# What the job installs at start for a method, beyond the cluster's image (infra/job/job_config.py adds them to the
# runtime environment's pip list, as it does torchao for --fp8). Pinned to the versions the tests ran against.
PEFT_REQUIREMENT = "peft==0.21.2"
TORCHAO_REQUIREMENT = "torchao==0.18.0"  # the same pin as workload.model.fp8's


def requirements(method: str) -> tuple[str, ...]:
    """The pip requirements --method needs on the cluster's image."""
    return {"full": (), "lora": (PEFT_REQUIREMENT,), "qlora": (PEFT_REQUIREMENT, TORCHAO_REQUIREMENT)}[method]
