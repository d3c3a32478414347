"""The layout as a worker decides it: the FSDP units of the built model, and workload.model.layout's choice with what a
worker knows (its ranks' placement, the fabric check's bandwidth, its GPU). The arithmetic of the layouts, their
collectives and their network cost is workload.model.layout's, standard library, which the preview runs too.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from workload.config import TrainConfig
from workload.model import layout, structure
from workload.model.layout import Plan, Shape
from workload.model.loss import CausalLMWithLoss


def fsdp_units(model: CausalLMWithLoss) -> list[tuple[str, list[Shape]]]:
    """The FSDP units of workload.model.loss.CausalLMWithLoss in forward order with their parameters' shapes: the
    root (embedding, tied lm_head, final norm) first, then each decoder layer. Works on the meta device."""
    in_layers = {id(parameter) for layer in model.layers for parameter in layer.parameters()}
    root = [tuple(p.shape) for p in model.parameters() if id(p) not in in_layers]
    layers = [(f"layers.{index}", [tuple(p.shape) for p in layer.parameters()])
              for index, layer in enumerate(model.layers)]
    return [("root", root), *layers]


def plan_for_worker(cfg: TrainConfig, model: CausalLMWithLoss, device: torch.device, world_size: int,
                    node_rank: int, local_world_size: int, fabric: dict | None) -> Plan:
    """layout.for_job with what a worker knows: the ranks' placement (Ray's node ranks, gathered from every rank,
    unless --ranks_per_node says), the network (the fabric check's bus bandwidth, else --node_gbits_per_s), the GPU
    (its name for the compute, its memory as --gpu_memory_mib says, else as the device says) and the model's config.
    `cfg` carries the memory plan's levers (workload/trainer.py applies them first, as the preview does). A
    collective: every rank calls it and all get the same plan."""
    ranks_per_node = cfg.ranks_per_node
    if not ranks_per_node:
        placements: list = [None] * world_size
        dist.all_gather_object(placements, (node_rank, local_world_size))
        ranks_per_node = layout.ranks_per_node_of([node for node, _ in placements], [size for _, size in placements])
    if fabric:
        bandwidth, source = fabric["bus_gbytes_per_s"], "measured by the fabric check"
    else:
        bandwidth, source = cfg.node_gbits_per_s / 8, "--node_gbits_per_s"
    cuda = device.type == "cuda"
    gpu_memory = (cfg.gpu_memory_mib * 2**20 if cfg.gpu_memory_mib else
                  torch.cuda.get_device_properties(device).total_memory if cuda else None)
    return layout.for_job(cfg, structure.attach(model.lm.config.to_dict(), model.lm), world_size=world_size, ranks_per_node=ranks_per_node,
                          gpu_name=torch.cuda.get_device_name(device) if cuda else "", node_gbytes_per_s=bandwidth,
                          bandwidth_source=source, gpu_memory_bytes=gpu_memory)
