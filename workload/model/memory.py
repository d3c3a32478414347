"""Parameters and peak GPU memory per rank of the training step, for any decoder the project knows the config of.

`parameter_count(config)` counts what transformers builds from a config.json: workload.model.structure's shapes,
recorded from the meta-built model where one was built, else derived by the family's layout (Qwen2's biased q/k/v,
Phi-3's and GLM-4's fused projections, StarCoder2's two-matrix MLP and biased LayerNorms, q/k norms, each family's
norms a layer, a mixture of experts' experts and router, tied or untied embeddings with each family's default). `estimate(config, ...)` projects one rank's peak of torch.cuda.max_memory_allocated() during
workload.model.step.train_step, term by term:

- state: FSDP's sharded fp32 weights and AdamW's two fp32 moments (12 bytes a parameter over the shards), and the
  sharded fp32 gradients once backward has made them (4 more);
- gathered weights: bf16 copies of the units FSDP has all-gathered. Without reshard_after_forward every layer keeps
  its copy from its forward to its backward, so at the loss the whole model is there in bf16; with it, the root
  (embedding, final norm, lm_head) and the two layers in flight (one computing, one prefetched);
- activations: what each decoder layer saves for backward, per token (ACTIVATION_BYTES below, counted from what
  autograd saves in the eager Hugging Face layer); with activation checkpointing each layer keeps its input only, and
  backward recomputes one layer at a time;
- the loss: workload.model.loss.LinearCrossEntropy keeps the hidden states' and the lm_head's gradients from
  forward, and while a chunk computes it holds the chunk's logits several times over (bf16, fp32, the softmax and its
  gradient);
- accumulation: with --grad_accum_steps k > 1, FSDP2 keeps each layer's weights gathered across the micro-batches and
  accumulates the unsharded gradients in the reduce dtype (FSDPParam.to_accumulated_grad_if_needed).

The peak is the largest of three moments: the last micro-batch's loss (everything above but the sharded gradients),
the root's gradient reduction at the end of backward (the layers' sharded gradients made, the root's weights
resharded, and its unsharded bf16 gradients beside their reduce-dtype copy, the reduce-scatter's input: FSDP2's
FSDPParamGroup.post_backward reshards, then foreach_reduce copies), and the optimizer step (all the state, the root's
weights). With the untied 152k/128k vocabularies of the 7-8B models and their state sharded 4 to 8 ways, the second
is the peak of the plans with checkpointing and reshard_after_forward, at any micro-batch (bench/record/memory_cap.py).
bench/record/memory_bench.py measures it on an H200 with a fake process group at the cluster's world size (each rank's real
shards) and checks each projection; bench/results/RESULTS.md has the figures. On top of what PyTorch allocates a job
needs the CUDA context, NCCL's buffers and the caching allocator's slack: `fits` keeps those free.

Two-level collectives (--sharding two-level, which auto picks for full training on a slow network:
workload.model.two_level) hold full sharding's share, and stage each unit's step between nodes in a column of
1/ranks_per_node of its gradients (and of its weights while they are gathered). The root's column is the only one of
any size (Qwen2.5-7B on 2 x 4 ranks: 0.51 GiB in bf16, 1.02 in fp32; a layer's is 0.11 GiB in bf16). It is allocated
during the root's reduction, after the root's bf16 gradients are copied out and freed, so the allocated peak may not
show it; but on the reduce-scatter stream, whose pool cannot take the blocks just freed on the compute stream, so
what the card runs out of, the reserved memory, grows by it. Counted as allocated, at the root's reduction, where the
7-8B plans peak (`two_level_ranks_per_node`); bench/record/memory_cap.py --sharding two-level measures it.

--method lora and qlora (a frozen base, trained adapters) change the state, the gathered weights, the activations and
the root's reduction: workload/model/adapters/memory.py counts them, and `estimate(..., method=...)` takes them.

Standard library only: the Pulumi program imports this, and it must not pull in torch.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from workload.model import structure
from workload.model.adapters import memory as adapter_memory
from workload.model.structure import (  # noqa: F401
    DEFAULT_LAYER_NORMS,
    FULL_QK_NORMS,
    HEAD_QK_NORMS,
    LAYER_NORMS,
    TIED_BY_DEFAULT,
    experts,
    layer_shapes,
    root_shapes,
    tied_embeddings,
)

GIB = 2**30

SHARDED_BYTES_PER_PARAMETER = 16  # fp32 weight, fp32 gradient, AdamW's two fp32 moments
STATE_BYTES_BEFORE_GRADIENTS = 12  # the same, before backward has produced this step's gradients
GATHERED_BYTES_PER_PARAMETER = 2  # bf16, FSDP's compute dtype
REDUCE_BYTES = {"fp32": 4, "bf16": 2, "auto": 4}  # auto may choose fp32: the larger
# The root's gradient reduction, bytes per root parameter: its bf16 gradients and their reduce-dtype copy. fp32: 2 + 4
# counted, and measured (with STEP_WORKSPACE_GIB) on Qwen2.5-7B and Llama-3.1-8B, memory_cap-h200-2026-12-03-run1.log.
# bf16: 2 + 2 counted, but measured 4.6 to 4.9 (Qwen2.5-7B on 8 ranks 18.46 GiB at 1 x 2048, 18.83 at 2 x 2048;
# Llama-3.1-8B 19.34 at 2 x 2048: memory_cap-h200-2026-12-03-run2.log): with the copy gone the peak moves into the
# backward of the last layers, where a recomputed layer's activations and its gradients are alive, which this term
# stands for at these batch sizes rather than counts.
ROOT_REDUCTION_BYTES = {"fp32": 6, "bf16": 5, "auto": 6}
LAYERS_IN_FLIGHT = 2  # with reshard_after_forward: the layer computing and the one FSDP prefetches
# Bytes a decoder layer saves for backward per token, in units of its widths (h hidden, q = heads x head_dim,
# kv = key/value heads x head_dim, i intermediate), from what autograd keeps in the eager bf16 layer:
# two RMSNorms each keep their fp32 input, its bf16 cast and their bf16 output (8h each); attention keeps q and k
# after rotary, v, SDPA's output and o_proj's contiguous input (6q + 4kv); the MLP keeps gate, silu(gate), up and
# their product (8i). Qwen3's q/k norms add the same per width as an RMSNorm (8q + 8kv).
ACTIVATION_BYTES = {"hidden": 16, "query": 6, "key_value": 4, "intermediate": 8}
QK_NORM_ACTIVATION_BYTES = {"query": 8, "key_value": 8}
UNGATED_MLP_ACTIVATION_BYTES = 4  # a two-matrix MLP (StarCoder2): the bf16 fc output and its activation, 4i
NORM_ACTIVATION_BYTES_PER_HIDDEN = 8  # one RMSNorm over the hidden width: its fp32 input, bf16 cast and output
# Eager attention (what transformers runs for Gemma 2, whose attn_logit_softcapping SDPA cannot do) keeps the
# attention scores of every head per token pair: the capped scores' tanh (bf16, 2 bytes), the fp32 softmax (4) and its
# bf16 cast that multiplies the values (2).
EAGER_ATTENTION_BYTES_PER_SCORE = 8
CHECKPOINTED_BYTES_PER_HIDDEN = 2  # with activation checkpointing a layer keeps its bf16 input only
# The loss chunk (workload.model.loss.LOSS_CHUNK_TOKENS) in the eager kernel (_chunk_loss_and_grad), at its
# fullest, the subtraction of the one-hot: the bf16 logits (2 bytes a logit), their fp32 copy (4), the bool one-hot (1),
# exp() in fp32 (4), the one-hot cast to fp32 (4) and the difference (4). (A first count of 13 left out the one-hot's
# fp32 cast and the difference; the H200 showed the missing ~6 bytes a logit: bench/results/RESULTS.md.) Compiled
# (torch.compile on CUDA) the kernel fuses them, so this is an upper bound for the compiled job.
LOSS_CHUNK_TOKENS = 8192
LOSS_BYTES_PER_LOGIT = 19
# Compiled, the kernel reads the bf16 logits and writes their bf16 gradient; nothing else of chunk x vocabulary.
COMPILED_LOSS_BYTES_PER_LOGIT = 4
# Gemma 2's final_logit_softcapping in the eager kernel (workload.model.loss._capped): the bf16 tanh, the capped
# logits in bf16 and fp32, the tanh in fp32 (for the gradient) and the gradient's factor 1 - tanh^2 in fp32.
SOFTCAP_LOSS_BYTES_PER_LOGIT = 16
# A compiled layer (torch.compile, as the job runs on a GPU) saves less than the eager one: Inductor's partitioner
# recomputes cheap element-wise results in backward instead of keeping them. This share of the eager count comes from
# the compiled Qwen2.5-1.5B step's 5.0 GiB per 2048-token sequence (bench/results/step_bench-h200-2026-11-29.log,
# less its 1.2 GiB of loss chunk: 3.8 of an eager 5.7 GiB); memory_bench's compiled cases check it on four others.
COMPILED_ACTIVATION_SHARE = 0.71
# (0.67 at first; the compiled runs without checkpointing measured 0.4% to 2.5% over their projections at 0.67:
# Llama-3.1-8B on p5's HSDP 2 x 8 46.75 GiB against 46.38, Qwen2.5-1.5B on dev's HSDP 2 x 4 18.07 against 17.63,
# bench/results/memory_cap-h200-2026-12-03-run1.log; memory_bench-h200-2026-12-01-run2.log's compiled Llama-3.1-8B,
# Qwen2.5-0.5B and Llama-3.2-3B. 0.71 and STEP_WORKSPACE_GIB bring each under its projection.)
FINAL_NORM_BYTES_PER_HIDDEN = 10  # the final RMSNorm's saved tensors and the loss's reshaped bf16 input

# What every moment holds besides the terms above (cuBLAS's workspaces, the batch, the loss, clipping's norms): the
# residual of the root's gradient reduction, the counted peak of the checkpointed and resharded 7-8B plans, measured
# 0.07 to 0.09 GiB over its count (Qwen2.5-7B on 8 ranks 19.84-19.86 GiB against 19.77 counted, Llama-3.1-8B on
# HSDP 2 x 4 34.87 against 34.81: bench/results/memory_cap-h200-2026-12-03-run1.log).
STEP_WORKSPACE_GIB = 0.125

NCCL_BUFFERS_GIB = 1.0  # NCCL's own buffers on a multi-rank job, outside PyTorch's allocator
CUDA_CONTEXT_GIB = 0.5  # what the CUDA context takes of the card before PyTorch allocates anything
# The projection counts allocated memory; the caching allocator reserves more, and a job runs out of memory on
# reserved memory. This much is kept free of the card, for the allocator run as the job runs it
# (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). Measured under torch.cuda.set_per_process_memory_fraction at an
# L4's usable memory less NCCL's buffers (20.85 GiB; bench/results/memory_cap-h200-2026-12-03-run1.log): every plan ran
# with expandable segments, the tightest (Qwen2.5-7B on 8 ranks, allocated peak 19.84) with 1.0 GiB between its peak
# and the cap. The allocator's default ran out of memory on that plan with 2.0 GiB free (it reserved 28.8 GiB for
# 19.9 allocated left uncapped; expandable segments 26.9): no margin makes the default safe there, so the job sets
# expandable segments and the margin is what it measured, 1.0 GiB (2.0 before, a guess).
MARGIN_GIB = 1.0


def _widths(config: dict) -> dict[str, int]:
    """structure.widths under the plan's names: a head_dim or key/value heads config.json omits is the family's class
    default (structure.HEAD_DIM_DEFAULTS, KV_HEADS_DEFAULTS)."""
    sizes = structure.widths(config)
    return {"hidden": sizes["h"], "query": sizes["q"], "head_dim": sizes["head_dim"], "key_value": sizes["kv"],
            "intermediate": sizes["i"]}


def _gated_mlp(config: dict) -> bool:
    return bool(experts(config)) or any("gate" in name for name in structure.linear_shapes(config))


def _has_qk_norm(config: dict) -> bool:
    return config.get("model_type") in HEAD_QK_NORMS + FULL_QK_NORMS


def _eager_attention(config: dict) -> bool:
    return bool(config.get("attn_logit_softcapping"))


def unit_shapes(config: dict) -> list[tuple[str, list[tuple[int, ...]]]]:
    """workload.model.parallel.fsdp_units of the model built from `config`, without building it: the root, then each
    layer, with their parameters' shapes (bench/model/step_model.py predicts the collectives of any model from these)."""
    layer = layer_shapes(config)
    return [("root", root_shapes(config)), *((f"layers.{index}", layer)
                                              for index in range(config["num_hidden_layers"]))]


def layer_parameters(config: dict) -> int:
    return sum(math.prod(shape) for shape in layer_shapes(config))


def root_parameters(config: dict) -> int:
    return sum(math.prod(shape) for shape in root_shapes(config))


def parameter_count(config: dict) -> int:
    """Parameters of the model transformers builds from `config` (a config.json as a dict; workload.model.structure:
    recorded from the built model, or derived by its family); a tied lm_head is the embedding, counted once.
    7,615,616,512 for Qwen2.5-7B, 8,030,261,248 for Llama-3.1-8B."""
    return structure.parameter_count(config)


def activation_bytes_per_token(config: dict, seq_len: int = 0) -> int:
    """What one decoder layer saves for backward per token (ACTIVATION_BYTES, with the family's norms), in a sequence
    of `seq_len` tokens (what eager attention's scores grow with)."""
    widths = _widths(config)
    total = sum(ACTIVATION_BYTES[name] * widths[name] for name in ACTIVATION_BYTES)
    if not _gated_mlp(config):  # StarCoder2's c_fc -> GELU -> c_proj keeps the GELU's input and output only
        total -= (ACTIVATION_BYTES["intermediate"] - UNGATED_MLP_ACTIVATION_BYTES) * widths["intermediate"]
    norms = LAYER_NORMS.get(config.get("model_type"), DEFAULT_LAYER_NORMS)
    total += (norms - DEFAULT_LAYER_NORMS) * NORM_ACTIVATION_BYTES_PER_HIDDEN * widths["hidden"]
    if _has_qk_norm(config):
        total += sum(QK_NORM_ACTIVATION_BYTES[name] * widths[name] for name in QK_NORM_ACTIVATION_BYTES)
    if _eager_attention(config):
        total += EAGER_ATTENTION_BYTES_PER_SCORE * config["num_attention_heads"] * seq_len
    return total


def _loss_bytes_per_logit(config: dict, compiled: bool) -> int:
    if compiled:
        return COMPILED_LOSS_BYTES_PER_LOGIT
    return LOSS_BYTES_PER_LOGIT + (SOFTCAP_LOSS_BYTES_PER_LOGIT if config.get("final_logit_softcapping") else 0)


@dataclass(frozen=True)
class MemoryEstimate:
    """One rank's projected peak of allocated GPU memory (GiB), and its parts at the larger of its two moments."""

    parameters: int
    state_gib: float
    gathered_weights_gib: float
    activations_gib: float
    loss_gib: float
    accumulated_gradients_gib: float
    root_gradients_gib: float
    """The root's unsharded gradients and their reduce-dtype copy, where the peak is the root's gradient reduction."""
    allocated_gib: float
    """The projected torch.cuda.max_memory_allocated()."""
    peak_gib: float
    """allocated_gib plus NCCL's buffers: what the job needs of the card besides the CUDA context and the margin."""
    two_level_staging_gib: float = 0.0
    """Two-level's column of the root's gradients, where the peak is the root's gradient reduction."""

    def as_dict(self) -> dict:
        return {key: (round(value, 2) if isinstance(value, float) else value) for key, value in asdict(self).items()}


def _moments(config: dict, *, micro_batch: int, seq_len: int, activation_checkpointing: bool,
             reshard_after_forward: bool, grad_accum_steps: int, reduce_dtype: str,
             compiled: bool, method: str = "full", lora_rank: int = 16, lora_targets: str = "all-linear",
             lora_dropout: float = 0.0, two_level_ranks_per_node: int = 0) -> dict[str, tuple[dict, int]]:
    """The three moments the peak can fall on, each as (its unsharded parts in bytes, the bytes FSDP shards over
    every shard): the last micro-batch's loss, the root's gradient reduction, and the optimizer step. --method lora
    and qlora: workload.model.adapters.memory's, from the same activations and loss."""
    parameters = parameter_count(config)
    layers = config["num_hidden_layers"]
    per_layer, root = layer_parameters(config), root_parameters(config)
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    tokens = micro_batch * seq_len
    loss_tokens = micro_batch * (seq_len - 1)  # the last position of each sequence predicts nothing
    accumulating = grad_accum_steps > 1
    if reshard_after_forward and not accumulating:
        gathered = GATHERED_BYTES_PER_PARAMETER * (root + LAYERS_IN_FLIGHT * per_layer)
    else:
        # Kept from forward to backward, or (accumulating) across the micro-batches: train_step sets
        # set_reshard_after_backward(False) before the last one.
        gathered = GATHERED_BYTES_PER_PARAMETER * parameters
    layer_activation = activation_bytes_per_token(config, seq_len) * tokens
    if compiled:
        layer_activation = int(layer_activation * COMPILED_ACTIVATION_SHARE)
    if activation_checkpointing:
        activations = CHECKPOINTED_BYTES_PER_HIDDEN * hidden * tokens * layers + layer_activation
    else:
        activations = layer_activation * layers
    activations += FINAL_NORM_BYTES_PER_HIDDEN * hidden * tokens
    chunks = max(1, -(-loss_tokens // LOSS_CHUNK_TOKENS))
    chunk = -(-loss_tokens // chunks)
    # The hidden states' gradient, and the lm_head's where it trains (a frozen head gets none: workload.model.loss).
    head_gradient = vocab * hidden if method == "full" else 0
    loss = (GATHERED_BYTES_PER_PARAMETER * (loss_tokens * hidden + head_gradient)
            + _loss_bytes_per_logit(config, compiled) * chunk * vocab)
    workspace = int(STEP_WORKSPACE_GIB * GIB)
    if method != "full":
        return adapter_memory.moments(
            config, method=method, rank=lora_rank, targets=lora_targets, dropout=lora_dropout, parameters=parameters,
            root=root, per_layer=per_layer, activations=activations, tokens=tokens, loss=loss,
            activated_layers=1 if activation_checkpointing else layers, reduce_bytes=REDUCE_BYTES[reduce_dtype],
            # The frozen base is resharded after each micro-batch (workload.model.step.train_step).
            gathered_all=not reshard_after_forward, accumulating=accumulating, compiled=compiled,
            workspace=workspace, layers_in_flight=LAYERS_IN_FLIGHT)
    accumulated = REDUCE_BYTES[reduce_dtype] * parameters if accumulating else 0
    # Two-level's column of the root's gradients, staged for the step between nodes (workload.model.two_level's
    # TwoLevelReduceScatter): nodes x (root / world) elements in the reduce dtype.
    staging = (REDUCE_BYTES[reduce_dtype] * root // two_level_ranks_per_node) if two_level_ranks_per_node else 0
    gradient_bytes = SHARDED_BYTES_PER_PARAMETER - STATE_BYTES_BEFORE_GRADIENTS
    return {
        "loss": ({"gathered_weights": gathered, "activations": activations, "loss": loss,
                  "accumulated_gradients": accumulated, "workspace": workspace},
                 STATE_BYTES_BEFORE_GRADIENTS * parameters),
        # The root's unsharded bf16 gradients (the embedding's, and the lm_head's the loss made in forward) and their
        # reduce-dtype copy; the root's weights are resharded first unless accumulation keeps them gathered.
        "root reduction": ({"gathered_weights": GATHERED_BYTES_PER_PARAMETER * root if accumulating else 0,
                            "root_gradients": ROOT_REDUCTION_BYTES[reduce_dtype] * root,
                            "two_level_staging": staging,
                            "accumulated_gradients": accumulated, "workspace": workspace},
                           STATE_BYTES_BEFORE_GRADIENTS * parameters + gradient_bytes * (parameters - root)),
        "optimizer step": ({"gathered_weights": GATHERED_BYTES_PER_PARAMETER * root,
                            "accumulated_gradients": accumulated, "workspace": workspace},
                           SHARDED_BYTES_PER_PARAMETER * parameters),
    }


def estimate(config: dict, *, micro_batch: int, seq_len: int, shards: int, activation_checkpointing: bool = False,
             reshard_after_forward: bool = False, grad_accum_steps: int = 1, reduce_dtype: str = "fp32",
             compiled: bool = False, ranks: int | None = None, method: str = "full", lora_rank: int = 16,
             lora_targets: str = "all-linear", lora_dropout: float = 0.0,
             two_level_ranks_per_node: int = 0) -> MemoryEstimate:
    """The peak of one rank of workload.model.step.train_step: `micro_batch` sequences of `seq_len` tokens per
    forward, the state sharded `shards` ways (all ranks with full sharding, a node's with HSDP), eager or `compiled`
    (the job's default on a GPU). `ranks`: the job's world size (NCCL's buffers only where there are two or more;
    default `shards`). `method` and the lora_* settings: --method and its flags (workload.model.adapters.memory).
    `parameters` stays the model's count; the trained ones are adapter_memory.adapter_parameters.
    `two_level_ranks_per_node`: full training with two-level collectives on nodes of this many ranks (0: without)."""
    parameters = parameter_count(config)
    moments = _moments(config, micro_batch=micro_batch, seq_len=seq_len,
                       activation_checkpointing=activation_checkpointing,
                       reshard_after_forward=reshard_after_forward, grad_accum_steps=grad_accum_steps,
                       reduce_dtype=reduce_dtype, compiled=compiled, method=method, lora_rank=lora_rank,
                       lora_targets=lora_targets, lora_dropout=lora_dropout,
                       two_level_ranks_per_node=two_level_ranks_per_node)
    totals = {name: sum(parts.values()) + sharded / shards for name, (parts, sharded) in moments.items()}
    parts, sharded = moments[max(totals, key=totals.get)]
    allocated = max(totals.values())
    nccl = NCCL_BUFFERS_GIB if (ranks or shards) > 1 else 0.0
    return MemoryEstimate(
        parameters=parameters, state_gib=sharded / shards / GIB,
        gathered_weights_gib=parts["gathered_weights"] / GIB, activations_gib=parts.get("activations", 0) / GIB,
        loss_gib=parts.get("loss", 0) / GIB, accumulated_gradients_gib=parts["accumulated_gradients"] / GIB,
        root_gradients_gib=parts.get("root_gradients", 0) / GIB, allocated_gib=allocated / GIB,
        peak_gib=allocated / GIB + nccl, two_level_staging_gib=parts.get("two_level_staging", 0) / GIB)


def shards_needed(config: dict, *, usable: float, micro_batch: int, seq_len: int, **settings) -> int | None:
    """The fewest shards (GPUs sharing the state) at which the estimate fits `usable`, in closed form: each moment's
    peak is a + b / shards. None when no shard count fits (what FSDP does not shard is already too much)."""
    budget = usable - MARGIN_GIB - NCCL_BUFFERS_GIB
    needed = 1
    for parts, sharded in _moments(config, micro_batch=micro_batch, seq_len=seq_len, **settings).values():
        unsharded = sum(parts.values()) / GIB
        if unsharded >= budget:
            return None
        needed = max(needed, math.ceil(sharded / GIB / (budget - unsharded)))
    return needed


def usable_gib(gpu_memory_mib: int) -> float:
    """What PyTorch can allocate on a GPU of `gpu_memory_mib` (EC2's figure for the instance type's GPU)."""
    return gpu_memory_mib / 1024 - CUDA_CONTEXT_GIB


def fits(peak_gib: float, usable: float) -> bool:
    return peak_gib + MARGIN_GIB <= usable


def sharded_gib(parameters: int) -> float:
    return SHARDED_BYTES_PER_PARAMETER * parameters / GIB


def projected_peak_gib(*, fixed_gib: float, per_sequence_gib: float, parameters: int, batch_size: int,
                       shards: int, extra_gib: float = 0.0) -> float:
    """bench/record/step_bench.py's extrapolation of a one-GPU measurement (fixed + per_sequence x batch) to `shards`-way
    sharding, plus NCCL's buffers and `extra_gib`."""
    return (fixed_gib - sharded_gib(parameters) * (1 - 1 / shards) + per_sequence_gib * batch_size
            + NCCL_BUFFERS_GIB + extra_gib)
