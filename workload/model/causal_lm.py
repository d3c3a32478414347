"""The model, its FSDP2 sharding, its optimizer, its loss and its FLOPs: the training step's pieces, without Ray.

A GPU benchmark drives these directly (torch + transformers only), so nothing here imports ray: `build_model`,
`build_mesh`, `shard_model`, `load_pretrained` (a --model_id's weights, after sharding), `build_optimizer`,
`learning_rate_at`, `loss_fn`, `train_step`, `evaluate`, `flops_per_token`, `peak_flops`.
"""
from __future__ import annotations

import functools
import json
import math
import os

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from transformers import AutoModelForCausalLM, GenerationConfig, PretrainedConfig, Qwen2Config

from workload import cli
from workload.config import ARCHITECTURES, TrainConfig
from workload.model import files as model_files
from workload.model import architectures, compatibility, fp8, model_source, weights
from workload.model import two_level as two_level_collectives
from workload.model.adapters import lora
from workload.model.gpu_peaks import peak_flops_of  # the table is standard library, for the preview

IGNORE_INDEX = -100  # a target that carries no loss (workload/data/chat.py labels prompts with it)
NAMED_CONFIGS = ARCHITECTURES  # --model_config name -> Qwen2Config keyword arguments (workload.config)
GENERATION_CONFIG = "generation_config.json"

# Most tokens per lm_head + cross-entropy chunk. A chunk's bf16 logits and their gradient are chunk x vocab x 2
# bytes each (2.5 GB at 8k tokens and Qwen's 152k vocabulary), instead of fp32 logits for the whole batch (10 GB
# at 8 x 2048 tokens). Measured on an H200 (bench/results): 8k-token chunks beat 4k and 16k.
LOSS_CHUNK_TOKENS = 8192

# --reduce_dtype's names as dtypes; auto is resolved by workload.model.layout, and means fp32 where nothing resolved
# it (one GPU, the benchmarks).
TORCH_REDUCE_DTYPES = {"auto": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16}

# Where the Hugging Face model sits in CausalLMWithLoss (its `lm`), and so in every state dict the job saves.
LM_PREFIX = "lm."


def hf_config(cfg: TrainConfig, directory: str | None = None) -> PretrainedConfig:
    """The architecture to train: a named random-weight config, or --model_id's config.json (from `directory`, the
    model's files on this node, when given; else the copy the project ships, never fetched; else from a local
    directory, s3:// or the Hub, in one request), through the model gate's config checks. A source that does not
    answer, or a gated model without a token, is the environment's problem (exit 3), named in one line."""
    if cfg.model_config:
        return Qwen2Config(**NAMED_CONFIGS[cfg.model_config], use_cache=False)
    what = f"--model_id {cfg.model_id}"
    shipped = architectures.published(cfg.model_id) if directory is None else None
    if shipped is not None:
        return compatibility.check_config_dict(shipped, what)
    try:
        source = directory or model_files.read_config_directory(cfg.model_id)
    except (model_source.Unreachable, model_source.NeedsToken) as error:
        raise cli.EnvironmentProblem(f"{what}: {error}") from None
    path = os.path.join(source, model_source.CONFIG_FILE)
    try:
        with open(path) as file:
            raw = json.load(file)
    except OSError:
        raise ValueError(f"{what}: {source} has no readable {model_source.CONFIG_FILE}; a model directory holds "
                         "config.json and *.safetensors (what save_pretrained writes)") from None
    except ValueError:
        raise ValueError(f"{what}: {path} is not JSON") from None
    return compatibility.check_config_dict(raw, what)


class CausalLMWithLoss(nn.Module):
    """A Hugging Face causal LM whose forward returns the next-token loss.

    The loss is computed inside the module FSDP shards as its root, so the root unit's all-gather covers the
    embedding, the final norm and the (tied) lm_head that the chunked loss uses outside the HF forward.
    """

    def __init__(self, lm: nn.Module, chunked_loss: bool, compiled_loss: bool = False) -> None:
        super().__init__()
        self.lm = lm
        self.chunked_loss = chunked_loss
        self.compiled_loss = compiled_loss

    @property
    def layers(self) -> nn.ModuleList:
        return self.lm.model.layers

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, divisor: torch.Tensor | float | None = None) -> torch.Tensor:
        """The next-token loss of `input_ids`: summed over the targets that count, divided by `divisor` (default:
        their number, a mean). `labels` (default: the ids themselves) marks targets that carry no loss with
        IGNORE_INDEX; `position_ids` restarting at 0 keep packed examples apart (workload/data/packing.py)."""
        if not self.chunked_loss:
            if labels is None and position_ids is None and divisor is None:
                return self.lm(input_ids=input_ids, labels=input_ids, use_cache=False).loss
            # HF's loss: summed and divided by num_items_in_batch when given, else the mean over counted targets.
            return self.lm(input_ids=input_ids, labels=input_ids if labels is None else labels,
                           position_ids=position_ids, num_items_in_batch=divisor, use_cache=False).loss
        hidden = self.lm.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state
        hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        targets = (input_ids if labels is None else labels)[:, 1:].reshape(-1)
        masked = labels is not None
        if divisor is None:
            divisor = (targets != IGNORE_INDEX).sum().clamp(min=1) if masked else targets.numel()
        # Gemma 2's final_logit_softcapping: the HF forward caps the logits (cap * tanh(logits / cap)) before the loss.
        softcap = getattr(self.lm.config, "final_logit_softcapping", None) or None
        if not torch.is_grad_enabled():
            # Evaluation: LinearCrossEntropy would compute both gradients in forward, twice the lm_head's FLOPs.
            return _chunked_cross_entropy(hidden, self.lm.lm_head.weight, targets, softcap) / divisor
        return LinearCrossEntropy.apply(hidden, self.lm.lm_head.weight, targets, self.compiled_loss, masked, divisor,
                                        softcap)


def _chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           softcap: float | None = None) -> torch.Tensor:
    """Summed cross-entropy of `hidden @ weight.T` (soft-capped at `softcap`, as the HF forward does) against
    `targets` (IGNORE_INDEX ones left out, as cross_entropy's default ignore_index) without gradients,
    LOSS_CHUNK_TOKENS at a time."""
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for start in range(0, targets.numel(), LOSS_CHUNK_TOKENS):
        logits = hidden[start:start + LOSS_CHUNK_TOKENS] @ weight.T
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        total += nn.functional.cross_entropy(logits.float(), targets[start:start + LOSS_CHUNK_TOKENS], reduction="sum",
                                             ignore_index=IGNORE_INDEX)
    return total


def _chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor,
                         softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk's summed cross-entropy and its gradient w.r.t. the logits (softmax minus one-hot). Upcast to fp32
    like the HF loss, so both paths agree to bf16 noise; under torch.compile the upcast, logsumexp and softmax fuse
    into one read and one write of the bf16 logits. With `softcap` the logits are capped first (cap * tanh(z / cap))
    and the gradient goes back through the cap (times 1 - tanh^2)."""
    logits32, capped = _capped(logits, softcap)
    log_normalizer = torch.logsumexp(logits32, dim=-1)
    loss = (log_normalizer - logits32.gather(1, targets[:, None]).squeeze(1)).sum()
    one_hot = torch.arange(logits.shape[1], device=logits.device)[None, :] == targets[:, None]
    grad = torch.exp(logits32 - log_normalizer[:, None]) - one_hot.to(logits32.dtype)
    if capped is not None:
        grad = grad * (1 - capped * capped)
    return loss, grad.to(logits.dtype)


def _capped(logits: torch.Tensor, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The fp32 logits, soft-capped when `softcap` is set, and the tanh the cap's gradient needs (None without)."""
    if not softcap:
        return logits.float(), None
    # As the HF forward: the cap in the logits' own dtype, then the loss upcasts.
    capped = torch.tanh(logits / softcap)
    return (capped * softcap).float(), capped.float()


def _masked_chunk_loss_and_grad(logits: torch.Tensor, targets: torch.Tensor,
                                softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """_chunk_loss_and_grad where targets equal to IGNORE_INDEX add nothing to the loss and get no gradient. On the
    full chunk rather than on the counted rows only, so a compiled kernel keeps one shape whatever the mask."""
    counted = targets != IGNORE_INDEX
    safe_targets = torch.where(counted, targets, 0)
    logits32, capped = _capped(logits, softcap)
    log_normalizer = torch.logsumexp(logits32, dim=-1)
    token_loss = log_normalizer - logits32.gather(1, safe_targets[:, None]).squeeze(1)
    loss = torch.where(counted, token_loss, 0.0).sum()
    one_hot = torch.arange(logits.shape[1], device=logits.device)[None, :] == safe_targets[:, None]
    grad = (torch.exp(logits32 - log_normalizer[:, None]) - one_hot.to(logits32.dtype)) * counted[:, None]
    if capped is not None:
        grad = grad * (1 - capped * capped)
    return loss, grad.to(logits.dtype)


@functools.cache
def _chunk_kernel(compiled: bool, masked: bool = False, softcap: float | None = None):
    """The chunk loss, eager or compiled; compiled once per process (and cap), however many models use it."""
    kernel = _masked_chunk_loss_and_grad if masked else _chunk_loss_and_grad
    if softcap:
        kernel = functools.partial(kernel, softcap=softcap)
    return torch.compile(kernel, dynamic=False) if compiled else kernel


class LinearCrossEntropy(torch.autograd.Function):
    """Cross-entropy of `hidden @ weight.T` against `targets`, a chunk of tokens at a time: summed, then divided by
    `divisor` (default: the number of targets, the mean). `masked`: targets equal to IGNORE_INDEX count for nothing.

    Both gradients are computed in forward, chunk by chunk, and kept for backward: the full-batch logits never
    exist, and nothing is recomputed (a checkpointed chunk loop would run the lm_head matmul a fourth time).
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, compiled: bool,
                masked: bool = False, divisor: torch.Tensor | float | None = None,
                softcap: float | None = None) -> torch.Tensor:
        tokens = targets.numel()
        # Equal chunks (the last may be shorter), so a compiled kernel sees one or two shapes, not one per batch.
        chunks = -(-tokens // LOSS_CHUNK_TOKENS)
        chunk = -(-tokens // chunks)
        kernel = _chunk_kernel(compiled, masked, softcap)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, tokens, chunk):
            hidden_chunk = hidden[start:start + chunk]
            loss, grad_logits = kernel(hidden_chunk @ weight.T, targets[start:start + chunk])
            total += loss
            torch.mm(grad_logits, weight, out=grad_hidden[start:start + chunk])
            # Accumulated by the matmul itself (fp32 inside, rounded once per chunk): no fp32 copy of the
            # vocabulary x hidden gradient (0.9 GB at Qwen's size) and no casts.
            grad_weight.addmm_(grad_logits.T, hidden_chunk)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.divisor = tokens if divisor is None else divisor
        return total / ctx.divisor

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        # A 0-dim fp32 factor: the products are computed in fp32 and rounded once to the gradients' dtype.
        scale = grad_output.float() / ctx.divisor
        return grad_hidden * scale, grad_weight * scale, None, None, None, None, None


def build_model(cfg: TrainConfig, device: torch.device, directory: str | None = None) -> CausalLMWithLoss:
    """fp32 master weights: random ones on `device` with --model_config (seeded); with --model_id, the architecture
    of `directory`'s config.json with its parameters on the meta device (workload.model.compatibility's gate), holding
    no memory until `load_pretrained` fills this rank's shards after shard_model. bf16 comes from FSDP's
    mixed-precision policy at compute time, so AdamW updates full-precision weights."""
    torch.manual_seed(cfg.seed)
    if cfg.model_config:
        with torch.device(device):
            lm = AutoModelForCausalLM.from_config(hf_config(cfg), dtype=torch.float32)
    else:
        # The model gate the preview ran on the same config.json: refused here too unless it can be trained.
        lm = compatibility.build(hf_config(cfg, directory), f"--model_id {cfg.model_id}")
        if directory and os.path.isfile(os.path.join(directory, GENERATION_CONFIG)):
            # What from_pretrained would take too: the published end-of-text ids and sampling defaults, which the
            # exported model keeps.
            lm.generation_config = GenerationConfig.from_pretrained(directory)
    lm.config.use_cache = False
    if cfg.activation_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return CausalLMWithLoss(lm, chunked_loss=cfg.chunked_loss, compiled_loss=compile_enabled(cfg, device))


def load_pretrained(model: CausalLMWithLoss, directory: str, device: torch.device, cfg: TrainConfig) -> None:
    """This rank's shards of --model_id's weights, read from the safetensors files in `directory` into the
    meta-built model that shard_model has sharded (workload.model.weights), and --method lora's adapters' first
    values (build_optimizer's AdamW then takes the trainable parameters: with lora/qlora the adapters alone)."""
    weights.load_sharded(model, directory, device, f"--model_id {cfg.model_id}", prefix=LM_PREFIX,
                         file_name=lora.file_name)
    lora.initialize(model, cfg.seed)


def build_mesh(device: torch.device, shape: tuple[int, ...] | None = None) -> DeviceMesh:
    """A mesh over every rank of the default process group (gloo on CPU, NCCL on GPU): 1-D by default (FSDP), or
    2-D (replicas, shards) for HSDP, where consecutive ranks form a shard group (the ranks of one node)."""
    shape = shape or (torch.distributed.get_world_size(),)
    names = ("replicate", "shard") if len(shape) == 2 else None
    return init_device_mesh(device.type, shape, mesh_dim_names=names)


def compile_enabled(cfg: TrainConfig, device: torch.device) -> bool:
    return cfg.compile if cfg.compile is not None else device.type == "cuda"


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


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    fused = True if (cfg.fused_adamw and trainable[0].device.type == "cuda") else None
    return torch.optim.AdamW(trainable, lr=cfg.learning_rate, fused=fused)


def learning_rate_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of step `step` (0-based): --warmup_steps of linear warmup to --learning_rate, then
    --lr_schedule's decay towards 0 at step --steps. A function of the step alone, so a run resumed at step k
    continues the schedule exactly where the uninterrupted run is at k, with nothing of it in the checkpoint."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    if cfg.lr_schedule == "linear":
        return cfg.learning_rate * (1 - progress)
    if cfg.lr_schedule == "cosine":
        return cfg.learning_rate * 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.learning_rate


def set_learning_rate(optimizer: torch.optim.Optimizer, learning_rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = learning_rate


def loss_fn(model: nn.Module, batch, divisor: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy of a (batch, seq_len) tensor of token ids; of a packed batch of examples
    (workload.data.TokenBatch), their counted targets' summed loss over `divisor` (default: their number)."""
    if isinstance(batch, torch.Tensor):
        return model(batch)
    if divisor is None:
        return model(batch.input_ids, labels=batch.labels, position_ids=batch.position_ids)
    # Summed inside, divided here in fp32: a tensor passed into the FSDP module would be cast to bf16 on the way
    # in (its mixed-precision policy casts floating inputs), rounding the token count.
    return model(batch.input_ids, labels=batch.labels, position_ids=batch.position_ids, divisor=1.0) / divisor


def loss_divisor(batch) -> torch.Tensor | None:
    """For a packed batch of examples: the counted targets of the whole step over all ranks, per rank. Each rank's
    summed loss over it, with FSDP averaging the gradients over ranks, is exactly the global batch's mean over its
    counted tokens (as torchtune and TRL normalise), however unevenly micro-batches and ranks hold them. None for
    token ids, where every micro-batch counts the same tokens and the mean of their means is that mean already."""
    if isinstance(batch, torch.Tensor):
        return None
    counted = batch.trained_tokens().float()
    world_size = 1
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(counted)  # one scalar per step
        world_size = torch.distributed.get_world_size()
    return counted.clamp(min=1) / world_size


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch,
               cfg: TrainConfig) -> torch.Tensor:
    """One optimizer step on one batch: forward and backward of each of its --grad_accum_steps micro-batches, then
    clip and AdamW. Returns the batch's mean loss without waiting for it."""
    micro_batches = batch.chunk(cfg.grad_accum_steps)
    divisor = loss_divisor(batch)
    loss = torch.zeros((), device=batch.device)
    for index, micro_batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        if isinstance(model, FSDPModule):
            # Before the last micro-batch, gradients accumulate unsharded (in the reduce dtype: 4 bytes a parameter
            # at fp32) and the gathered weights stay: one all-gather and one reduction per step, not per micro-batch.
            model.set_requires_gradient_sync(last)
            model.set_reshard_after_backward(last)
        # Equal micro-batches, so the mean of their means is the batch's mean.
        micro_loss = (loss_fn(model, micro_batch) / len(micro_batches) if divisor is None
                      else loss_fn(model, micro_batch, divisor))
        micro_loss.backward()
        loss += micro_loss.detach()
    if cfg.max_grad_norm:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
    two_level_collectives.optimizer_step(model, optimizer)  # optimizer.step(), two-level's in its order
    optimizer.zero_grad(set_to_none=True)
    return loss


@torch.no_grad()
def evaluate(model: nn.Module, batches: list) -> torch.Tensor:
    """Mean next-token loss over `batches` (this rank's share of the evaluation set), weighted by their sequences.
    Every rank must pass as many batches as the others: each forward all-gathers the sharded weights."""
    if not isinstance(batches[0], torch.Tensor):
        return _evaluate_examples(model, batches)
    total = torch.zeros((), dtype=torch.float32, device=batches[0].device)
    for batch in batches:
        total += loss_fn(model, batch) * len(batch)
    reshard(model)
    return total / sum(len(batch) for batch in batches)


def _evaluate_examples(model: nn.Module, batches: list) -> torch.Tensor:
    """Packed examples: the loss over every rank's counted (assistant) tokens, the same value on every rank."""
    total = torch.zeros(2, dtype=torch.float32, device=batches[0].device)
    for batch in batches:
        total += torch.stack([loss_fn(model, batch, divisor=1.0), batch.trained_tokens().float()])
    reshard(model)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(total)
    return total[0] / total[1].clamp(min=1)


def reshard(model: nn.Module) -> None:
    """Put every FSDP unit back to its sharded fp32 parameters. A forward without backward (evaluation) leaves the
    units that keep their weights for backward (--no-reshard_after_forward) holding the gathered bf16 ones: a
    checkpoint or an export would then save bf16 weights, and every GPU would keep the whole model."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def matmul_parameters(model: CausalLMWithLoss) -> int:
    """Parameters that take part in a matmul per token: all of them, less an untied input embedding (a lookup)."""
    total = sum(parameter.numel() for parameter in model.parameters())
    if model.lm.config.tie_word_embeddings:
        return total
    return total - model.lm.get_input_embeddings().weight.numel()


def flops_per_token(config: PretrainedConfig, matmul_params: int, seq_len: int) -> float:
    """Training FLOPs per token, PaLM's estimate: 6N for the weights (forward + backward) plus 12*L*H*T for
    attention scores and values. The attention term is not halved for causality, as in PaLM and nanoGPT, so the
    MFU compares with theirs."""
    return 6 * matmul_params + 12 * config.num_hidden_layers * config.hidden_size * seq_len


def model_flops_utilization(tokens_per_s: float | None, flops: float, peak: float | None, devices: int) -> float | None:
    """Achieved training FLOP/s over the devices' dense bf16 peak; None where the peak (or the rate) is unknown."""
    if not peak or not tokens_per_s:
        return None
    return tokens_per_s * flops / (peak * devices)


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of one device, or None where unknown (CPU, unlisted GPUs): MFU is then reported as null."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))
