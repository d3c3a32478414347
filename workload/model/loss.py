"""The loss: the causal LM whose forward returns the next-token loss (CausalLMWithLoss), its chunked lm_head +
cross-entropy (LinearCrossEntropy: the full-batch logits never exist), and a batch's loss and its divisor (`loss_fn`,
`loss_divisor`). Imports torch, never ray.

LinearCrossEntropy computes the output head's weight gradient in forward only where the head trains: a frozen head
(--method lora and qlora) gets none, neither its vocabulary x hidden GEMM per chunk (workload.model.flops) nor its
buffer (1.96 GiB a GPU on a 70B with 8 ranks: workload.model.adapters.memory).
"""
from __future__ import annotations

import functools

import torch
from torch import nn

IGNORE_INDEX = -100  # a target that carries no loss (workload/data/chat.py labels prompts with it)

# Most tokens per lm_head + cross-entropy chunk. A chunk's bf16 logits and their gradient are chunk x vocab x 2
# bytes each (2.5 GB at 8k tokens and Qwen's 152k vocabulary), instead of fp32 logits for the whole batch (10 GB
# at 8 x 2048 tokens). Measured on an H200 (bench/results): 8k-token chunks beat 4k and 16k.
LOSS_CHUNK_TOKENS = 8192

# Where the Hugging Face model sits in CausalLMWithLoss (its `lm`), and so in every state dict the job saves.
LM_PREFIX = "lm."


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
        scale = logit_scale(self.lm.config)
        if scale != 1:  # a factor on the logits is the same factor on the hidden states the head multiplies
            hidden = hidden * scale
        if not torch.is_grad_enabled():
            # Evaluation: LinearCrossEntropy would compute both gradients in forward, twice the lm_head's FLOPs.
            return _chunked_cross_entropy(hidden, self.lm.lm_head.weight, targets, softcap) / divisor
        return LinearCrossEntropy.apply(hidden, self.lm.lm_head.weight, targets, self.compiled_loss, masked, divisor,
                                        softcap)


def logit_scale(config) -> float:
    """The factor the Hugging Face forward applies to the logits before the loss: Granite divides them by
    logits_scaling (GraniteForCausalLM), Cohere and Cohere 2 multiply them by logit_scale; 1 elsewhere."""
    if getattr(config, "logits_scaling", None):
        return 1 / config.logits_scaling
    return getattr(config, "logit_scale", None) or 1.0


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
    exist, and nothing is recomputed (a checkpointed chunk loop would run the lm_head matmul a fourth time). A
    weight that does not require a gradient (a frozen head) gets none: autograd would drop it, after its GEMM and its
    buffer had been paid for.
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
        trains_weight = ctx.needs_input_grad[1]
        grad_weight = torch.zeros_like(weight) if trains_weight else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, tokens, chunk):
            hidden_chunk = hidden[start:start + chunk]
            loss, grad_logits = kernel(hidden_chunk @ weight.T, targets[start:start + chunk])
            total += loss
            torch.mm(grad_logits, weight, out=grad_hidden[start:start + chunk])
            # Accumulated by the matmul itself (fp32 inside, rounded once per chunk): no fp32 copy of the
            # vocabulary x hidden gradient (0.9 GB at Qwen's size) and no casts.
            if trains_weight:
                grad_weight.addmm_(grad_logits.T, hidden_chunk)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.divisor = tokens if divisor is None else divisor
        return total / ctx.divisor

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        # A 0-dim fp32 factor: the products are computed in fp32 and rounded once to the gradients' dtype.
        scale = grad_output.float() / ctx.divisor
        weight_gradient = None if grad_weight is None else grad_weight * scale
        return grad_hidden * scale, weight_gradient, None, None, None, None, None


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
