"""Activation offloading's figures (no GPU): how many decoder layers' saved activations a node's host memory holds
per GPU, and what copying them back costs. A lever of bench.record.emulate_rank (--offload_layers), not of the job:
those layers skip activation checkpointing, their saved tensors go to pinned host memory in forward and come back in
backward, so the step loses those layers' recomputation and gains the copies. torchtune's OffloadActivations does
this for one GPU; PyTorch's torch.autograd.graph.save_on_cpu is the plain form.

The whole 70B QLoRA dev rank cannot offload: at 2 x 2048 tokens its 80 layers save about 90 GiB a rank compiled
(workload.model.memory's count), against the 25.6 GiB of host memory a g6.12xlarge has per GPU before Ray and the job
take theirs. So the lever is partial: the first `layers` layers offloaded, the rest checkpointed. Two refinements
(Offload): `saved="matmuls"`, the selective policy (workload.model.activation_offload.save_matmuls): an offloaded
layer keeps only its input, its base linears' outputs that backward needs and attention's output, and recomputes
every element-wise op, so more layers fit the same host memory; and `prefetch`, each layer's copies back issued on a
side stream while the layer after it runs its backward, so they hide under that compute instead of holding the
compute stream.

Standard library and workload.model only (the step-time model imports it).
"""
from __future__ import annotations

from dataclasses import dataclass

from workload.model import memory, structure
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
SAVED_SETS = ("all", "matmuls")
LSE_BYTES_PER_HEAD = 4  # flash attention's log-sum-exp, fp32, per query head and token


@dataclass(frozen=True)
class Offload:
    """The offload lever: the first `layers` decoder layers un-recomputed, their saved tensors in pinned host memory.
    `saved`: "all", what the compiled layer saves (workload.model.memory's count), or "matmuls", the selective
    policy's set (selective_bytes_per_token); `prefetch`: copies back ahead of each layer's backward, on a side
    stream."""

    layers: int
    saved: str = "all"
    prefetch: bool = False

    def __post_init__(self) -> None:
        assert self.saved in SAVED_SETS, self.saved

    def describe(self) -> str:
        kind = "selective (matmul and attention outputs)" if self.saved == "matmuls" else "every saved tensor"
        return f"{self.layers} layers offloaded, {kind}, copies back {'prefetched' if self.prefetch else 'exposed'}"


def host_link_gbytes_per_s(gpu_name: str) -> float:
    return next((rate for key, rate in HOST_LINK_GBYTES_PER_S if key in gpu_name), 25.0)


def host_gib_per_gpu(instance_type: str, gpus_per_node: int) -> float:
    """Pinned host memory one rank may take for offloaded activations on `instance_type`; 0 where unlisted."""
    node = HOST_GIB.get(instance_type, 0.0)
    return max(0.0, node * (1 - RAY_OBJECT_STORE_SHARE) / gpus_per_node - RANK_PROCESS_GIB)


def selective_bytes_per_token(config: dict) -> int:
    """What a decoder layer keeps per token under the selective policy (save the base linears' and attention's outputs,
    recompute the rest): its bf16 input, every linear layer's bf16 output but the MLP's last (down_proj's output only
    feeds the residual sum backward does not need), attention's bf16 output and its fp32 log-sum-exp. Llama-3.3-70B:
    184,576 bytes, 0.63 of the compiled layer's full count."""
    widths = structure.widths(config)
    linears = structure.linear_shapes(config)
    last = list(linears)[-1]  # the MLP's output projection, declared last in every family's layout
    outputs = sum(out_features for name, (out_features, _) in linears.items() if name != last)
    return (2 * widths["h"] + 2 * outputs + 2 * widths["q"]
            + LSE_BYTES_PER_HEAD * config["num_attention_heads"])


def layer_bytes(config: dict, micro_batch: int, seq_len: int, compiled: bool = True, saved: str = "all") -> float:
    """What one decoder layer saves for backward in one micro-batch, the bytes an offloaded layer copies to the host
    and back: workload.model.memory's count (compiled: Inductor's share of it), or the selective policy's set."""
    if saved == "matmuls":
        return selective_bytes_per_token(config) * micro_batch * seq_len
    share = memory.COMPILED_ACTIVATION_SHARE if compiled else 1.0
    return memory.activation_bytes_per_token(config, seq_len) * share * micro_batch * seq_len


def offloadable_layers(config: dict, micro_batch: int, seq_len: int, host_gib: float, compiled: bool = True,
                       saved: str = "all") -> int:
    """The most decoder layers whose saved activations fit `host_gib` of pinned host memory."""
    per_layer = layer_bytes(config, micro_batch, seq_len, compiled, saved)
    return min(config["num_hidden_layers"], int(host_gib * GIB // per_layer))


def copy_back_seconds(config: dict, lever: Offload, micro_batch: int, seq_len: int, gpu_name: str,
                      grad_accum_steps: int = 1, backward_per_layer_s: float = 0.0, compiled: bool = True) -> float:
    """The host-to-GPU copies in backward that the compute waits for (the copies to the host in forward run on a
    side stream, under the forward's compute). Exposed: each comes back on the compute stream when autograd unpacks
    it. Prefetched: a layer's copies run under the backward of the layer after it (`backward_per_layer_s` per
    micro-batch), only what is longer shows."""
    per_layer = (layer_bytes(config, micro_batch, seq_len, compiled, lever.saved)
                 / (host_link_gbytes_per_s(gpu_name) * 1e9))
    if lever.prefetch:
        per_layer = max(0.0, per_layer - backward_per_layer_s)
    return lever.layers * per_layer * grad_accum_steps
