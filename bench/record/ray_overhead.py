"""What Ray Train costs: the workload's step under TorchTrainer against the same loop without Ray, on one GPU.

    python -m bench.record.ray_overhead --model_config qwen2.5-1.5b --batch_size 8 --seq_len 2048 --steps 30

`raw` runs train_func's loop by hand (the same build, shard, optimizer, batches, train_step and per-step loss
all-reduce), `ray` runs `workload.trainer.fit` on a local Ray cluster with one GPU worker. Both report tokens/s the
way train_func does: every step but the first (compile, allocator), all tokens over all their time. Each run is a
fresh process, alternating raw, ray, raw, ray, so a drift of the GPU's clocks shows up as spread between rounds.
With NCCL_DEBUG_FILE set, every process writes its NCCL log there (the Ray run's summary carries its transport
lines, gathered by the workload).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist

from bench.common import announce, benchmark_parser, device_from_flag, single_process_group
from workload.config import TrainConfig
from workload.data.batches import make_data
from workload.model.build import build_model
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step


def raw_loop(cfg: TrainConfig, device: torch.device) -> float:
    """train_func without Ray: tokens/s over steps 2..N."""
    single_process_group(device, port=29513)
    try:
        model = build_model(cfg, device)
        model = shard_model(model, build_mesh(device), cfg)
        optimizer = build_optimizer(model, cfg)
        batches = make_data(cfg, model.lm.config.vocab_size, 0, 1).train
        step_times = []
        for step in range(cfg.steps):
            started = time.perf_counter()
            loss = train_step(model, optimizer, batches(step).to(device), cfg)
            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss.item()
            step_times.append(time.perf_counter() - started)
        timed = step_times[1:]
        return cfg.batch_size * cfg.seq_len * len(timed) / sum(timed)
    finally:
        dist.destroy_process_group()


def ray_run(cfg: TrainConfig, device: torch.device) -> dict:
    from bench.record.scaling import run  # imports Ray: only the Ray measurement's process needs it

    return run(cfg, 1 if device.type == "cuda" else 0, env={}, nccl_dir=None)


def measure_in_subprocess(kind: str, args: argparse.Namespace) -> dict:
    """One measurement in a fresh process, so no run inherits another's caches, allocator state or Ray."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "bench.record.ray_overhead", "--only", kind, "--model_config", args.model_config,
               "--batch_size", str(args.batch_size), "--seq_len", str(args.seq_len), "--steps", str(args.steps),
               "--device", args.device]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, steps=30)
    parser.add_argument("--rounds", type=int, default=2, help="raw, ray, raw, ray, ...: each in its own process")
    parser.add_argument("--only", choices=("raw", "ray"), help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len,
                      steps=args.steps, num_workers=1)
    device = device_from_flag(args.device)
    if args.only == "raw":
        print(json.dumps({"run": "raw", "tokens_per_s": raw_loop(cfg, device)}), flush=True)
        return
    if args.only == "ray":
        print(json.dumps({"run": "ray", **ray_run(cfg, device)}), flush=True)
        return

    announce()
    results: dict[str, list[float]] = {"raw": [], "ray": []}
    for _ in range(args.rounds):
        for kind in ("raw", "ray"):
            result = measure_in_subprocess(kind, args)
            results[kind].append(result["tokens_per_s"])
            print(json.dumps(result), flush=True)
    raw, ray = (sum(values) / len(values) for values in (results["raw"], results["ray"]))
    print(json.dumps({
        "run": "overhead",
        "raw_tokens_per_s": [round(value) for value in results["raw"]],
        "ray_tokens_per_s": [round(value) for value in results["ray"]],
        "ray_slower_by": round(1 - ray / raw, 4),
        "raw_spread": round((max(results["raw"]) - min(results["raw"])) / raw, 4),
    }), flush=True)


if __name__ == "__main__":
    main()
