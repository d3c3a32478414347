"""Peak GPU memory of the training step, projected from the one measurement bench/step_bench.py made.

`python -m bench.step_bench --memory_batches 1,2` on one H200 (bench/results/step_bench-h200-2026-11-29.log)
measured the default step on Qwen2.5-1.5B at 2048 tokens a sequence: a peak of 24.2 GiB fixed plus 5.0 GiB a
sequence. Of the fixed part, 16 bytes a parameter (fp32 weights, fp32 gradients, two fp32 AdamW moments) is
sharded by FSDP across the ranks; the rest is not. bench/results/RESULTS.md projects the g6 stack's L4s from it,
and the Pulumi program refuses, at preview, a job whose projection does not fit its GPUs.

Standard library only: the Pulumi program imports this, and it must not pull in torch.
"""
from __future__ import annotations

from workload.config import ARCHITECTURES

GIB = 2**30

# The measurement (bench/results/step_bench-h200-2026-11-29.log, "run": "memory").
MEASURED_ARCHITECTURE = "qwen2.5-1.5b"
MEASURED_SEQ_LEN = 2048
MEASURED_FIXED_GIB = 24.2
MEASURED_PER_SEQUENCE_GIB = 5.0

SHARDED_BYTES_PER_PARAMETER = 16
ACCUMULATED_GRADIENT_BYTES_PER_PARAMETER = 4
NCCL_BUFFERS_GIB = 1.0  # NCCL's own buffers on a multi-rank job, which a one-GPU measurement lacks
CUDA_CONTEXT_GIB = 0.5  # what the CUDA context takes of the card before PyTorch allocates anything
# The measurement counts allocated memory; the caching allocator reserves more (fragmentation), and a job that
# runs out of memory does so on reserved memory. The benchmark's "fits" keeps this much free.
MARGIN_GIB = 2.0


def parameter_count(architecture: dict) -> int:
    """Parameters of a Qwen2 architecture (as workload.config.ARCHITECTURES writes them); a tied lm_head is the
    embedding, counted once. 1,543,714,304 for Qwen2.5-1.5B."""
    hidden = architecture["hidden_size"]
    head_dim = hidden // architecture["num_attention_heads"]
    kv_width = architecture["num_key_value_heads"] * head_dim
    attention = (hidden * hidden + hidden) + 2 * (hidden * kv_width + kv_width) + hidden * hidden  # q, k, v biased
    mlp = 3 * hidden * architecture["intermediate_size"]
    layer = attention + mlp + 2 * hidden  # two RMSNorms
    embedding = architecture["vocab_size"] * hidden
    lm_head = 0 if architecture["tie_word_embeddings"] else embedding
    return embedding + architecture["num_hidden_layers"] * layer + hidden + lm_head


def sharded_gib(parameters: int) -> float:
    return SHARDED_BYTES_PER_PARAMETER * parameters / GIB


def projected_peak_gib(*, fixed_gib: float, per_sequence_gib: float, parameters: int, batch_size: int,
                       shards: int, extra_gib: float = 0.0) -> float:
    """Peak per GPU with the sharded state split `shards` ways (every GPU with full sharding, a node's with HSDP),
    plus NCCL's buffers and `extra_gib` (gradients accumulated unsharded across micro-batches)."""
    return (fixed_gib - sharded_gib(parameters) * (1 - 1 / shards) + per_sequence_gib * batch_size
            + NCCL_BUFFERS_GIB + extra_gib)


def _activation_width(architecture: dict) -> int:
    # What a token keeps for backward grows with the layers and, per layer, with the hidden and MLP widths.
    return architecture["num_hidden_layers"] * (architecture["hidden_size"] + architecture["intermediate_size"])


def job_peak_gib(architecture: dict, *, batch_size: int, seq_len: int, shards: int, accumulated: bool = False) -> float:
    """The measurement scaled to `architecture` and `seq_len`: activations by tokens and activation width, the
    unsharded remainder (gathered bf16 weights, workspaces) by parameters. Exact for the measured shape only;
    for the others an estimate, and far below any GPU's memory for `tiny`."""
    measured = ARCHITECTURES[MEASURED_ARCHITECTURE]
    measured_parameters = parameter_count(measured)
    parameters = parameter_count(architecture)
    unsharded = (MEASURED_FIXED_GIB - sharded_gib(measured_parameters)) * parameters / measured_parameters
    per_sequence = (MEASURED_PER_SEQUENCE_GIB * seq_len / MEASURED_SEQ_LEN
                    * _activation_width(architecture) / _activation_width(measured))
    # Accumulating micro-batches holds each rank's gradients unsharded until the step's one reduction; fp32, the
    # larger of the two reduce dtypes.
    extra = ACCUMULATED_GRADIENT_BYTES_PER_PARAMETER * parameters / GIB if accumulated else 0.0
    return projected_peak_gib(fixed_gib=unsharded + sharded_gib(parameters), per_sequence_gib=per_sequence,
                              parameters=parameters, batch_size=batch_size, shards=shards, extra_gib=extra)


def usable_gib(gpu_memory_mib: int) -> float:
    """What PyTorch can allocate on a GPU of `gpu_memory_mib` (EC2's figure for the instance type's GPU)."""
    return gpu_memory_mib / 1024 - CUDA_CONTEXT_GIB


def fits(peak_gib: float, usable: float) -> bool:
    return peak_gib + MARGIN_GIB <= usable
