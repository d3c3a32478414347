"""The step-time model's inputs (bench/model/step_model.py): the H200 measurements it starts from, each GPU's and link's
figures, the assumptions with their central value and range, the step's measured split and the sharding strategies."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from workload.model.memory import GIB

RESULTS = Path(__file__).resolve().parents[1] / "results" / "step_model.jsonl"
# Each stack's Hardware as `python -m bench.model.step_model` read it from the stack files, for machines without Pulumi
# (the GPU machine that runs bench/record/emulate_rank.py): tests.support.pulumi_mocks, which reads them, imports pulumi.
STACK_HARDWARE = RESULTS.parent / "stack_hardware.json"
MODEL_CONFIG = "qwen2.5-1.5b"
# One H200, 8 x 2048 tokens per step, median step (bench/results/step_bench-h200-2026-11-29.log; RESULTS.md).
H200_TOKENS_PER_S = {"recipe": 37_989, "project": 51_069}
H200_BATCH, H200_SEQ_LEN = 8, 2048
# The same steps at the stacks' per-GPU batch of 2 x 2048 (bench/results/step_bench-h200-2026-12-01-batch2.log):
# two sequences do not fill an H200 (MFU 0.30 and 0.22 against 0.53 and 0.40 at 8). An L4 has an eighth of its
# FLOP/s, so two sequences fill it far better; the headline scales the batch-8 MFU, and the sensitivity rows say
# what the batch-2 one would give, the pessimistic end.
H200_BATCH2_TOKENS_PER_S = {"recipe": 21_299, "project": 28_936}
# nccl-tests busbw between the GPUs of one node (GB/s); assumptions until a one-node fabric check measures them.
# L4 and L40S sit on PCIe Gen4 x16 without NVLink, and g6/g6e have no usable PCIe P2P, so NCCL uses its SHM
# transport through host DRAM (Assumptions.g_intra_node_gbytes_per_s, a range: no published figure; 16 GB/s, the
# order of nccl-tests' P2P figure on PCIe in NVIDIA/nccl-tests#128, is its optimistic end). A100 (NVSwitch,
# 600 GB/s NVLink) and H100 (900 GB/s NVLink): the all-reduce busbw NVIDIA's nccl-tests reach on 8 GPUs, about 230
# and 450 GB/s.
INTRA_NODE_GBYTES_PER_S = {"p4d.24xlarge": 230.0, "p5.48xlarge": 450.0}
G_FAMILY = ("g6.12xlarge", "g6e.12xlarge")
# The H200's sustained bf16 GEMM rate in the project's step: its matmuls ran at 740 TFLOP/s of 989 (bench.explore.probe
# profile, RESULTS.md; 700-790 per shape alone), 0.748 of peak under the 700 W cap.
H200_SUSTAINED_GEMM_TFLOPS = 740.0
L4_PEAK_TFLOPS = 121.0


@dataclass(frozen=True)
class Assumptions:
    """The uncertain inputs, each with its source; LOW_HIGH gives their ranges."""

    # Sustained bf16 GEMM on an L4 at the step's sizes: square bf16 matmuls of 4096, 8192 and 10240 ran at 54.91,
    # 59.40 and 56.90 TFLOP/s, 45-49% of its 121 dense peak at its 72 W cap (zzc0721/torch-performance-test-data
    # issue #120, torch 2.9 cu128); the step's GEMMs are 4096 tokens by 1536-8960 wide, and the lm_head's 8k-token
    # chunks by 151,936. The 70.89 at 2048 (the old range's top, and a central 62.5) is a size the step's large
    # matmuls do not run at: their mean, 57.1, is the central figure, their lowest and highest the range.
    l4_gemm_tflops: float = 57.0
    # EFA busbw over the instance's documented per-direction figure: 70-90% for the G family, whose EFA traffic is
    # staged through host memory (no GPUDirect RDMA on G instances: aws/aws-ofi-nccl#547); the same range elsewhere.
    network_efficiency: float = 0.8
    # NCCL's SHM transport between a g6/g6e node's GPUs, GB/s per direction (see INTRA_NODE_GBYTES_PER_S).
    g_intra_node_gbytes_per_s: float = 10.0
    # concurrent | serialized: traffic inside and between nodes at once, or one after the other.
    links: str = "concurrent"


CENTRAL = Assumptions()
LOW_HIGH = {"l4_gemm_tflops": (54.9, 59.4), "network_efficiency": (0.7, 0.9), "g_intra_node_gbytes_per_s": (6.0, 16.0),
            "links": ("concurrent", "serialized")}


@dataclass(frozen=True)
class Split:
    """Shares of a step's compute: forward, backward, optimizer (clipping, AdamW, zeroing: nothing overlaps it)."""

    forward: float
    backward: float
    optimizer: float


# Measured by bench/record/emulate_rank.py on the H200 at the stacks' per-GPU batch (2 x 2048), world sizes 8 and 16, no
# delays: the mean over the compute-only runs (bench/results/emulate_rank-h200-2026-12-01.jsonl; project: 8 runs,
# forward 0.42-0.55; recipe: 2 runs). The project's forward is half its compute, not a third: the chunked loss
# computes the lm_head's gradients in forward; the recipe's is 44%: the Hugging Face loss materialises fp32 logits
# over the 152k vocabulary in forward. The project's optimizer share (clipping, fused AdamW over fp32 state, the
# gradient casts) hides no communication.
SPLIT = {"recipe": Split(0.444, 0.546, 0.010), "project": Split(0.489, 0.374, 0.137)}
# Activation checkpointing reruns each decoder layer's forward in backward: a third more of the forward and backward
# compute (a layer's forward is 2 of the 6 FLOPs per parameter per token). Not the measured forward share above,
# which holds the chunked loss's lm_head gradients that nothing recomputes.
RECOMPUTE_SHARE = 1 / 3


@dataclass(frozen=True)
class Strategy:
    name: str
    description: str
    step: str  # recipe | project: whose H200 MFU applies
    sharding: str  # full | hybrid | two-level
    reduce_dtype: str
    grad_accum_steps: int = 1
    batch_multiple: int = 1  # the global batch over the recipe's


STRATEGIES = (
    Strategy("recipe", "the original recipe: FSDP1 full shard over all GPUs, size-based wrap (1e7), bf16 weights "
                       "and gradients, every unit gathered in forward and again in backward", "recipe", "full", "bf16"),
    Strategy("project-full", "the project's default before this issue: FSDP2 full shard over all GPUs, weights kept "
                             "from forward to backward, fp32 gradient reduction", "project", "full", "fp32"),
    Strategy("full-bf16", "FSDP2 full shard, bf16 gradient reduction", "project", "full", "bf16"),
    Strategy("hybrid", "HSDP: FSDP2 inside each node, replicas across nodes, fp32 reduction", "project", "hybrid",
             "fp32"),
    Strategy("hybrid-bf16", "HSDP with bf16 reduction", "project", "hybrid", "bf16"),
    Strategy("two-level", "FSDP2 full shard, each gather and reduction in two steps (between nodes, inside a node: "
                          "workload.model.two_level), fp32 reduction", "project", "two-level", "fp32"),
    Strategy("two-level-bf16", "two-level with bf16 reduction", "project", "two-level", "bf16"),
    Strategy("hybrid-bf16-accum2", "HSDP, bf16, 2 micro-batches of half the batch: the same global batch",
             "project", "hybrid", "bf16", grad_accum_steps=2),
    Strategy("hybrid-bf16-accum4-4x", "HSDP, bf16, 4 micro-batches of the default batch: 4x the global batch",
             "project", "hybrid", "bf16", grad_accum_steps=4, batch_multiple=4),
    Strategy("project-full-accum4-4x", "FSDP2 full shard, fp32, 4 micro-batches of the default batch: 4x the "
                                       "global batch", "project", "full", "fp32", grad_accum_steps=4, batch_multiple=4),
)


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_name: str
    nodes: int
    gpus_per_node: int
    inter_node_gbytes_per_s: float
    intra_node_gbytes_per_s: float
    gpu_memory_gib: float
    instance_type: str = ""


def stack_hardware(stack: str) -> Hardware:
    """A stack's GPU nodes from its Pulumi.<stack>.yaml over Pulumi.yaml's defaults, and their instance facts; the
    bandwidths as documented (Assumptions scale them)."""
    from tests.support.instance_facts import INSTANCE_FACTS
    from tests.support.pulumi_mocks import stack_settings

    settings = stack_settings(stack)
    facts = INSTANCE_FACTS[settings["gpuInstanceType"]]
    return Hardware(stack, facts.gpu_name, settings["gpuNodeCount"], facts.gpus, facts.network_gbps / 8,
                    INTRA_NODE_GBYTES_PER_S.get(facts.instance_type, 0.0), facts.gpu_memory_mib * 2**20 / GIB,
                    facts.instance_type)


def saved_hardware(stack: str) -> Hardware:
    """A stack's Hardware from STACK_HARDWARE (written by main), where the stack files cannot be read."""
    return Hardware(**json.loads(STACK_HARDWARE.read_text())[stack])


def intra_node_gbytes_per_s(hardware: Hardware, assumptions: Assumptions) -> float:
    if hardware.instance_type in G_FAMILY:
        return assumptions.g_intra_node_gbytes_per_s
    return hardware.intra_node_gbytes_per_s


def assumed_links(hardware: Hardware, assumptions: Assumptions) -> Hardware:
    """`hardware` with the bandwidths the assumptions give."""
    return replace(hardware, inter_node_gbytes_per_s=hardware.inter_node_gbytes_per_s * assumptions.network_efficiency,
                   intra_node_gbytes_per_s=intra_node_gbytes_per_s(hardware, assumptions))
