"""The project's training step against the original recipe's, side by side in one process on one GPU.

    python -m bench.step_bench --batch_size 8 --seq_len 2048 --memory_batches 1,2   # on the GPU (torch + transformers)
    python -m bench.step_bench --device cpu --model_config tiny --batch_size 2 --seq_len 64 --steps 2   # smoke run

Both train the Qwen2.5-1.5B architecture from the same random init on the same batches (the workload's random
tokens, seeded per step):
- recipe:  the original recipe's step: the model in bf16, FSDP1 with size_based_auto_wrap_policy(1e7), eager,
           plain AdamW, the Hugging Face loss (model(input_ids, labels=input_ids).loss);
- project: workload.model.causal_lm's default step, exactly as train_func runs it (FSDP2 per layer with bf16 compute and
           fp32 master weights and reduction, compiled layers, fused AdamW, the chunked linear cross-entropy,
           gradient clipping).
For each: tokens/s (median step), MFU (6N + attention FLOPs per token against
the GPU's dense bf16 peak, 989 TFLOP/s on an H200), peak
memory, the losses of the first steps; then the ratio. With --memory_batches, the project's peak memory at those
batch sizes, projected onto 8-way sharding on L4s (the g6 stack). Prints one JSON line per result.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from transformers import AutoModelForCausalLM, Qwen2Config

from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import causal_lm as project
from workload.model import memory

L4_MEMORY_MIB = 22888  # EC2's DescribeInstanceTypes figure for the g6 family's L4
GIB = 2**30
# The recipe's size_based_auto_wrap_policy(min_num_params=1e7): on Qwen2.5-1.5B it wraps each MLP projection (13.8M),
# the embedding, the (tied) lm_head, and around them Qwen2Model with its attention weights (5.5M a layer) and norms.
RECIPE_MIN_NUM_PARAMS = int(1e7)


def parameters(model_config: str) -> int:
    """Parameters of a named architecture (tied embeddings once: 1,543,714,304 for Qwen2.5-1.5B)."""
    return memory.parameter_count(project.NAMED_CONFIGS[model_config])


def recipe_model(cfg: TrainConfig, device: torch.device, min_num_params: int = RECIPE_MIN_NUM_PARAMS):
    """The original recipe's model, wrapping and optimizer (its code/train.py): bf16 weights, FSDP1 over the default
    process group (what ray.train.torch.prepare_model(parallel_strategy="fsdp", ...) does with the recipe's kwargs),
    plain AdamW. A smaller `min_num_params` gives a small model the same units (tests/runs/test_parallel.py)."""
    torch.manual_seed(cfg.seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**project.NAMED_CONFIGS[cfg.model_config]),
                                                 dtype=torch.bfloat16)
    model = FullyShardedDataParallel(
        model, device_id=device,
        auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)


def recipe_step(cfg: TrainConfig, device: torch.device):
    """The original recipe's step (the Hugging Face loss, no clipping), as a step function."""
    model, optimizer = recipe_model(cfg, device)

    def step(batch: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.detach()

    return step


def project_step(cfg: TrainConfig, device: torch.device):
    """workload.model.causal_lm's step with the workload's defaults: the same calls train_func makes."""
    model = project.build_model(cfg, device)
    model = project.shard_model(model, project.build_mesh(device), cfg)
    optimizer = project.build_optimizer(model, cfg)
    return functools.partial(project.train_step, model, optimizer, cfg=cfg)


def measure(name: str, step, cfg: TrainConfig, device: torch.device, warmup: int, steps: int) -> dict:
    """Median step time over `steps` steps after `warmup` (compile, allocator), each step timed to completion."""
    batches = random_batches(cfg, project.NAMED_CONFIGS[cfg.model_config]["vocab_size"], rank=0)
    flops = project.flops_per_token(Qwen2Config(**project.NAMED_CONFIGS[cfg.model_config]),
                                    matmul_params=parameters(cfg.model_config), seq_len=cfg.seq_len)
    losses, times = [], []
    for index in range(warmup + steps):
        batch = batches(index).to(device)
        synchronize(device)
        started = time.perf_counter()
        losses.append(step(batch).item())  # .item() waits for the step
        times.append(time.perf_counter() - started)
    tokens_per_s = cfg.batch_size * cfg.seq_len / statistics.median(times[warmup:])
    mfu = project.model_flops_utilization(tokens_per_s, flops, project.peak_flops(device), devices=1)
    return {
        "run": name,
        "tokens_per_s": round(tokens_per_s),
        "mfu": round(mfu, 3) if mfu is not None else None,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 1) if device.type == "cuda" else None,
        "step_times_s": [round(t, 4) for t in times],
        "losses": [round(loss, 4) for loss in losses],
    }


def device_from_flag(name: str) -> torch.device:
    """--device: cuda means the first GPU; anything else (cpu) as given."""
    return torch.device(name, 0) if name == "cuda" else torch.device(name)


def single_process_group(device: torch.device, port: int) -> None:
    """A process group of one rank on `device` (NCCL on a GPU, gloo on the CPU): FSDP needs one even on one GPU."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fresh(device: torch.device) -> None:
    """Drop the previous run's model and allocator state before the next one is measured."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def memory_projection(cfg: TrainConfig, device: torch.device, batch_sizes: list[int], warmup: int) -> dict:
    """Peak memory of the project's step at several batch sizes on this one GPU, then projected onto 8 L4s.

    On one GPU the peak is fixed + per_sequence * batch; workload.model.memory splits `fixed` into the state FSDP shards
    8 ways and the rest, and adds NCCL's buffers. The Pulumi program refuses a job by the same model.
    """
    peaks = {}
    for batch_size in batch_sizes:
        fresh(device)
        sized = dataclasses.replace(cfg, batch_size=batch_size)
        result = measure(f"project-b{batch_size}", project_step(sized, device), sized, device, warmup, 2)
        peaks[batch_size] = result["peak_memory_gib"]
    (b1, p1), (b2, p2) = sorted(peaks.items())[:2]
    per_sequence = (p2 - p1) / (b2 - b1)
    fixed = p1 - per_sequence * b1
    projected = {b: round(memory.projected_peak_gib(fixed_gib=fixed, per_sequence_gib=per_sequence,
                                                    parameters=parameters(cfg.model_config), batch_size=b, shards=8), 1)
                 for b in (1, 2, 4)}
    usable = memory.usable_gib(L4_MEMORY_MIB)
    return {
        "run": "memory",
        "seq_len": cfg.seq_len,
        "measured_peak_gib_by_batch": peaks,
        "per_sequence_gib": round(per_sequence, 2),
        "fixed_gib_1gpu": round(fixed, 1),
        "projected_peak_gib_8xL4_by_batch": projected,
        "l4_usable_gib": round(usable, 2),
        f"largest_batch_that_fits_with_{memory.MARGIN_GIB:g}gib_margin": max(
            (b for b, gib in projected.items() if memory.fits(gib, usable)), default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model_config", default="qwen2.5-1.5b")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--memory_batches", default="", help="e.g. 1,2: measure and project peak memory")
    args = parser.parse_args()

    device = device_from_flag(args.device)
    single_process_group(device, port=29512)
    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(device)
                      if device.type == "cuda" else "cpu", "config": dataclasses.asdict(cfg)}), flush=True)

    results = {}
    for name, build in (("recipe", recipe_step), ("project", project_step)):
        fresh(device)
        results[name] = measure(name, build(cfg, device), cfg, device, args.warmup, args.steps)
        print(json.dumps(results[name]), flush=True)
    recipe, ours = results["recipe"], results["project"]
    first = min(5, len(recipe["losses"]))
    print(json.dumps({
        "run": "comparison",
        "tokens_per_s_ratio": round(ours["tokens_per_s"] / recipe["tokens_per_s"], 3),
        "largest_first_steps_loss_difference": round(
            max(abs(a - b) for a, b in zip(recipe["losses"][:first], ours["losses"][:first])), 4),
    }), flush=True)
    if args.memory_batches:
        batch_sizes = [int(b) for b in args.memory_batches.split(",")]
        print(json.dumps(memory_projection(cfg, device, batch_sizes, args.warmup)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
