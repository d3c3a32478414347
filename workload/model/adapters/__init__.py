"""Fine-tuning methods besides full: LoRA and QLoRA adapters on the frozen base (issue 32). May import workload's base
and workload.model; nothing under workload.run. This module holds the methods' names and the check of their flags,
standard library only, so the Pulumi program reads it at preview; the job's code is in lora.py (PEFT's adapters on
the frozen base) and nf4.py (the QLoRA base, torchao), which only the job imports.
"""
from __future__ import annotations

import re
from typing import Sequence

METHODS = ("full", "lora", "qlora")
"""Names accepted by --method (trainMethod): every weight trained, or low-rank adapters on a frozen bf16 (lora) or
NF4 (qlora) base."""
# PEFT's name for every nn.Linear of the model but the output head (peft.tuners.tuners_utils
# _maybe_include_all_linear_layers): resolved on the model's own linear layers (workload.model.structure.linear_names),
# so Phi-3's fused qkv_proj and gate_up_proj, GLM-4's gate_up_proj and StarCoder2's c_fc and c_proj are in it.
ALL_LINEAR = "all-linear"
# The names Llama, Qwen2/3, Mistral, Gemma and OLMo 2 give a decoder layer's linear layers (their all-linear).
LINEAR_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The output head and the embedding: PEFT's all-linear leaves the head out, and the job's loss multiplies the head's
# weight itself (workload.model.loss), outside any adapter.
OUTSIDE_LAYERS = ("lm_head", "embed_tokens")


def targets(value: str) -> tuple[str, ...]:
    """--lora_targets as written: (ALL_LINEAR,), or a comma list of module names (what PEFT matches a module's last
    name against); ValueError naming the flag. Which of them the model has is `resolve`'s question."""
    if value.strip() == ALL_LINEAR:
        return (ALL_LINEAR,)
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    outside = [name for name in names if name in OUTSIDE_LAYERS]
    if not names or not all(_NAME.fullmatch(name) for name in names) or outside:
        why = f" ({', '.join(outside)} is outside the decoder layers)" if outside else ""
        from workload.config.fields import shown_items  # at use: workload.config reads METHODS at its own import
        raise ValueError(f"--lora_targets must be {ALL_LINEAR} or a comma list of a decoder layer's linear layers, "
                         f"such as {', '.join(LINEAR_TARGETS)}; got {shown_items(value.split(','))}{why}")
    return names


def resolve(value: str, model_names: Sequence[str], flag: str = "--lora_targets") -> tuple[str, ...]:
    """--lora_targets on a model whose decoder layers' linear layers have `model_names` (leaf names): every one of
    them for all-linear (PEFT's meaning), else the names given, each of which the model must have; ValueError naming
    `flag` (--lora_targets, or the stack's trainLoraTargets) and the names the model has otherwise. PEFT itself would
    fail later, inside the job, with NoMatchingPeftModuleError (no name matches) or train a subset silently."""
    names = targets(value)
    if names == (ALL_LINEAR,):
        return tuple(model_names)
    missing = [name for name in names if name not in model_names]
    if missing:
        from workload.config.fields import shown_items  # at use: workload.config reads METHODS at its own import
        raise ValueError(f"{flag}: the model has no linear layer named {shown_items(missing)}; allowed: {ALL_LINEAR} "
                         f"or a comma list of {', '.join(model_names)}")
    return names


# QLoRA's and torchao's to_nf4 default: weights per absmax scale (nf4.py quantizes with it).
NF4_BLOCK_SIZE = 64


def nf4_shard_problem(name: str, rows: int, columns: int, shards: int) -> str | None:
    """Why a (rows x columns) weight cannot be quantized for `shards` FSDP2 shards: NF4 under FSDP2 needs even shards
    of whole blocks (torchao's all-gather hook multiplies the shard's rows by the group's size); None when it can."""
    if rows % shards or (rows // shards * columns) % NF4_BLOCK_SIZE:
        return (f"{name} ({rows} x {columns}) does not split into {shards} shards of whole {NF4_BLOCK_SIZE}-weight "
                "NF4 blocks")
    return None


def qlora_shards_problem(linear_shapes: dict[str, tuple[int, int]], target_names: Sequence[str],
                         shards: int) -> str | None:
    """The first of a decoder layer's targeted linear layers (structure.linear_shapes, by their names under the
    layer; `target_names` their leaf names, as `resolve` returns them) that --method qlora cannot shard `shards` ways,
    or None: the check nf4.check_shardable makes in every worker, made before any worker starts."""
    for name, (rows, columns) in linear_shapes.items():
        if name.rsplit(".", 1)[-1] in target_names and (why := nf4_shard_problem(name, rows, columns, shards)):
            return why
    return None


def rank_problem(linear_shapes: dict[str, tuple[int, int]], target_names: Sequence[str], rank: int) -> str | None:
    """Why --lora_rank `rank` fits none of the targeted layers (structure.linear_shapes, as qlora_shards_problem takes
    them), or None: a layer's update B @ A has at most the rank of its smaller side, so a rank above every targeted
    layer's is a mistake (512 typed for a model 64 wide), which PEFT trains, scaled by lora_alpha / lora_rank, without
    a word."""
    sides = {name: min(shape) for name, shape in linear_shapes.items() if name.rsplit(".", 1)[-1] in target_names}
    if not sides or rank <= max(sides.values()):
        return None
    widest = max(sides, key=sides.get)
    return (f"--lora_rank {rank} is above the rank any targeted layer's update can have (at most {sides[widest]}, "
            f"{widest}'s {' x '.join(map(str, linear_shapes[widest]))}); give --lora_rank {sides[widest]} or less")


def check_settings(method: str, rank: int, alpha: float, dropout: float, target_list: str) -> None:
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
