"""FSDP2 sharding: the device mesh (`build_mesh`, 1-D, or 2-D for HSDP), `shard_model` (one unit per decoder layer,
then the root; HSDP on a 2-D mesh; two-level's collectives from workload.model.two_level), and `reshard` (every unit
back to its sharded fp32 parameters). Imports torch, never ray.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from workload.config import TrainConfig
from workload.model import fp8
from workload.model import two_level as two_level_collectives
from workload.model.build import compile_enabled
from workload.model.loss import CausalLMWithLoss

# --reduce_dtype's names as dtypes; auto is resolved by workload.model.layout, and means fp32 where nothing resolved
# it (one GPU, the benchmarks).
TORCH_REDUCE_DTYPES = {"auto": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16}


def build_mesh(device: torch.device, shape: tuple[int, ...] | None = None) -> DeviceMesh:
    """A mesh over every rank of the default process group (gloo on CPU, NCCL on GPU): 1-D by default (FSDP), or
    2-D (replicas, shards) for HSDP, where consecutive ranks form a shard group (the ranks of one node)."""
    shape = shape or (torch.distributed.get_world_size(),)
    names = ("replicate", "shard") if len(shape) == 2 else None
    return init_device_mesh(device.type, shape, mesh_dim_names=names)


def shard_model(model: CausalLMWithLoss, mesh: DeviceMesh, cfg: TrainConfig, reduce_dtype: str | None = None,
                param_dtype: torch.dtype = torch.bfloat16, two_level: bool = False) -> CausalLMWithLoss:
    """FSDP2: one unit per decoder layer, then the root (embedding, final norm, lm_head); bf16 compute (tests pass
    fp32), gradients reduced in `reduce_dtype` (default --reduce_dtype). On a 2-D mesh this is HSDP: each unit is
    sharded over the mesh's second dimension and its gradients all-reduced over the first; with `two_level`, each
    unit is sharded over every rank and gathered and reduced in two steps, between the mesh's (nodes, ranks per
    node) nodes and inside them (workload.model.two_level)."""
    reduce = TORCH_REDUCE_DTYPES[reduce_dtype or cfg.reduce_dtype]
    levels, mesh = (mesh, init_device_mesh(mesh.device_type, (mesh.size(),))) if two_level else (None, mesh)
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce)
    compile_layers = compile_enabled(cfg, torch.device(mesh.device_type))
    if cfg.fp8:  # before compile and FSDP wrap the layers, so both see the fp8 linears
        fp8.apply(model.layers, torch.device(mesh.device_type))
    for layer in model.layers:
        if compile_layers:
            # Per layer rather than whole-model: every layer shares one compiled graph, and FSDP's hooks stay
            # outside it.
            layer.compile()
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=cfg.reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if levels is not None:
        two_level_collectives.apply(model, levels)
    return model


def reshard(model: nn.Module) -> None:
    """Put every FSDP unit back to its sharded fp32 parameters. A forward without backward (evaluation) leaves the
    units that keep their weights for backward (--no-reshard_after_forward) holding the gathered bf16 ones: a
    checkpoint or an export would then save bf16 weights, and every GPU would keep the whole model."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
