"""Parameters and peak GPU memory per rank of the training step, for any decoder the project knows the config of.

`parameter_count(config)` counts what transformers builds from a config.json (Qwen2's biased q/k/v, Llama's and
Qwen3's `attention_bias`, Llama's `mlp_bias`, `head_dim` where it is not hidden / heads, the q/k norms of Qwen3 and
Gemma 3 (one head wide) and OLMo 2 (all heads wide), Gemma 2's and 3's four norms a layer and OLMo 2's two, a
mixture of experts' experts and router, tied or untied embeddings with each family's default). `estimate(config, ...)` projects one rank's peak of torch.cuda.max_memory_allocated() during
workload.model.causal_lm.train_step, term by term:

- state: FSDP's sharded fp32 weights and AdamW's two fp32 moments (12 bytes a parameter over the shards), and the
  sharded fp32 gradients once backward has made them (4 more);
- gathered weights: bf16 copies of the units FSDP has all-gathered. Without reshard_after_forward every layer keeps
  its copy from its forward to its backward, so at the loss the whole model is there in bf16; with it, the root
  (embedding, final norm, lm_head) and the two layers in flight (one computing, one prefetched);
- activations: what each decoder layer saves for backward, per token (ACTIVATION_BYTES below, counted from what
  autograd saves in the eager Hugging Face layer); with activation checkpointing each layer keeps its input only, and
  backward recomputes one layer at a time;
- the loss: workload.model.causal_lm.LinearCrossEntropy keeps the hidden states' and the lm_head's gradients from
  forward, and while a chunk computes it holds the chunk's logits several times over (bf16, fp32, the softmax and its
  gradient);
- accumulation: with --grad_accum_steps k > 1, FSDP2 keeps each layer's weights gathered across the micro-batches and
  accumulates the unsharded gradients in the reduce dtype (FSDPParam.to_accumulated_grad_if_needed).

The peak is the larger of two moments: the last micro-batch's loss (everything above but the sharded gradients), and
the optimizer step (all the state, the root's weights).
bench/memory_bench.py measures it on an H200 with a fake process group at the cluster's world size (each rank's real
shards) and checks each projection; bench/results/RESULTS.md has the figures. On top of what PyTorch allocates a job
needs the CUDA context, NCCL's buffers and the caching allocator's slack: `fits` keeps those free.

Standard library only: the Pulumi program imports this, and it must not pull in torch.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

GIB = 2**30

SHARDED_BYTES_PER_PARAMETER = 16  # fp32 weight, fp32 gradient, AdamW's two fp32 moments
STATE_BYTES_BEFORE_GRADIENTS = 12  # the same, before backward has produced this step's gradients
GATHERED_BYTES_PER_PARAMETER = 2  # bf16, FSDP's compute dtype
REDUCE_BYTES = {"fp32": 4, "bf16": 2, "auto": 4}  # auto may choose fp32: the larger
LAYERS_IN_FLIGHT = 2  # with reshard_after_forward: the layer computing and the one FSDP prefetches
# Bytes a decoder layer saves for backward per token, in units of its widths (h hidden, q = heads x head_dim,
# kv = key/value heads x head_dim, i intermediate), from what autograd keeps in the eager bf16 layer:
# two RMSNorms each keep their fp32 input, its bf16 cast and their bf16 output (8h each); attention keeps q and k
# after rotary, v, SDPA's output and o_proj's contiguous input (6q + 4kv); the MLP keeps gate, silu(gate), up and
# their product (8i). Qwen3's q/k norms add the same per width as an RMSNorm (8q + 8kv).
ACTIVATION_BYTES = {"hidden": 16, "query": 6, "key_value": 4, "intermediate": 8}
QK_NORM_ACTIVATION_BYTES = {"query": 8, "key_value": 8}
NORM_ACTIVATION_BYTES_PER_HIDDEN = 8  # one RMSNorm over the hidden width: its fp32 input, bf16 cast and output
# Norms of the hidden width per decoder layer, by model_type (transformers' modeling_<type>.py decoder layers): Gemma 2
# and 3 norm before and after both attention and MLP; OLMo 2 after each only; the others before each.
LAYER_NORMS = {"gemma2": 4, "gemma3_text": 4, "olmo2": 2}
DEFAULT_LAYER_NORMS = 2
# q/k norms: one head wide (Qwen3, Gemma 3: q_norm and k_norm of head_dim), or over all heads (OLMo 2: q_norm of
# heads x head_dim, k_norm of key/value heads x head_dim). The activation they keep is the same per token either way.
HEAD_QK_NORMS = ("qwen3", "gemma3_text")
FULL_QK_NORMS = ("olmo2",)
# Families whose config class ties the lm_head to the embedding when config.json does not say (transformers'
# configuration_gemma2.py / configuration_gemma3.py default tie_word_embeddings=True; Llama, Mistral, Qwen2, Qwen3,
# Phi-3, OLMo 2 and Mixtral default to False). A config without a model_type is workload.config's Qwen2, which says.
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text")
# Eager attention (what transformers runs for Gemma 2, whose attn_logit_softcapping SDPA cannot do) keeps the
# attention scores of every head per token pair: the capped scores' tanh (bf16, 2 bytes), the fp32 softmax (4) and its
# bf16 cast that multiplies the values (2).
EAGER_ATTENTION_BYTES_PER_SCORE = 8
CHECKPOINTED_BYTES_PER_HIDDEN = 2  # with activation checkpointing a layer keeps its bf16 input only
# The loss chunk (workload.model.causal_lm.LOSS_CHUNK_TOKENS) in the eager kernel (_chunk_loss_and_grad), at its
# fullest, the subtraction of the one-hot: the bf16 logits (2 bytes a logit), their fp32 copy (4), the bool one-hot (1),
# exp() in fp32 (4), the one-hot cast to fp32 (4) and the difference (4). (A first count of 13 left out the one-hot's
# fp32 cast and the difference; the H200 showed the missing ~6 bytes a logit: bench/results/RESULTS.md.) Compiled
# (torch.compile on CUDA) the kernel fuses them, so this is an upper bound for the compiled job.
LOSS_CHUNK_TOKENS = 8192
LOSS_BYTES_PER_LOGIT = 19
# Compiled, the kernel reads the bf16 logits and writes their bf16 gradient; nothing else of chunk x vocabulary.
COMPILED_LOSS_BYTES_PER_LOGIT = 4
# Gemma 2's final_logit_softcapping in the eager kernel (workload.model.causal_lm._capped): the bf16 tanh, the capped
# logits in bf16 and fp32, the tanh in fp32 (for the gradient) and the gradient's factor 1 - tanh^2 in fp32.
SOFTCAP_LOSS_BYTES_PER_LOGIT = 16
# A compiled layer (torch.compile, as the job runs on a GPU) saves less than the eager one: Inductor's partitioner
# recomputes cheap element-wise results in backward instead of keeping them. This share of the eager count comes from
# the compiled Qwen2.5-1.5B step's 5.0 GiB per 2048-token sequence (bench/results/step_bench-h200-2026-11-29.log,
# less its 1.2 GiB of loss chunk: 3.8 of an eager 5.7 GiB); memory_bench's compiled cases check it on four others.
COMPILED_ACTIVATION_SHARE = 0.67
FINAL_NORM_BYTES_PER_HIDDEN = 10  # the final RMSNorm's saved tensors and the loss's reshaped bf16 input

NCCL_BUFFERS_GIB = 1.0  # NCCL's own buffers on a multi-rank job, outside PyTorch's allocator
CUDA_CONTEXT_GIB = 0.5  # what the CUDA context takes of the card before PyTorch allocates anything
# The measurement counts allocated memory; the caching allocator reserves more (fragmentation), and a job that
# runs out of memory does so on reserved memory. This much is kept free.
MARGIN_GIB = 2.0


def _widths(config: dict) -> dict[str, int]:
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    return {"hidden": hidden, "query": heads * head_dim, "head_dim": head_dim,
            "key_value": config.get("num_key_value_heads", heads) * head_dim,
            "intermediate": config["intermediate_size"]}


def _has_qk_norm(config: dict) -> bool:
    return config.get("model_type") in HEAD_QK_NORMS + FULL_QK_NORMS


def _eager_attention(config: dict) -> bool:
    return bool(config.get("attn_logit_softcapping"))


def experts(config: dict) -> int:
    """Routed experts per layer of a mixture-of-experts config (Mixtral's num_local_experts, Qwen-MoE's num_experts);
    0 for a dense one."""
    return int(config.get("num_local_experts") or config.get("num_experts") or 0)


def _mlp_shapes(config: dict, hidden: int, intermediate: int) -> list[tuple[int, ...]]:
    """A layer's MLP: gate, up and down, or a mixture of experts: the router and the experts' gate-and-up and down,
    each one tensor over all experts as transformers 5 builds them (of moe_intermediate_size where the config has
    one)."""
    count = experts(config)
    if not count:
        shapes = [(intermediate, hidden), (intermediate, hidden), (hidden, intermediate)]
        return shapes + ([(intermediate,), (intermediate,), (hidden,)] if config.get("mlp_bias") else [])
    width = config.get("moe_intermediate_size") or intermediate
    return [(count, hidden), (count, 2 * width, hidden), (count, hidden, width)]


def layer_shapes(config: dict) -> list[tuple[int, ...]]:
    """The parameter shapes of one decoder layer, as transformers builds it for the config's model_type. A config
    without one (the random-weight architectures of workload.config) is Qwen2's."""
    widths = _widths(config)
    hidden, query, kv, intermediate = widths["hidden"], widths["query"], widths["key_value"], widths["intermediate"]
    model_type = config.get("model_type", "qwen2")
    # Qwen2Attention: q, k, v always biased, o never. Llama, Mistral and Qwen3: attention_bias on all four.
    qkv_bias = model_type == "qwen2" or bool(config.get("attention_bias"))
    o_bias = model_type != "qwen2" and bool(config.get("attention_bias"))
    # Phi-3 fuses q, k and v into qkv_proj, and gate and up into gate_up_proj: the same parameters in fewer tensors.
    fused = model_type == "phi3"
    shapes = [(query + 2 * kv, hidden), (hidden, query)] if fused else [(query, hidden), (kv, hidden), (kv, hidden),
                                                                         (hidden, query)]
    shapes += [(query,), (kv,), (kv,)] if qkv_bias else []
    shapes += [(hidden,)] if o_bias else []
    if model_type in HEAD_QK_NORMS:
        shapes += [(widths["head_dim"],)] * 2
    elif model_type in FULL_QK_NORMS:
        shapes += [(query,), (kv,)]
    shapes += [(2 * intermediate, hidden), (hidden, intermediate)] if fused else _mlp_shapes(config, hidden,
                                                                                             intermediate)
    return shapes + [(hidden,)] * LAYER_NORMS.get(model_type, DEFAULT_LAYER_NORMS)


def root_shapes(config: dict) -> list[tuple[int, ...]]:
    """What FSDP's root unit holds: the embedding, the final norm, and an untied lm_head."""
    embedding = (config["vocab_size"], config["hidden_size"])
    tied = config.get("tie_word_embeddings", config.get("model_type") in TIED_BY_DEFAULT)
    return [embedding, (config["hidden_size"],)] + ([] if tied else [embedding])


def unit_shapes(config: dict) -> list[tuple[str, list[tuple[int, ...]]]]:
    """workload.model.parallel.fsdp_units of the model built from `config`, without building it: the root, then each
    layer, with their parameters' shapes (bench/step_model.py predicts the collectives of any model from these)."""
    layer = layer_shapes(config)
    return [("root", root_shapes(config)), *((f"layers.{index}", layer)
                                              for index in range(config["num_hidden_layers"]))]


def layer_parameters(config: dict) -> int:
    return sum(math.prod(shape) for shape in layer_shapes(config))


def root_parameters(config: dict) -> int:
    return sum(math.prod(shape) for shape in root_shapes(config))


def parameter_count(config: dict) -> int:
    """Parameters of the model transformers builds from `config` (a config.json as a dict); a tied lm_head is the
    embedding, counted once. 7,615,616,512 for Qwen2.5-7B, 8,030,261,248 for Llama-3.1-8B."""
    return config["num_hidden_layers"] * layer_parameters(config) + root_parameters(config)


def activation_bytes_per_token(config: dict, seq_len: int = 0) -> int:
    """What one decoder layer saves for backward per token (ACTIVATION_BYTES, with the family's norms), in a sequence
    of `seq_len` tokens (what eager attention's scores grow with)."""
    widths = _widths(config)
    total = sum(ACTIVATION_BYTES[name] * widths[name] for name in ACTIVATION_BYTES)
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
    allocated_gib: float
    """The projected torch.cuda.max_memory_allocated()."""
    peak_gib: float
    """allocated_gib plus NCCL's buffers: what the job needs of the card besides the CUDA context and the margin."""

    def as_dict(self) -> dict:
        return {key: (round(value, 2) if isinstance(value, float) else value) for key, value in asdict(self).items()}


def _moments(config: dict, *, micro_batch: int, seq_len: int, activation_checkpointing: bool,
             reshard_after_forward: bool, grad_accum_steps: int, reduce_dtype: str,
             compiled: bool) -> dict[str, tuple[dict, int]]:
    """The two moments the peak can fall on, each as (its unsharded parts in bytes, its bytes per parameter that
    FSDP shards): the last micro-batch's loss, and the optimizer step."""
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
    loss = (GATHERED_BYTES_PER_PARAMETER * (loss_tokens * hidden + vocab * hidden)  # the two kept gradients
            + _loss_bytes_per_logit(config, compiled) * chunk * vocab)
    accumulated = REDUCE_BYTES[reduce_dtype] * parameters if accumulating else 0
    return {
        "loss": ({"gathered_weights": gathered, "activations": activations, "loss": loss,
                  "accumulated_gradients": accumulated}, STATE_BYTES_BEFORE_GRADIENTS),
        "optimizer step": ({"gathered_weights": GATHERED_BYTES_PER_PARAMETER * root,
                            "accumulated_gradients": accumulated}, SHARDED_BYTES_PER_PARAMETER),
    }


def estimate(config: dict, *, micro_batch: int, seq_len: int, shards: int, activation_checkpointing: bool = False,
             reshard_after_forward: bool = False, grad_accum_steps: int = 1, reduce_dtype: str = "fp32",
             compiled: bool = False, ranks: int | None = None) -> MemoryEstimate:
    """The peak of one rank of workload.model.causal_lm.train_step: `micro_batch` sequences of `seq_len` tokens per
    forward, the state sharded `shards` ways (all ranks with full sharding, a node's with HSDP), eager or `compiled`
    (the job's default on a GPU). `ranks`: the job's world size (NCCL's buffers only where there are two or more;
    default `shards`)."""
    parameters = parameter_count(config)
    moments = _moments(config, micro_batch=micro_batch, seq_len=seq_len,
                       activation_checkpointing=activation_checkpointing,
                       reshard_after_forward=reshard_after_forward, grad_accum_steps=grad_accum_steps,
                       reduce_dtype=reduce_dtype, compiled=compiled)
    totals = {name: sum(parts.values()) + per_parameter * parameters / shards
              for name, (parts, per_parameter) in moments.items()}
    parts, per_parameter = moments[max(totals, key=totals.get)]
    allocated = max(totals.values())
    nccl = NCCL_BUFFERS_GIB if (ranks or shards) > 1 else 0.0
    return MemoryEstimate(
        parameters=parameters, state_gib=per_parameter * parameters / shards / GIB,
        gathered_weights_gib=parts["gathered_weights"] / GIB, activations_gib=parts.get("activations", 0) / GIB,
        loss_gib=parts.get("loss", 0) / GIB, accumulated_gradients_gib=parts["accumulated_gradients"] / GIB,
        allocated_gib=allocated / GIB, peak_gib=allocated / GIB + nccl)


def shards_needed(config: dict, *, usable: float, micro_batch: int, seq_len: int, **settings) -> int | None:
    """The fewest shards (GPUs sharing the state) at which the estimate fits `usable`, in closed form: each moment's
    peak is a + b / shards. None when no shard count fits (what FSDP does not shard is already too much)."""
    budget = usable - MARGIN_GIB - NCCL_BUFFERS_GIB
    parameters = parameter_count(config)
    needed = 1
    for parts, per_parameter in _moments(config, micro_batch=micro_batch, seq_len=seq_len, **settings).values():
        unsharded = sum(parts.values()) / GIB
        if unsharded >= budget:
            return None
        needed = max(needed, math.ceil(per_parameter * parameters / GIB / (budget - unsharded)))
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
    """bench/step_bench.py's extrapolation of a one-GPU measurement (fixed + per_sequence x batch) to `shards`-way
    sharding, plus NCCL's buffers and `extra_gib`."""
    return (fixed_gib - sharded_gib(parameters) * (1 - 1 / shards) + per_sequence_gib * batch_size
            + NCCL_BUFFERS_GIB + extra_gib)
