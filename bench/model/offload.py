"""Activation offloading's figures (no GPU): how many decoder layers' saved activations a node's host memory holds
per GPU, and what copying them back costs. A lever of bench.record.emulate_rank (--offload_layers), not of the job:
those layers skip activation checkpointing, their saved tensors go to pinned host memory in forward and come back in
backward, so the step loses those layers' recomputation and gains the copies. torchtune's OffloadActivations does
this for one GPU; PyTorch's torch.autograd.graph.save_on_cpu is the plain form.

The whole 70B QLoRA dev rank cannot offload: at 2 x 2048 tokens its 80 layers save about 90 GiB a rank compiled
(workload.model.memory's count), against the 48 GiB of host memory a g6.12xlarge has per GPU before Ray and the job
take theirs. So the lever is partial: the first `offloadable_layers` layers offloaded, the rest checkpointed.

Standard library and workload.model only (the step-time model imports it).
"""
from __future__ import annotations

from workload.model import memory
from workload.model.memory import GIB

# Host memory per node, GiB, of the instance types whose stacks run adapters (tests/support/instance_facts.py's
# memory_mib): g6.12xlarge (dev) 192 GiB for 4 L4s.
HOST_GIB = {"g6.12xlarge": 192.0}
# What a node's host memory gives others: Ray's object store takes 30% of it by default (ray start's
# --object-store-memory), and each rank's process (the CUDA context, the model's NF4 load staging, Python) keeps this.
RAY_OBJECT_STORE_SHARE = 0.3
RANK_PROCESS_GIB = 8.0
# Host <-> GPU copies, GB/s a direction, pinned memory: PCIe 4.0 x16 (L4, A100 PCIe, L40S) 32 GB/s raw, about 25
# measured by bandwidthTest; PCIe 5.0 x16 (H100 and H200 SXM) 64 raw, about 50. Assumed, not measured here.
HOST_LINK_GBYTES_PER_S = (("H200", 50.0), ("H100", 50.0), ("L40S", 25.0), ("A100", 25.0), ("L4", 25.0))


def host_link_gbytes_per_s(gpu_name: str) -> float:
    return next((rate for key, rate in HOST_LINK_GBYTES_PER_S if key in gpu_name), 25.0)


def host_gib_per_gpu(instance_type: str, gpus_per_node: int) -> float:
    """Pinned host memory one rank may take for offloaded activations on `instance_type`; 0 where unlisted."""
    node = HOST_GIB.get(instance_type, 0.0)
    return max(0.0, node * (1 - RAY_OBJECT_STORE_SHARE) / gpus_per_node - RANK_PROCESS_GIB)


def layer_bytes(config: dict, micro_batch: int, seq_len: int, compiled: bool = True) -> float:
    """What one decoder layer saves for backward in one micro-batch (workload.model.memory's count), the bytes an
    offloaded layer copies to the host and back."""
    share = memory.COMPILED_ACTIVATION_SHARE if compiled else 1.0
    return memory.activation_bytes_per_token(config, seq_len) * share * micro_batch * seq_len


def offloadable_layers(config: dict, micro_batch: int, seq_len: int, host_gib: float, compiled: bool = True) -> int:
    """The most decoder layers whose saved activations fit `host_gib` of pinned host memory."""
    per_layer = layer_bytes(config, micro_batch, seq_len, compiled)
    return min(config["num_hidden_layers"], int(host_gib * GIB // per_layer))


def copy_back_seconds(config: dict, layers: int, micro_batch: int, seq_len: int, gpu_name: str,
                      grad_accum_steps: int = 1, compiled: bool = True) -> float:
    """The host-to-GPU copies in backward, exposed: each comes back on the compute stream when autograd unpacks it
    (the copies to the host in forward run on a side stream, under the forward's compute)."""
    moved = layers * layer_bytes(config, micro_batch, seq_len, compiled) * grad_accum_steps
    return moved / (host_link_gbytes_per_s(gpu_name) * 1e9)
