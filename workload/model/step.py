"""One training step and evaluation: `train_step` (forward and backward of each micro-batch, gradients accumulated
unsharded until the last, then clip and AdamW), `evaluate` (the mean loss over this rank's share of the evaluation
set), and `peak_flops` (the device's dense bf16 peak, for the step's MFU: workload.model.flops). Imports torch,
never ray.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from workload.config import TrainConfig
from workload.model.gpu_peaks import peak_flops_of  # the table is standard library, for the preview
from workload.model.loss import loss_divisor, loss_fn
from workload.model.optimizer import clip_gradients, optimizer_step
from workload.model.sharding import reshard


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
            # An adapter method's frozen base is resharded after each micro-batch instead: kept gathered it is the
            # whole base on every GPU (36 GiB of NF4 for a 70B), which accumulation is there to avoid; its
            # all-gathers are then per micro-batch, and the adapters' few gradients still accumulate unsharded.
            model.set_requires_gradient_sync(last)
            model.set_reshard_after_backward(last or cfg.method != "full")
        # Equal micro-batches, so the mean of their means is the batch's mean.
        micro_loss = (loss_fn(model, micro_batch) / len(micro_batches) if divisor is None
                      else loss_fn(model, micro_batch, divisor))
        micro_loss.backward()
        loss += micro_loss.detach()
    clip_gradients(model, cfg.max_grad_norm)
    optimizer_step(model, optimizer)
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


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak of one device, or None where unknown (CPU, unlisted GPUs): MFU is then reported as null."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))
