"""The project's training step against the original recipe's, side by side in one process on one GPU.

    python -m bench.record.step_bench --batch_size 8 --seq_len 2048 --memory_batches 1,2   # on the GPU
    python -m bench.record.step_bench --device cpu --model_config tiny --batch_size 2 --seq_len 64 --steps 2  # smoke

Both train the Qwen2.5-1.5B architecture from the same random init on the same batches (the workload's random
tokens, seeded per step):
- recipe:  the original recipe's step: the model in bf16, FSDP1 with size_based_auto_wrap_policy(1e7), eager,
           plain AdamW, the Hugging Face loss (model(input_ids, labels=input_ids).loss);
- project: workload.model's default step, exactly as train_func runs it (FSDP2 per layer with bf16 compute and
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
import json

import torch
import torch.distributed as dist

from bench.common import (
    announce,
    benchmark_parser,
    device_from_flag,
    fresh,
    measure,
    parameters,
    project_step,
    recipe_step,
    single_process_group,
)
from workload.config import TrainConfig
from workload.model import memory

L4_MEMORY_MIB = 22888  # EC2's DescribeInstanceTypes figure for the g6 family's L4


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


def build_parser() -> argparse.ArgumentParser:
    built = benchmark_parser(__doc__, warmup=3, steps=10)
    built.add_argument("--memory_batches", default="", help="e.g. 1,2: measure and project peak memory")
    return built


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()

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
