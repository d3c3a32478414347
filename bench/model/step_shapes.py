"""The model's shape as the step-time model reads it (bench/model/step_model.py): its FSDP units and FLOPs per token
from its config.json, without building it, and the bytes of the collectives each step issues, for the project's FSDP2
and the recipe's FSDP1."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from bench.model.step_inputs import MODEL_CONFIG, RECOMPUTE_SHARE, Hardware, Strategy
from workload.config import TrainConfig
from workload.model import flops, layout, memory
from workload.model.adapters import memory as adapter_memory
from workload.model.build import NAMED_CONFIGS, build_model
from workload.model.layout import Collective, step_collectives, total_traffic
from workload.model.loss import CausalLMWithLoss

# The recipe's size_based_auto_wrap_policy(min_num_params=1e7): on Qwen2.5-1.5B it wraps each MLP projection (13.8M),
# the embedding, the (tied) lm_head, and around them Qwen2Model with its attention weights (5.5M a layer) and norms.
RECIPE_MIN_NUM_PARAMS = int(1e7)


@functools.cache
def meta_model() -> CausalLMWithLoss:
    """Qwen2.5-1.5B as the workload builds it, on the meta device (no memory)."""
    return build_model(TrainConfig(model_config=MODEL_CONFIG), torch.device("meta"))


@dataclass(frozen=True)
class ModelShape:
    """What the step's time depends on: the FSDP units' shapes, the parameters in matmuls, layers and width."""

    units: tuple
    matmul_parameters: int
    layers: int
    hidden: int
    method: str = "full"
    """--method: lora and qlora train adapters on a frozen base (workload.model.adapters)."""
    costs: tuple | None = None
    """Each unit's parameters' (gathered bytes an element, trained), workload.model.layout.method_units'."""
    head_parameters: int = 0
    adapter_parameters: int = 0
    quantized_parameters: int = 0
    """The NF4 weights qlora dequantizes every pass."""
    config: dict = field(default_factory=dict, compare=False, hash=False)
    """The config.json the shape is of: workload.model.flops counts its FLOPs."""
    lora_rank: int = 16
    lora_targets: str = "all-linear"

    def token_flops(self, seq_len: int) -> float:
        """Model FLOPs per trained token (workload.model.flops.flops_per_token, the trainer's MFU's count)."""
        return flops.flops_per_token(self.config, seq_len, self.method, self.lora_rank, self.lora_targets)

    def recompute_share(self, seq_len: int) -> float:
        """What activation checkpointing adds, as a share of the step's FLOPs: the layers' forward again (a third of
        full training's 6N, measured as RECOMPUTE_SHARE; with a frozen base, 2N + 2A of 4N + 6A, about half)."""
        if self.method == "full":
            return RECOMPUTE_SHARE
        hardware = flops.flops_per_token(self.config, seq_len, self.method, self.lora_rank, self.lora_targets,
                                         recomputation=True)
        return hardware / self.token_flops(seq_len) - 1


def config_shape(config: dict, method: str = "full", lora_rank: int = 16,
                 lora_targets: str = "all-linear") -> ModelShape:
    """Any decoder from its config.json, without building it (workload.model.memory.unit_shapes, which
    tests/unit/test_memory.py
    checks against the model transformers builds), trained by `method` (workload.model.layout.method_units)."""
    head = config["vocab_size"] * config["hidden_size"]
    untied_input_embedding = 0 if memory.tied_embeddings(config) else head
    units, costs = layout.method_units(config, method, lora_rank, lora_targets)
    adapters = adapter_memory.adapter_parameters(config, lora_rank, lora_targets) if method != "full" else 0
    quantized = config["num_hidden_layers"] * adapter_memory.quantized_parameters(config, lora_targets) if method == "qlora" else 0
    return ModelShape(tuple(units), memory.parameter_count(config) - untied_input_embedding,
                      config["num_hidden_layers"], config["hidden_size"], method,
                      tuple(map(tuple, costs)) if costs else None, head, adapters, quantized, config, lora_rank,
                      lora_targets)


@functools.cache
def default_shape() -> ModelShape:
    """Qwen2.5-1.5B, the architecture the H200 measurements are of."""
    return config_shape(NAMED_CONFIGS[MODEL_CONFIG])


def recipe_units(module: nn.Module, min_num_params: int) -> list[tuple[str, int]]:
    """FSDP1's units under size_based_auto_wrap_policy(min_num_params), in forward (pre-)order, as (name, numel).

    The policy's walk (torch.distributed.fsdp.wrap._recursive_wrap): a module whose subtree holds at least
    min_num_params parameters is descended into; after its children, it is wrapped if the parameters its wrapped
    children did not take still number at least min_num_params (never a ModuleList or ModuleDict). Subtrees are
    counted per module, so a weight tied between the embedding and the lm_head is counted, and flattened, by both:
    FSDP1 wraps each with its own copy (recorded on the gloo mesh). The root keeps what no unit took."""
    order: list[str] = []
    wrapped: dict[str, nn.Module] = {}
    numels: dict[str, int] = {}

    def walk(name: str, current: nn.Module) -> int:
        order.append(name)
        subtree = sum(parameter.numel() for parameter in current.parameters())
        if subtree < min_num_params:
            return 0
        taken = sum(walk(f"{name}.{child_name}".lstrip("."), child) for child_name, child in current.named_children())
        if name and subtree - taken >= min_num_params and not isinstance(current, (nn.ModuleList, nn.ModuleDict)):
            wrapped[name], numels[name] = current, subtree - taken
            return subtree
        return taken

    walk("", module)
    in_units = {id(parameter) for unit in wrapped.values() for parameter in unit.parameters()}
    root = sum(parameter.numel() for parameter in module.parameters() if id(parameter) not in in_units)
    units = [(name, numels[name]) for name in order if name in wrapped]
    return ([("<root>", root)] if root else []) + units


def recipe_collectives(units: list[tuple[str, int]], world_size: int) -> list[Collective]:
    """What one step of the recipe issues: FSDP1 pads each unit's flat bf16 parameter to a multiple of the world
    size; every unit but the root is gathered in forward, freed, gathered again in backward, and reduce-scattered
    once, in bf16 (the model is bf16, without a mixed-precision policy)."""
    def padded(numel: int) -> int:
        return math.ceil(numel / world_size) * world_size

    forward = [Collective("all_gather", "world", world_size, padded(numel) * 2, "forward") for _, numel in units]
    backward = [Collective("all_gather", "world", world_size, padded(numel) * 2, "backward")
                for name, numel in units if name != "<root>"]
    backward += [Collective("reduce_scatter", "world", world_size, padded(numel) * 2, "backward")
                 for _, numel in reversed(units)]
    forward[0] = replace(forward[0], exposed=True)
    backward[-1] = replace(backward[-1], exposed=True)
    return forward + backward


def collectives(strategy: Strategy, hardware: Hardware, shape: ModelShape | None = None,
                reshard_after_forward: bool = False) -> list[Collective]:
    world = hardware.nodes * hardware.gpus_per_node
    if strategy.step == "recipe":
        return recipe_collectives(recipe_units(meta_model().lm, RECIPE_MIN_NUM_PARAMS), world)
    mesh = layout.mesh_shape(strategy.sharding, world, hardware.gpus_per_node)
    shape = shape or default_shape()
    return step_collectives(shape.units, mesh, strategy.reduce_dtype, reshard_after_forward,
                            sharding=strategy.sharding, costs=shape.costs)


def bytes_by_collective(parts: list[Collective], hardware: Hardware) -> dict:
    """GB per step by (operation, group): nccl-tests' size S summed, and what crosses the node boundary."""
    table: dict[str, dict] = {}
    for part in parts:
        key = f"{part.operation}/{part.group}"
        row = table.setdefault(key, {"count": 0, "size_gb": 0.0, "inter_node_gb_per_node": 0.0,
                                     "intra_node_gb_per_gpu": 0.0})
        traffic = total_traffic([part], hardware.nodes, hardware.gpus_per_node)
        row["count"] += 1
        row["size_gb"] += part.size / 1e9
        row["inter_node_gb_per_node"] += traffic.inter_node_bytes_per_node / 1e9
        row["intra_node_gb_per_gpu"] += traffic.intra_node_bytes_per_gpu / 1e9
    return {key: {name: round(value, 4) for name, value in row.items()} for key, row in table.items()}
