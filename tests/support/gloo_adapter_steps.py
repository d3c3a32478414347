"""The spawned side of tests/runs/test_adapters.py: 2 gloo processes train the tiny model with --method lora and qlora
through the job's pieces (build, adapters.apply, shard, load, optimizer, train_step, checkpoint, export) and rank 0
saves what they saw: each step's loss and the adapters' all-gathered gradients, the base before and after, the NF4
shards of one weight, and the losses of a run resumed from an adapters-only checkpoint. Kept apart from the test
module so that each spawned process imports torch, transformers, PEFT and the workload only.
"""
from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from workload.checkpoint import sharded as checkpoint
from workload.checkpoint.export import write_model
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model.adapters import lora, nf4
from workload.model.build import build_model, load_pretrained
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import evaluate, train_step

WORLD = 2
STEPS = 3
# fp32 compute (param_dtype) so the job's steps compare with a single-process PEFT model to fp32 rounding.
BASE = TrainConfig(model_config="tiny", batch_size=2, seq_len=32, learning_rate=1e-2, method="lora", lora_rank=4,
                   lora_alpha=8.0, lora_targets="q_proj,v_proj,down_proj", steps=4)
# The NF4 reference's weight: 2 shards of 64 x 512, 512 blocks of 64 each: torchao's default block sizes.
NF4_SHAPE = (128, 512)


def build(cfg: TrainConfig, directory: str | None = None):
    cpu = torch.device("cpu")
    built = build_model(cfg, cpu, directory)
    built = lora.apply(built, cfg)
    sharded = shard_model(built, build_mesh(cpu), cfg, param_dtype=torch.float32)
    if directory:
        load_pretrained(sharded, directory, cpu, cfg)
    return sharded, build_optimizer(sharded, cfg)


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def batch(cfg: TrainConfig, rank: int, step: int) -> torch.Tensor:
    return random_batches(cfg, 512, rank)(step)


def train(cfg: TrainConfig, sharded, optimizer, steps: range, rank: int, grads: list | None = None) -> list[float]:
    """The job's train_step on each rank's batch of each step; the mean loss over ranks per step. With `grads`, the
    adapters' full gradients before each optimizer step are appended to it (a collective inside the step)."""
    if grads is not None:
        names = [name for name, _ in lora.adapter_parameters(sharded)]
        parameters = [parameter for _, parameter in lora.adapter_parameters(sharded)]
        optimizer.register_step_pre_hook(lambda *_: grads.append(
            {name: full(parameter.grad).clone() for name, parameter in zip(names, parameters)}))
    losses = []
    for step in steps:
        loss = train_step(sharded, optimizer, batch(cfg, rank, step), cfg)
        dist.all_reduce(loss)
        losses.append(loss.item() / WORLD)
    return losses


def base_weights(sharded) -> dict[str, torch.Tensor]:
    return {name: (nf4.dequantize(parameter) if nf4.is_nf4(parameter) else full(parameter)).clone()
            for name, parameter in sharded.lm.named_parameters() if not parameter.requires_grad}


def worker(rank: int, port: int, out: str, pretrained: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    results: dict = {}

    # LoRA against PEFT: the initial adapters, each step's loss and gradients, the base before and after.
    sharded, optimizer = build(BASE)
    results["initial"] = {name: full(parameter).clone() for name, parameter in lora.adapter_parameters(sharded)}
    results["base_before"] = base_weights(sharded)
    grads: list = []
    results["lora_losses"] = train(BASE, sharded, optimizer, range(STEPS), rank, grads)
    results["grads"] = grads
    results["base_after"] = base_weights(sharded)
    results["trainable"] = sorted(name for name, parameter in sharded.lm.named_parameters() if parameter.requires_grad)
    results["optimized"] = sum(len(group["params"]) for group in optimizer.param_groups)

    # QLoRA on the same data, and its checkpoint (adapters only) against an uninterrupted run.
    qlora = dataclasses.replace(BASE, method="qlora")
    sharded, optimizer = build(qlora)
    results["qlora_losses"] = train(qlora, sharded, optimizer, range(STEPS), rank)
    results["qlora_dtypes"] = {name: type(full(parameter) if not nf4.is_nf4(parameter) else parameter.to_local()
                                          ).__name__ + str(parameter.dtype)
                               for name, parameter in sharded.lm.named_parameters()}
    saved = os.path.join(os.path.dirname(out), "qlora-checkpoint")
    checkpoint.save(saved, sharded, optimizer, STEPS, tokenizer="")
    results["uninterrupted"] = train(qlora, sharded, optimizer, range(STEPS, STEPS + 2), rank)
    resumed, resumed_optimizer = build(qlora)
    results["resumed_step"] = checkpoint.load(saved, resumed, resumed_optimizer)
    results["resumed"] = train(qlora, resumed, resumed_optimizer, range(STEPS, STEPS + 2), rank)
    exported = os.path.join(os.path.dirname(out), "qlora-export", "model_000005")
    write_model(resumed, exported, os.path.dirname(exported), rank == 0)
    results["qlora_eval"] = evaluate(resumed, [batch(qlora, 0, 99)]).item()

    # NF4: this rank's shard of a weight quantized from its rows alone, against torchao's to_nf4 of the whole.
    generator = torch.Generator().manual_seed(7)
    whole = (torch.randn(NF4_SHAPE, generator=generator) * 0.02).to(torch.bfloat16)
    # What to_empty leaves of a meta-built NF4 weight's shard, as in workload.model.weights.
    meta = nf4.quantize(torch.empty(NF4_SHAPE, device="meta"), WORLD).split(NF4_SHAPE[0] // WORLD)[rank]
    placeholder = torch.empty_like(meta, device="cpu")
    shard = nf4.quantized_shard(placeholder, whole.chunk(WORLD)[rank])
    parts = [None] * WORLD
    dist.all_gather_object(parts, {name: getattr(shard, name) for name in (
        "quantized_data", "quantized_scalers", "quantization_factor", "scaler_mean", "nf4")})
    results["nf4_whole"], results["nf4_shards"] = whole, parts

    # A pretrained base (the meta path): adapters-only checkpoint, then the export the job writes.
    tuned = dataclasses.replace(BASE, model_config="", model_id=pretrained)
    sharded, optimizer = build(tuned, pretrained)
    results["pretrained_losses"] = train(tuned, sharded, optimizer, range(2), rank)
    saved = os.path.join(os.path.dirname(out), "lora-checkpoint")
    checkpoint.save(saved, sharded, optimizer, 2, tokenizer="")
    exported = os.path.join(os.path.dirname(out), "lora-export", "model_000002")
    write_model(sharded, exported, os.path.dirname(exported), rank == 0)
    results["pretrained_eval"] = evaluate(sharded, [batch(tuned, 0, 99)]).item()
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()
