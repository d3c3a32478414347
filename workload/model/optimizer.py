"""The optimizer: AdamW over the trainable parameters (`build_optimizer`), the learning-rate schedule
(`learning_rate_at`, `set_learning_rate`), gradient clipping and the update (`clip_gradients`, `optimizer_step`).
Imports torch, never ray.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from workload.config import TrainConfig
from workload.model import two_level as two_level_collectives


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


def clip_gradients(model: nn.Module, max_grad_norm: float) -> None:
    """Clip the trainable parameters' gradients to `max_grad_norm` (0 or None: no clipping)."""
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)


def optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """optimizer.step() (two-level's in its order: workload.model.two_level), then free the gradients."""
    two_level_collectives.optimizer_step(model, optimizer)
    optimizer.zero_grad(set_to_none=True)
