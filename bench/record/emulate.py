"""Emulate a stack's network on one host with 2 GPUs, measure the sharding strategies side by side, and compare each
with bench.model.step_model's prediction for the same setup.

Each GPU stands for a node: the job runs with --ranks_per_node 1, NCCL is forced onto its socket transport over the
loopback (no P2P, no shared memory), and the loopback is capped at a stack's per-node bandwidth with a token-bucket
filter (bench/tools/loopback-throttle.sh). Every run is workload.trainer.fit on a fresh local Ray cluster, as
bench.record.scaling runs it, and starts with the job's own fabric check, whose bus bandwidth the prediction uses.

    bash bench/tools/loopback-throttle.sh fetch bench/tools/tc          # here: Debian's tc, carried to the GPU host
    python3 -m bench.record.emulate --tc bench/tools/tc --rates 40gbit,100gbit   # on nvidia-h200-x2 (root, for tc)
    python -m bench.record.emulate --device cpu                    # a smoke run of this script: gloo, no cap

Two GPUs make 2 nodes of 1 GPU, not the dev stack's 2 x 4: HSDP there is plain replication (an all-reduce of every
gradient), so the emulation checks the model's bytes, bandwidth and overlap, not the dev stack's figures.
The recipe runs with its own loop (recipe_train_func) through the same fit.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import ray
import ray.train
import ray.train.torch
import torch.distributed as dist

from bench.common import announce, benchmark_parser, recipe_model
from bench.model import step_inputs, step_model
from bench.record.scaling import SOCKET_FALLBACK, run
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.fabric import bandwidth as fabric
from workload.model.build import NAMED_CONFIGS
from workload.trainer import fit

THROTTLE = Path(__file__).resolve().parent / "tools" / "loopback-throttle.sh"
# Nodes' traffic between the two local GPUs goes over lo, as it would over a node's network; NCCL must not pick a
# faster local path.
SOCKETS_ON_LOOPBACK = {**SOCKET_FALLBACK, "NCCL_SOCKET_IFNAME": "lo"}
# (bench.model.step_model strategy, workload flags): the strategies a 2 x 1 emulation can tell apart.
STRATEGIES = {
    "recipe": {},
    "project-full": {"sharding": "full", "reduce_dtype": "fp32"},
    "full-bf16": {"sharding": "full", "reduce_dtype": "bf16"},
    "hybrid": {"sharding": "hybrid", "reduce_dtype": "fp32"},
    "hybrid-bf16": {"sharding": "hybrid", "reduce_dtype": "bf16"},
}
# The bar for the model: within 15% of a measurement of the same setup.
TOLERANCE = 0.15


def recipe_train_func(config: dict) -> None:
    """The original recipe's loop under Ray Train (bench.common.recipe_model: bf16, FSDP1, plain AdamW, the
    Hugging Face loss), after the same fabric check as the workload; hands fit its final metrics like train_func."""
    cfg = TrainConfig(**config["train"])
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    checked = fabric.run_before_training(cfg.fabric_check_seconds, 0.0, device,
                                         print if rank == 0 else lambda line: None)
    model, optimizer = recipe_model(cfg, device)
    batches = random_batches(cfg, NAMED_CONFIGS[cfg.model_config]["vocab_size"], rank)
    step_times, loss_value = [], None
    for step in range(cfg.steps):
        started = time.perf_counter()
        batch = batches(step).to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        dist.all_reduce(loss_value := loss.detach().float())
        loss_value = loss_value.item() / world_size
        step_times.append(time.perf_counter() - started)
    timed = step_times[1:] or step_times
    final = {"world_size": world_size, "device": device.type, "steps": cfg.steps, "final_loss": loss_value,
             "tokens_per_s": cfg.batch_size * cfg.seq_len * world_size * len(timed) / sum(timed), "mfu": None,
             "nccl_logs": {}, "sharding": {"sharding": "recipe (FSDP1 full shard)"}, "fabric": checked}
    if rank == 0:
        config["final"].put(final)
    ray.train.report({"tokens_per_s": final["tokens_per_s"]})


@contextmanager
def loopback_cap(tc_dir: str | None, rate: str) -> Iterator[None]:
    """The loopback capped at `rate` while inside; uncapped again afterwards, also on an error."""
    if not tc_dir:
        yield
        return
    # A tbf on lo caps both directions together (each gets about half: bench/results/throttle-cpu-2026-12-01.jsonl).
    # loopback-throttle.sh now caps each direction of a veth pair between two namespaces instead, which needs one
    # Ray node in each namespace (the script's header); this script does not start them yet.
    sys.exit("--tc: the per-direction cap needs one Ray node per network namespace (bench/tools/loopback-throttle.sh "
             "says how); bench.record.emulate does not start them yet")
    subprocess.run(["bash", str(THROTTLE), "on", tc_dir, rate], check=True)
    try:
        yield
    finally:
        subprocess.run(["bash", str(THROTTLE), "off", tc_dir], check=True)


def measure(name: str, cfg: TrainConfig, gpus: int, env: dict[str, str]) -> dict:
    if name == "recipe":
        ray.init(num_gpus=gpus, include_dashboard=False, runtime_env={"env_vars": env} if env else None)
        try:
            _, final = fit(cfg, train_loop=recipe_train_func)
        finally:
            ray.shutdown()
        return final
    return run(cfg, gpus, env, None)


def predicted(name: str, bus_gbytes_per_s: float, cfg: TrainConfig) -> dict:
    """bench.model.step_model's figures for 2 nodes of 1 H200 whose network is the fabric check's bus bandwidth."""
    hardware = step_inputs.Hardware("emulated", "H200", nodes=2, gpus_per_node=1,
                                   inter_node_gbytes_per_s=bus_gbytes_per_s,
                                   intra_node_gbytes_per_s=float("inf"), gpu_memory_gib=141.0)
    strategy = next(strategy for strategy in step_inputs.STRATEGIES if strategy.name == name)
    measured = step_inputs.Assumptions(network_efficiency=1.0)  # the bus bandwidth is already the measured one
    figures = step_model.predict(strategy, hardware, cfg.batch_size, cfg.seq_len, measured)
    serialized = step_model.predict(strategy, hardware, cfg.batch_size, cfg.seq_len,
                                    dataclasses.replace(measured, links="serialized"))
    return {**figures, "tokens_per_s_serialized": serialized["tokens_per_s"]}


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(__doc__, steps=8)
    parser.add_argument("--rates", default="40gbit", help="loopback caps, tc's units (40gbit: the dev stack's node)")
    parser.add_argument("--tc", default="", help="the directory `loopback-throttle.sh fetch` filled; empty: no cap")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--fabric_check_seconds", type=float, default=3.0)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    announce()
    on_gpu = args.device != "cpu"
    if on_gpu and not args.tc:
        sys.exit("--tc DIR is needed on the GPU host: without a cap the loopback runs at about 13.5 GB/s")
    if on_gpu and os.geteuid() != 0:
        sys.exit("capping the loopback needs root (tc qdisc)")
    gpus = 2 if on_gpu else 0
    env = SOCKETS_ON_LOOPBACK if on_gpu else {}
    if not on_gpu:  # the smoke run's small shapes
        args.model_config, args.batch_size, args.seq_len, args.steps = "tiny", 2, 32, 3
        args.fabric_check_seconds = min(args.fabric_check_seconds, 0.3)
    lines = []
    for rate in args.rates.split(",") if args.tc else ["uncapped"]:
        with loopback_cap(args.tc or None, rate):
            for name in args.strategies.split(","):
                cfg = TrainConfig(model_config=args.model_config, batch_size=args.batch_size, seq_len=args.seq_len,
                                  steps=args.steps, num_workers=2, ranks_per_node=1,
                                  fabric_check_seconds=args.fabric_check_seconds, **STRATEGIES[name])
                summary = measure(name, cfg, gpus, env)
                line = {"rate": rate, "strategy": name, "measured_tokens_per_s": round(summary["tokens_per_s"]),
                        "bus_gbytes_per_s": summary["fabric"]["bus_gbytes_per_s"],
                        "sharding": summary["sharding"], "final_loss": summary["final_loss"]}
                if on_gpu:
                    model = predicted(name, line["bus_gbytes_per_s"], cfg)
                    line.update(predicted_tokens_per_s=round(model["tokens_per_s"]),
                                predicted_tokens_per_s_serialized=round(model["tokens_per_s_serialized"]),
                                measured_over_predicted=round(summary["tokens_per_s"] / model["tokens_per_s"], 3))
                    line["within_15_percent"] = abs(line["measured_over_predicted"] - 1) <= TOLERANCE
                lines.append(line)
                print(json.dumps(line), flush=True)
        measured = {line["strategy"]: line["measured_tokens_per_s"] for line in lines if line["rate"] == rate}
        if "recipe" in measured:
            print(json.dumps({"rate": rate, "measured_speedup_vs_recipe": {
                name: round(value / measured["recipe"], 3) for name, value in measured.items()}}), flush=True)


if __name__ == "__main__":
    main()
