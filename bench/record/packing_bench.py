"""Packed examples with document masking against today's plain packing, side by side in one process on one GPU.

    python -m bench.record.packing_bench             # on the GPU: Qwen2.5-1.5B's shape, random weights, 2 x 2048
    python -m bench.record.packing_bench --device cpu --model_config tiny --seq_len 256 --steps 2 --warmup 1  # smoke

Every run is workload.model's default step as train_func runs it (FSDP2 on a process group of one, compiled
layers, fused AdamW, the chunked linear cross-entropy), on batches of the same shape:
- plain:        today's text path: token ids only, every token a target, one causal attention over the block;
- labels-only:  packed examples with their labels masked (half of each example ignored) but positions not
                restarted: the cost of the masked loss alone (it leaks across examples: not exact, for reference);
- packed-sdpa:  the exact path: positions restart per example, so transformers builds a block-diagonal causal mask
                from them and SDPA runs with that mask (no flash kernel takes an arbitrary mask);
- packed-flex:  the same batches with attn_implementation flex_attention: transformers turns the same mask into a
                BlockMask and FlexAttention skips the blocks that are masked whole.
The examples' lengths are drawn uniformly from --min_len..--max_len (seeded), like chat turns, and packed by
workload.data.packing exactly as the job packs them. Prints one JSON line per run (tokens/s of the median step, all
positions counted, padding included, so the runs compare; trained tokens/s too; peak memory; the first losses),
then the ratios to plain. packed-sdpa and packed-flex see the same batches, so their losses must agree to bf16
noise: both are exact.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch
import torch.distributed as dist

from bench.common import GIB, announce, benchmark_parser, device_from_flag, fresh, single_process_group, synchronize
from workload.config import TrainConfig
from workload.data.chat import IGNORE_INDEX, Example
from workload.data.packing import TokenBatch, pack_examples
from workload.model.build import NAMED_CONFIGS, build_model
from workload.model.flops import model_flops_utilization, run_flops_per_token
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import peak_flops, train_step

RUNS = ("plain", "labels-only", "packed-sdpa", "packed-flex")


def example_blocks(cfg: TrainConfig, vocab_size: int, blocks: int, min_len: int, max_len: int) -> torch.Tensor:
    """At least `blocks` packed blocks of random examples, each with its first half ignored (the prompt)."""
    generator = torch.Generator().manual_seed(cfg.seed)
    examples = []
    while True:
        length = int(torch.randint(min_len, max_len + 1, (), generator=generator))
        ids = torch.randint(0, vocab_size, (length,), generator=generator).tolist()
        examples.append(Example(ids, [IGNORE_INDEX] * (length // 2) + ids[length // 2:]))
        packed = pack_examples(examples, cfg.seq_len, pad_id=0) if len(examples) % 16 == 0 else None
        if packed is not None and len(packed) > blocks:
            return packed[:blocks]


def batches_for(run: str, blocks: torch.Tensor, batch_size: int):
    def batch(step: int):
        rows = blocks[(torch.arange(batch_size) + step * batch_size) % len(blocks)]
        if run == "plain":
            return rows[:, 0].contiguous()
        packed = TokenBatch.of(rows)
        if run == "labels-only":
            positions = torch.arange(rows.shape[-1]).expand(len(rows), -1)
            return TokenBatch(packed.input_ids, packed.labels, positions)
        return packed

    return batch


def measure(run: str, cfg: TrainConfig, device: torch.device, blocks: torch.Tensor, warmup: int, steps: int) -> dict:
    model = build_model(cfg, device)
    if run == "packed-flex":
        model.lm.set_attn_implementation("flex_attention")
    flops = run_flops_per_token(model.lm.config.to_dict(), cfg)
    model = shard_model(model, build_mesh(device), cfg)
    optimizer = build_optimizer(model, cfg)
    batches = batches_for(run, blocks, cfg.batch_size)
    losses, times, trained = [], [], []
    for index in range(warmup + steps):
        batch = batches(index).to(device)
        trained.append(int(batch.trained_tokens()) if isinstance(batch, TokenBatch) else batch.numel() - len(batch))
        synchronize(device)
        started = time.perf_counter()
        losses.append(train_step(model, optimizer, batch, cfg).item())  # .item() waits for the step
        times.append(time.perf_counter() - started)
    median = statistics.median(times[warmup:])
    tokens_per_s = cfg.batch_size * cfg.seq_len / median
    mfu = model_flops_utilization(tokens_per_s, flops, peak_flops(device), devices=1)
    return {
        "run": run,
        "tokens_per_s": round(tokens_per_s),
        "trained_tokens_per_s": round(statistics.mean(trained[warmup:]) / median),
        "mfu": round(mfu, 3) if mfu is not None else None,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / GIB, 1) if device.type == "cuda" else None,
        "step_times_s": [round(t, 4) for t in times],
        "losses": [round(loss, 4) for loss in losses],
    }


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, batch_size=2, warmup=3, steps=10)
    parser.add_argument("--min_len", type=int, default=64)
    parser.add_argument("--max_len", type=int, default=1024)
    parser.add_argument("--runs", default=",".join(RUNS))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()

    device = device_from_flag(args.device)
    single_process_group(device, port=29513)
    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len)
    vocab_size = NAMED_CONFIGS[cfg.model_config]["vocab_size"]
    blocks = example_blocks(cfg, vocab_size, args.batch_size * (args.warmup + args.steps), args.min_len,
                            args.max_len)
    examples_per_block = float((blocks[:, 2] == 0).sum()) / len(blocks)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(device)
                      if device.type == "cuda" else "cpu", "examples_per_block": round(examples_per_block, 2),
                      "config": dataclasses.asdict(cfg)}), flush=True)
    results = {}
    for run in args.runs.split(","):
        fresh(device)
        try:
            results[run] = measure(run, cfg, device, blocks, args.warmup, args.steps)
        except Exception as error:  # a path the installed stack cannot run is a result too
            results[run] = {"run": run, "error": f"{type(error).__name__}: {error}"[:500]}
        print(json.dumps(results[run]), flush=True)
    plain = results.get("plain", {}).get("tokens_per_s")
    ratios = {run: round(result["tokens_per_s"] / plain, 3) for run, result in results.items()
              if plain and "tokens_per_s" in result}
    exact = [results[run]["losses"] for run in ("packed-sdpa", "packed-flex") if "losses" in results.get(run, {})]
    print(json.dumps({"run": "comparison", "tokens_per_s_vs_plain": ratios,
                      "packed_sdpa_vs_flex_largest_loss_difference":
                          round(max(abs(a - b) for a, b in zip(*exact)), 4) if len(exact) == 2 else None}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
